package kernel

import (
	"encoding/binary"
	"slices"

	"golang.org/x/sys/unix"
)

// Credentials. A process has Linux's user and group ids (real, effective, saved, file system)
// and supplementary groups; euid 0 is privileged, as without a capability model. The host
// enforces file permissions: before a task's system call its carrier takes the process's file
// system ids and groups for its own thread (setfsuid, setfsgid, setgroups act on the calling
// thread only), so the host checks every open, create, chmod and chown as it would the tenant's,
// and what the tenant creates belongs to it. Set-user-ID programs grant nothing at execve.
type creds struct {
	ruid, euid, suid, fsuid uint32
	rgid, egid, sgid, fsgid uint32
	groups                  []uint32
}

func (c *creds) privileged() bool { return c.euid == 0 }

// hostCreds is what a carrier's thread holds now (all zero: the sandbox's own, root).
type hostCreds struct {
	fsuid, fsgid uint32
	groups       []uint32
	gen          uint64 // the process's credsGen they were taken at
}

// applyCreds gives the carrier's thread the process's file system ids, when they changed: a
// generation number spares the lock on the system call's way in.
func (t *Task) applyCreds() {
	p := t.p
	gen := p.credsGen.Load()
	if gen == t.host.gen {
		return
	}
	p.mu.Lock()
	c := p.creds
	p.mu.Unlock()
	h := &t.host
	h.gen = gen
	if h.fsuid == c.fsuid && h.fsgid == c.fsgid && slices.Equal(h.groups, c.groups) {
		return
	}
	// Groups and gid first, while the thread is still privileged enough to set them.
	setThreadGroups(c.groups)
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(c.fsgid), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(c.fsuid), 0, 0)
	*h = hostCreds{fsuid: c.fsuid, fsgid: c.fsgid, groups: c.groups, gen: gen}
}

// dropCreds gives the carrier's thread back the sandbox's own ids, before it leaves the task.
func (t *Task) dropCreds() {
	if t.host.fsuid == 0 && t.host.fsgid == 0 && len(t.host.groups) == 0 {
		return
	}
	unix.RawSyscall(unix.SYS_SETFSUID, 0, 0, 0)
	unix.RawSyscall(unix.SYS_SETFSGID, 0, 0, 0)
	setThreadGroups(nil)
	t.host = hostCreds{gen: ^uint64(0)} // taken again at the next call, if any
}

func setThreadGroups(groups []uint32) {
	var ptr uintptr
	if len(groups) > 0 {
		ptr = uintptr(unsafePointer(&groups[0]))
	}
	unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), ptr, 0)
}

func sysGetuid(t *Task, a sysargs) (uint64, error)  { return uint64(t.p.getCreds().ruid), nil }
func sysGeteuid(t *Task, a sysargs) (uint64, error) { return uint64(t.p.getCreds().euid), nil }
func sysGetgid(t *Task, a sysargs) (uint64, error)  { return uint64(t.p.getCreds().rgid), nil }
func sysGetegid(t *Task, a sysargs) (uint64, error) { return uint64(t.p.getCreds().egid), nil }

func (p *Process) getCreds() creds {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.creds
}

func sysGetresuid(t *Task, a sysargs) (uint64, error) {
	c := t.p.getCreds()
	return 0, t.putIds(a, c.ruid, c.euid, c.suid)
}

func sysGetresgid(t *Task, a sysargs) (uint64, error) {
	c := t.p.getCreds()
	return 0, t.putIds(a, c.rgid, c.egid, c.sgid)
}

func (t *Task) putIds(a sysargs, ids ...uint32) error {
	var b [4]byte
	for i, id := range ids {
		binary.LittleEndian.PutUint32(b[:], id)
		if err := t.p.k.svc.CopyOut(t.p.as, a[i], b[:]); err != nil {
			return err
		}
	}
	return nil
}

func sysGetgroups(t *Task, a sysargs) (uint64, error) {
	c := t.p.getCreds()
	n := int32(a[0])
	if n < 0 {
		return 0, unix.EINVAL
	}
	if n == 0 {
		return uint64(len(c.groups)), nil
	}
	if int(n) < len(c.groups) {
		return 0, unix.EINVAL
	}
	b := make([]byte, 4*len(c.groups))
	for i, g := range c.groups {
		binary.LittleEndian.PutUint32(b[4*i:], g)
	}
	return uint64(len(c.groups)), t.p.k.svc.CopyOut(t.p.as, a[1], b)
}

const noChange = ^uint32(0) // -1: leave the id as it is

