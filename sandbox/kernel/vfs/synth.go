package vfs

import (
	"hash/fnv"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Synthetic is a read-only tree the kernel serves itself (/proc). Paths are relative to the mount
// ("" is its root, "self/stat", "12/fd/3"); asker is the pid of the process asking (what "self"
// means). Content is produced when a file is opened: a snapshot, like Linux's seq files at open.
//
// Lookup is called for every component of a path, so a directory's node should be cheap to make.
// Errors must wrap a unix.Errno (ENOENT for a name that is not there).
type Synthetic interface {
	Lookup(rel string, asker int) (SynthNode, error)
}

// SynthNode is one entry of a Synthetic tree.
type SynthNode struct {
	Mode    uint32   // S_IFDIR|0555, S_IFREG|0444 or S_IFLNK|0777
	Content []byte   // regular files
	Target  string   // symlinks: relative to the link's directory, or an absolute container path
	Entries []string // directories: the names in it, without "." and ".."
	Ino     uint64   // 0: derived from the path
	// Magic marks a symlink that stands for an open file rather than a path (exe, fd/N): readlink
	// shows Target, but a path walk does not follow it by that path, which may name another file
	// by now, or none. Opening it (open, stat, execve) reaches the file itself through Reopen;
	// walking through it to a name below is ENOENT.
	Magic bool
	// Reopen opens the file a magic link stands for anew, with open(2)'s flags: a new open file
	// description of that very file, as Linux gives. nil: the link can only be read.
	Reopen func(flags int) (*File, error)
}

// magicLink is what a walk that ends on a magic link to follow returns instead of a resolution:
// open and stat serve the file itself (SynthNode.Reopen); every other call sees ENOENT.
type magicLink struct{ node SynthNode }

func (*magicLink) Error() string { return "magic link" }

// View returns a view of the same file system for one process: /proc is served by proc, and
// Lookup gets asker as the asking pid. The views share the mounts: closing any one closes them
// all (the container's FS is closed when its last process goes).
//
// Symlinks below /proc are followed by the view: a relative target through proc again (self ->
// "12", then "12/stat"), an absolute target (a cwd) through the whole container view. Magic links
// (exe, fd/N) reach the file they stand for when opened or stat'ed (SynthNode.Reopen).
func (fs *FS) View(proc Synthetic, asker int) *FS {
	return &FS{fsCore: fs.fsCore, proc: proc, asker: asker}
}

// maxSymlinks is Linux's limit on symlinks followed in one path walk.
const maxSymlinks = 40

// procDev is the st_dev of /proc entries (procfs is an anonymous device, 0:N).
var procDev = unix.Mkdev(0, 4)

// procMtime is what /proc entries report as their times: the sandbox's start.
var procMtime = unix.NsecToTimespec(time.Now().UnixNano())

// synthRes is a path resolved inside the synthetic mount.
type synthRes struct {
	node  SynthNode
	canon string // below the mount, "" for its root, symlinks in the middle resolved
}

// containerPath is the resolved entry's absolute path inside the container.
func (s *synthRes) containerPath(m *mountPoint) string {
	if s.canon == "" {
		return m.dest
	}
	return m.dest + "/" + s.canon
}

func splitRel(rel string) []string {
	if rel == "" || rel == "." {
		return nil
	}
	return strings.Split(rel, "/")
}

// synthWalk resolves r (in a synthetic mount) one component at a time. follow: follow a symlink
// in the last component. When an absolute symlink leads out of the mount, the result is the
// resolved path outside (out), which the caller serves like any other; otherwise res.
func (fs *FS) synthWalk(r resolved, follow bool) (res *synthRes, out *resolved, err error) {
	comps := splitRel(r.rel)
	cur := ""
	hops := 0
	for i := 0; i < len(comps); i++ {
		next := comps[i]
		if cur != "" {
			next = cur + "/" + comps[i]
		}
		n, err := fs.proc.Lookup(next, fs.asker)
		if err != nil {
			return nil, nil, err
		}
		last := i == len(comps)-1
		typ := n.Mode & unix.S_IFMT
		if typ == unix.S_IFLNK && (!last || follow || r.slash) {
			if n.Magic {
				if last && !r.slash && n.Reopen != nil {
					return nil, nil, &magicLink{node: n}
				}
				return nil, nil, unix.ENOENT
			}
			if hops++; hops > maxSymlinks {
				return nil, nil, unix.ELOOP
			}
			rest := strings.Join(comps[i+1:], "/")
			if strings.HasPrefix(n.Target, "/") {
				full := path.Join(n.Target, rest)
				if r.slash {
					full += "/"
				}
				r2, err := fs.resolve("/", full)
				if err != nil {
					return nil, nil, err
				}
				if r2.m.kind != mountSynth {
					return nil, &r2, nil
				}
				comps, cur, i = splitRel(r2.rel), "", -1
				continue
			}
			// A relative target stays in the mount; ".." cannot climb above its root.
			joined := strings.TrimPrefix(path.Clean("/"+cur+"/"+n.Target+"/"+rest), "/")
			comps, cur, i = splitRel(joined), "", -1
			continue
		}
		if !last && typ != unix.S_IFDIR {
			return nil, nil, unix.ENOTDIR
		}
		cur = next
		if last {
			res = &synthRes{node: n, canon: cur}
		}
	}
	if res == nil { // the mount's root
		n, err := fs.proc.Lookup("", fs.asker)
		if err != nil {
			return nil, nil, err
		}
		res = &synthRes{node: n}
	}
	if r.slash && res.node.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, nil, unix.ENOTDIR
	}
	return res, nil, nil
}

