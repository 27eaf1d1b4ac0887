package kernel

import (
	"github.com/endovisor/endo/sandbox/kernel/vfs"
)

// container is what the processes of one container share: its file system view. The first
// process spawned in it is its init, to which orphans are reparented.
type container struct {
	id   string
	fs   *vfs.FS
	refs int // live processes
	init *Process
}

// acquireContainer returns the container a spec names, creating it (and opening its rootfs and
// mounts) for its first process.
func (k *Kernel) acquireContainer(spec ProcessSpec) (*container, error) {
	k.mu.Lock()
	if c, ok := k.containers[spec.Container]; ok && spec.Container != "" {
		c.refs++
		k.mu.Unlock()
		return c, nil
	}
	k.mu.Unlock()
	fs, err := newContainerFS(spec)
	if err != nil {
		return nil, err
	}
	c := &container{id: spec.Container, fs: fs, refs: 1}
	k.mu.Lock()
	if spec.Container != "" {
		k.containers[spec.Container] = c
	}
	k.mu.Unlock()
	return c, nil
}

// holdContainer counts one more process (a fork) in c.
func (k *Kernel) holdContainer(c *container) {
	k.mu.Lock()
	c.refs++
	k.mu.Unlock()
}

// releaseContainer drops a process's hold; the last one closes the file system view.
func (k *Kernel) releaseContainer(c *container) {
	k.mu.Lock()
	c.refs--
	last := c.refs == 0
	if last && k.containers[c.id] == c {
		delete(k.containers, c.id)
	}
	k.mu.Unlock()
	if last {
		c.fs.Close()
	}
}