// setres is setresuid/setresgid's rule: privileged, anything; otherwise each new id must be
// one of the current real, effective or saved ids. The file system id follows the effective.
func setres(c *creds, r, e, s uint32, gid bool) error {
	ids := []*uint32{&c.ruid, &c.euid, &c.suid, &c.fsuid}
	if gid {
		ids = []*uint32{&c.rgid, &c.egid, &c.sgid, &c.fsgid}
	}
	if !c.privileged() {
		for _, v := range []uint32{r, e, s} {
			if v != noChange && v != *ids[0] && v != *ids[1] && v != *ids[2] {
				return unix.EPERM
			}
		}
	}
	for i, v := range []uint32{r, e, s} {
		if v != noChange {
			*ids[i] = v
		}
	}
	*ids[3] = *ids[1]
	return nil
}

func (p *Process) changeCreds(fn func(c *creds) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.creds
	c.groups = slices.Clone(c.groups)
	if err := fn(&c); err != nil {
		return err
	}
	p.creds = c
	p.credsGen.Add(1)
	return nil
}

func sysSetresuid(t *Task, a sysargs) (uint64, error) {
	return 0, t.p.changeCreds(func(c *creds) error { return setres(c, uint32(a[0]), uint32(a[1]), uint32(a[2]), false) })
}

func sysSetresgid(t *Task, a sysargs) (uint64, error) {
	return 0, t.p.changeCreds(func(c *creds) error { return setres(c, uint32(a[0]), uint32(a[1]), uint32(a[2]), true) })
}

// setuid: privileged, all three ids; otherwise the effective one, to the real or saved id.
func sysSetuid(t *Task, a sysargs) (uint64, error) {
	id := uint32(a[0])
	return 0, t.p.changeCreds(func(c *creds) error {
		if c.privileged() {
			return setres(c, id, id, id, false)
		}
		return setres(c, noChange, id, noChange, false)
	})
}

func sysSetgid(t *Task, a sysargs) (uint64, error) {
	id := uint32(a[0])
	return 0, t.p.changeCreds(func(c *creds) error {
		if c.privileged() {
			return setres(c, id, id, id, true)
		}
		return setres(c, noChange, id, noChange, true)
	})
}

// setreuid(r, e): a changed real id, or an effective one other than the real, sets the saved
// id to the new effective one.
func sysSetreuid(t *Task, a sysargs) (uint64, error) { return setre(t, a, false) }
func sysSetregid(t *Task, a sysargs) (uint64, error) { return setre(t, a, true) }

func setre(t *Task, a sysargs, gid bool) (uint64, error) {
	r, e := uint32(a[0]), uint32(a[1])
	return 0, t.p.changeCreds(func(c *creds) error {
		real, eff := c.ruid, c.euid
		if gid {
			real, eff = c.rgid, c.egid
		}
		if !c.privileged() && (r != noChange && r != real && r != eff) {
			return unix.EPERM
		}
		s := noChange
		newE := eff
		if e != noChange {
			newE = e
		}
		if r != noChange || e != noChange && e != real {
			s = newE
		}
		return setres(c, r, e, s, gid)
	})
}

func sysSetgroups(t *Task, a sysargs) (uint64, error) {
	n := int(int32(a[0]))
	if n < 0 || n > 65536 {
		return 0, unix.EINVAL
	}
	b := make([]byte, 4*n)
	if n > 0 {
		if err := t.p.k.svc.CopyIn(t.p.as, b, a[1]); err != nil {
			return 0, err
		}
	}
	groups := make([]uint32, n)
	for i := range groups {
		groups[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return 0, t.p.changeCreds(func(c *creds) error {
		if !c.privileged() {
			return unix.EPERM
		}
		c.groups = groups
		return nil
	})
}

// setfsuid and setfsgid return the previous id; a change a process may not make is ignored.
func sysSetfsuid(t *Task, a sysargs) (uint64, error) { return setfs(t, uint32(a[0]), false) }
func sysSetfsgid(t *Task, a sysargs) (uint64, error) { return setfs(t, uint32(a[0]), true) }

func setfs(t *Task, id uint32, gid bool) (uint64, error) {
	var old uint32
	t.p.changeCreds(func(c *creds) error {
		ids := []uint32{c.ruid, c.euid, c.suid, c.fsuid}
		fs := &c.fsuid
		if gid {
			ids = []uint32{c.rgid, c.egid, c.sgid, c.fsgid}
			fs = &c.fsgid
		}
		old = *fs
		if id != noChange && (c.privileged() || slices.Contains(ids, id)) {
			*fs = id
		}
		return nil
	})
	return uint64(old), nil
}

// mayKill is kill(2)'s permission: privileged, or the sender's real or effective uid is the
// target's real or saved uid.
func mayKill(from, to *Process) bool {
	f, t := from.getCreds(), to.getCreds()
	return f.privileged() || f.ruid == t.ruid || f.ruid == t.suid || f.euid == t.ruid || f.euid == t.suid
}
