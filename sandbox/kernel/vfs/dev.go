package vfs

import (
	"encoding/binary"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// devKind is what a synthetic /dev node does on read and write.
type devKind int

const (
	devDir devKind = iota
	devNull
	devZero
	devFull
	devRandom
	devTTY
	devMountPoint // a mount under /dev: listed here, served by its own mount
)

// devNode is one entry of the sandbox's /dev.
type devNode struct {
	name         string
	kind         devKind
	ino          uint64
	major, minor uint32
	dir          bool // for devMountPoint: the mount is a directory
}

// devFS is the sandbox's own /dev. It never touches the host's /dev.
type devFS struct {
	nodes []*devNode // sorted by name, without the directory itself
	root  *devNode
	mtime unix.Timespec
}

// devDev is the st_dev reported for synthetic /dev entries (devtmpfs is usually 0:5).
var devDev = unix.Mkdev(0, 5)

func newDevFS() *devFS {
	d := &devFS{root: &devNode{name: "dev", kind: devDir, ino: 1}}
	for _, n := range []*devNode{
		{name: "null", kind: devNull, major: 1, minor: 3},
		{name: "zero", kind: devZero, major: 1, minor: 5},
		{name: "full", kind: devFull, major: 1, minor: 7},
		{name: "random", kind: devRandom, major: 1, minor: 8},
		{name: "urandom", kind: devRandom, major: 1, minor: 9},
		{name: "tty", kind: devTTY, major: 5, minor: 0},
	} {
		d.nodes = append(d.nodes, n)
	}
	d.sortNodes()
	d.mtime = unix.NsecToTimespec(time.Now().UnixNano())
	return d
}

func (d *devFS) sortNodes() {
	sort.Slice(d.nodes, func(i, j int) bool { return d.nodes[i].name < d.nodes[j].name })
	for i, n := range d.nodes {
		n.ino = uint64(i) + 2
	}
}

// addMountName lists a mount under /dev (such as /dev/shm) in the /dev directory.
func (d *devFS) addMountName(name string, dir bool) {
	for _, n := range d.nodes {
		if n.name == name {
			return
		}
	}
	d.nodes = append(d.nodes, &devNode{name: name, kind: devMountPoint, dir: dir})
	d.sortNodes()
}

// lookup finds the node for a path below /dev ("." is /dev itself).
func (d *devFS) lookup(r resolved) (*devNode, error) {
	if r.rel == "." {
		return d.root, nil
	}
	name, rest, more := cut(r.rel)
	for _, n := range d.nodes {
		if n.name != name {
			continue
		}
		if more && rest != "" || r.slash {
			// Only the directory has children; mount points under /dev were matched by their
			// own mount before reaching here.
			return nil, unix.ENOTDIR
		}
		return n, nil
	}
	return nil, unix.ENOENT
}

func cut(rel string) (first, rest string, more bool) {
	for i := 0; i < len(rel); i++ {
		if rel[i] == '/' {
			return rel[:i], rel[i+1:], true
		}
	}
	return rel, "", false
}

func (d *devFS) stat(n *devNode) unix.Stat_t {
	st := unix.Stat_t{
		Dev:     devDev,
		Ino:     n.ino,
		Nlink:   1,
		Blksize: 4096,
		Atim:    d.mtime,
		Mtim:    d.mtime,
		Ctim:    d.mtime,
	}
	switch {
	case n.kind == devDir:
		st.Mode = unix.S_IFDIR | 0o755
		st.Nlink = 2
	case n.kind == devMountPoint && n.dir:
		st.Mode = unix.S_IFDIR | 0o755
		st.Nlink = 2
	case n.kind == devMountPoint:
		st.Mode = unix.S_IFREG | 0o644
	default:
		st.Mode = unix.S_IFCHR | 0o666
		st.Rdev = unix.Mkdev(n.major, n.minor)
	}
	return st
}

func (n *devNode) dtype() uint8 {
	switch {
	case n.kind == devDir, n.kind == devMountPoint && n.dir:
		return unix.DT_DIR
	case n.kind == devMountPoint:
		return unix.DT_REG
	default:
		return unix.DT_CHR
	}
}

// read and write implement the character devices.
func (n *devNode) read(p []byte) (int, error) {
	switch n.kind {
	case devNull:
		return 0, nil
	case devZero, devFull:
		clear(p)
		return len(p), nil
	case devRandom:
		// getrandom never blocks once the host pool is initialised, which it is long before a
		// sandbox starts; short reads are returned as they are, like the real device.
		for {
			got, err := unix.Getrandom(p, 0)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return 0, err
			}
			return got, nil
		}
	case devDir:
		return 0, unix.EISDIR
	}
	return 0, unix.EINVAL
}

func (n *devNode) write(p []byte) (int, error) {
	switch n.kind {
	case devNull, devZero, devRandom:
		return len(p), nil
	case devFull:
		return 0, unix.ENOSPC
	case devDir:
		return 0, unix.EISDIR
	}
	return 0, unix.EINVAL
}

// getdents fills p with linux_dirent64 records of /dev starting at entry *off; *off becomes the
// index of the next entry. The first two entries are "." and "..".
func (d *devFS) getdents(p []byte, off *int64) (int, error) {
	written := 0
	for {
		i := *off
		var name string
		var ino uint64
		var typ uint8
		switch {
		case i == 0:
			name, ino, typ = ".", d.root.ino, unix.DT_DIR
		case i == 1:
			name, ino, typ = "..", d.root.ino, unix.DT_DIR // the root's inode is the rootfs's; unknown here
		case int(i-2) < len(d.nodes):
			n := d.nodes[i-2]
			name, ino, typ = n.name, n.ino, n.dtype()
			if ino == 0 {
				ino = uint64(i)
			}
		default:
			return written, nil
		}
		w, ok, err := appendDirent(p, written, ino, i+1, typ, name)
		if !ok {
			return w, err
		}
		written = w
		*off = i + 1
	}
}

// direntLen is the size of a linux_dirent64 record: 19 bytes of header, the name, a NUL, padded to 8.
// appendDirent puts one record at p[written:] and returns the new length; ok is false when it
// does not fit (with EINVAL if not even the first record fits).
func appendDirent(p []byte, written int, ino uint64, off int64, typ uint8, name string) (n int, ok bool, err error) {
	rec := direntLen(name)
	if written+rec > len(p) {
		if written == 0 {
			return 0, false, unix.EINVAL
		}
		return written, false, nil
	}
	putDirent(p[written:written+rec], ino, off, typ, name)
	return written + rec, true, nil
}

func direntLen(name string) int {
	return (19 + len(name) + 1 + 7) &^ 7
}

func putDirent(b []byte, ino uint64, off int64, typ uint8, name string) {
	clear(b)
	binary.LittleEndian.PutUint64(b[0:], ino)
	binary.LittleEndian.PutUint64(b[8:], uint64(off))
	binary.LittleEndian.PutUint16(b[16:], uint16(len(b)))
	b[18] = typ
	copy(b[19:], name)
}