func (s *synthRes) isDir() bool  { return s.node.Mode&unix.S_IFMT == unix.S_IFDIR }
func (s *synthRes) isLink() bool { return s.node.Mode&unix.S_IFMT == unix.S_IFLNK }

// synthIno is an entry's inode number: the provider's, or a hash of its path.
func synthIno(n *SynthNode, canon string) uint64 {
	if n.Ino != 0 {
		return n.Ino
	}
	h := fnv.New64a()
	h.Write([]byte(canon))
	return h.Sum64() | 1<<62 // away from small numbers a provider may hand out
}

func synthStat(n *SynthNode, canon string) unix.Stat_t {
	st := unix.Stat_t{
		Dev:     procDev,
		Ino:     synthIno(n, canon),
		Mode:    n.Mode,
		Nlink:   1,
		Blksize: 1024,
		Atim:    procMtime,
		Mtim:    procMtime,
		Ctim:    procMtime,
	}
	switch n.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		st.Nlink = 2
	case unix.S_IFLNK:
		st.Size = int64(len(n.Target))
	}
	// Regular files report size 0, as Linux's /proc does: their content is made at open.
	return st
}

// synthAt resolves r when it lies in /proc: res is the entry served here, or, when an absolute
// symlink led out of /proc, res is nil and the returned resolved is to be served as usual.
func (fs *FS) synthAt(r resolved, follow bool) (*synthRes, resolved, error) {
	res, r, err := fs.synthAtMagic(r, follow)
	if _, ok := err.(*magicLink); ok {
		return nil, r, unix.ENOENT
	}
	return res, r, err
}

// synthAtMagic is synthAt for the calls that serve a magic link's file: a walk that ends on one
// returns a *magicLink error.
func (fs *FS) synthAtMagic(r resolved, follow bool) (*synthRes, resolved, error) {
	if r.m.kind != mountSynth {
		return nil, r, nil
	}
	res, out, err := fs.synthWalk(r, follow)
	if err != nil {
		return nil, r, err
	}
	if out != nil {
		return nil, *out, nil
	}
	return res, r, nil
}

// openSynth opens a resolved /proc entry. Everything is read-only: asking for write is EACCES.
func openSynth(m *mountPoint, res *synthRes, flags, tenantFlags int) (*File, error) {
	isPath := flags&unix.O_PATH != 0
	if flags&(unix.O_CREAT|unix.O_EXCL) == unix.O_CREAT|unix.O_EXCL {
		return nil, unix.EEXIST
	}
	switch {
	case res.isLink() && !isPath:
		return nil, unix.ELOOP // O_NOFOLLOW on a symlink
	case res.isDir():
		if flags&unix.O_TMPFILE == unix.O_TMPFILE {
			return nil, unix.EOPNOTSUPP
		}
		if !isPath && (flags&unix.O_ACCMODE != unix.O_RDONLY || flags&(unix.O_TRUNC|unix.O_CREAT) != 0) {
			return nil, unix.EISDIR
		}
	default:
		if flags&unix.O_DIRECTORY != 0 {
			return nil, unix.ENOTDIR
		}
		if !isPath && (flags&unix.O_ACCMODE != unix.O_RDONLY || flags&unix.O_TRUNC != 0) {
			return nil, unix.EACCES
		}
	}
	f := &File{fd: -1, syn: &synthFile{node: res.node, canon: res.canon}, path: res.containerPath(m)}
	f.flags.Store(int32(tenantFlags))
	f.refs.Store(1)
	return f, nil
}

// synthFile is an open /proc entry: the snapshot taken at open and the offset into it (bytes for
// a file, entries for a directory).
type synthFile struct {
	node  SynthNode
	canon string
	mu    sync.Mutex
	off   int64
}

func (s *synthFile) isDir() bool { return s.node.Mode&unix.S_IFMT == unix.S_IFDIR }

func (s *synthFile) readAt(p []byte, off int64) (int, error) {
	if s.isDir() {
		return 0, unix.EISDIR
	}
	if s.node.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, unix.EINVAL
	}
	if off < 0 {
		return 0, unix.EINVAL
	}
	if off >= int64(len(s.node.Content)) {
		return 0, nil
	}
	return copy(p, s.node.Content[off:]), nil
}

// read reads at the file offset into several buffers, as one read.
func (s *synthFile) read(bufs [][]byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := 0
	for _, b := range bufs {
		n, err := s.readAt(b, s.off)
		if err != nil {
			return 0, err
		}
		s.off += int64(n)
		total += n
		if n < len(b) {
			break
		}
	}
	return total, nil
}

func (s *synthFile) seek(off int64, whence int) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var base int64
	switch whence {
	case unix.SEEK_SET:
	case unix.SEEK_CUR:
		base = s.off
	case unix.SEEK_END:
		if s.isDir() {
			return 0, unix.EINVAL
		}
		base = int64(len(s.node.Content))
	default:
		return 0, unix.EINVAL
	}
	if base+off < 0 {
		return 0, unix.EINVAL
	}
	s.off = base + off
	return s.off, nil
}

// getdents lists the directory from entry s.off on: ".", "..", then the snapshot's entries. The
// types are DT_UNKNOWN (finding them would build every entry's content); callers stat.
func (s *synthFile) getdents(p []byte) (int, error) {
	if !s.isDir() {
		return 0, unix.ENOTDIR
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	written := 0
	for {
		i := s.off
		var name string
		var ino uint64
		typ := uint8(unix.DT_UNKNOWN)
		switch {
		case i == 0:
			name, ino, typ = ".", synthIno(&s.node, s.canon), unix.DT_DIR
		case i == 1:
			name, ino, typ = "..", synthIno(&SynthNode{}, path.Dir("/" + s.canon)[1:]), unix.DT_DIR
		case int(i-2) < len(s.node.Entries):
			name = s.node.Entries[i-2]
			child := name
			if s.canon != "" {
				child = s.canon + "/" + name
			}
			ino = synthIno(&SynthNode{}, child)
		default:
			return written, nil
		}
		w, ok, err := appendDirent(p, written, ino, i+1, typ, name)
		if !ok {
			return w, err
		}
		written = w
		s.off = i + 1
	}
}

// procStatfs describes /proc as Linux's procfs reports itself.
func procStatfs() unix.Statfs_t {
	return unix.Statfs_t{Type: unix.PROC_SUPER_MAGIC, Bsize: 4096, Namelen: 255, Frsize: 4096,
		Flags: unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC}
}

// Mounts lists the container's host mounts (not the rootfs, /dev or /proc), sorted by
// destination, for /proc/mounts. Source is the host path the mount was opened from.
func (fs *FS) Mounts() []Mount {
	var out []Mount
	for _, m := range fs.mounts {
		if m.kind == mountHost && m.dest != "/" {
			out = append(out, Mount{Dest: m.dest, Source: m.hostPath, ReadOnly: m.ro})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dest < out[j].Dest })
	return out
}
