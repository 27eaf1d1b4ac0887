package vfs

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Mount makes a host directory (or a single host file) visible at Dest inside the container.
type Mount struct {
	Dest     string // absolute path inside the container
	Source   string // host path; trusted (it comes from the bundle, not the tenant)
	ReadOnly bool
}

// mountKind says who serves a mount.
type mountKind int

const (
	mountHost   mountKind = iota // a host directory or file, reached through fd
	mountDev                     // the sandbox's own /dev
	mountHidden                  // /sys: not there yet, everything is ENOENT
	mountSynth                   // /proc: served by the view's Synthetic (ENOENT without one)
)

// mountPoint is one entry of the container's mount table.
type mountPoint struct {
	dest     string // cleaned absolute path inside the container
	kind     mountKind
	fd       int  // O_PATH fd of the host root (mountHost)
	dir      bool // the host root is a directory (else a single file)
	ro       bool
	hostPath string // what /proc/self/fd shows for fd; used to turn host paths into container paths
}

// FS is one container's view: its rootfs, its mounts over it, the sandbox's own /dev and, in a
// process's View, the kernel's /proc. It is safe for concurrent use.
type FS struct {
	*fsCore
	proc  Synthetic // serves /proc; nil: /proc is absent (ENOENT)
	asker int       // the pid handed to proc.Lookup (what "self" means)
}

// fsCore is what every View of one container's FS shares: the mounts and their lifetime.
type fsCore struct {
	mounts []*mountPoint // longest dest first; the root "/" is last
	dev    *devFS

	// The mount fds are closed only when no call is using them: a closed fd number can be
	// reused by the host for anything, and a lookup relative to it would then escape.
	inflight atomic.Int64
	closed   atomic.Bool
	released atomic.Bool
}

// enter marks a call in progress; false (EBADF for the caller) once the FS is closed.
func (fs *FS) enter() bool {
	fs.inflight.Add(1)
	if fs.closed.Load() {
		fs.exit()
		return false
	}
	return true
}

// exit ends a call; the last one out after Close releases the mount fds.
func (fs *FS) exit() {
	if fs.inflight.Add(-1) == 0 && fs.closed.Load() {
		fs.release()
	}
}

// resolveFlags confine every host lookup to the root fd it starts from. Magic links (/proc/*/fd,
// /proc/*/root) could jump anywhere, so they are refused even if a mount exposes a procfs.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// New opens the container's rootfs and mounts. The host paths are opened once, here; later lookups
// only use the resulting fds.
func New(rootfs string, mounts []Mount) (*FS, error) {
	fs := &FS{fsCore: &fsCore{dev: newDevFS()}}
	root, err := openMountRoot(rootfs, true)
	if err != nil {
		return nil, fmt.Errorf("vfs: rootfs %q: %w", rootfs, err)
	}
	root.dest = "/"
	byDest := map[string]*mountPoint{}
	closeAll := func() {
		unix.Close(root.fd)
		for _, m := range byDest {
			unix.Close(m.fd)
		}
	}
	for _, m := range mounts {
		if !path.IsAbs(m.Dest) {
			closeAll()
			return nil, fmt.Errorf("vfs: mount %q at %q: destination is not absolute: %w", m.Source, m.Dest, unix.EINVAL)
		}
		dest := path.Clean(m.Dest)
		switch {
		case dest == "/":
			closeAll()
			return nil, fmt.Errorf("vfs: mount %q over /: use the rootfs instead: %w", m.Source, unix.EINVAL)
		case dest == "/dev", under(dest, "/proc"), under(dest, "/sys"):
			// The sandbox serves these itself; the bundle's devtmpfs/procfs/sysfs mounts are not
			// host paths we may expose.
			continue
		}
		mp, err := openMountRoot(m.Source, false)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("vfs: mount %q at %q: %w", m.Source, m.Dest, err)
		}
		mp.dest = dest
		mp.ro = m.ReadOnly
		if old := byDest[dest]; old != nil {
			unix.Close(old.fd) // a later mount at the same place hides the earlier one
		}
		byDest[dest] = mp
	}
	for _, m := range byDest {
		fs.mounts = append(fs.mounts, m)
	}
	fs.mounts = append(fs.mounts,
		&mountPoint{dest: "/dev", kind: mountDev, fd: -1, dir: true},
		&mountPoint{dest: "/proc", kind: mountSynth, fd: -1, dir: true},
		&mountPoint{dest: "/sys", kind: mountHidden, fd: -1, dir: true},
	)
	sort.SliceStable(fs.mounts, func(i, j int) bool { return len(fs.mounts[i].dest) > len(fs.mounts[j].dest) })
	fs.mounts = append(fs.mounts, root)
	for _, m := range fs.mounts {
		if m.kind == mountHost && strings.HasPrefix(m.dest, "/dev/") {
			fs.dev.addMountName(strings.SplitN(m.dest[len("/dev/"):], "/", 2)[0], m.dir || strings.Contains(m.dest[len("/dev/"):], "/"))
		}
	}
	return fs, nil
}

// openMountRoot opens a trusted host path as an O_PATH fd.
func openMountRoot(hostPath string, mustBeDir bool) (*mountPoint, error) {
	fd, err := unix.Open(hostPath, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if mustBeDir && !isDir {
		unix.Close(fd)
		return nil, fmt.Errorf("not a directory: %w", unix.ENOTDIR)
	}
	if !isDir && st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("neither a directory nor a regular file (mode %#o): %w", st.Mode, unix.EINVAL)
	}
	hp, _ := fdHostPath(fd)
	return &mountPoint{kind: mountHost, fd: fd, dir: isDir, hostPath: hp}, nil
}

// Close releases the host fds of the rootfs and mounts, at once or when the calls in progress
// end. Later calls fail with EBADF; Files opened through the FS stay usable.
func (fs *FS) Close() error {
	if fs.closed.Swap(true) {
		return nil
	}
	if fs.inflight.Load() == 0 {
		return fs.release()
	}
	return nil
}

func (fs *FS) release() error {
	if fs.released.Swap(true) {
		return nil
	}
	var errs []error
	for _, m := range fs.mounts {
		if m.kind == mountHost {
			if err := unix.Close(m.fd); err != nil {
				errs = append(errs, fmt.Errorf("vfs: close mount %q: %w", m.dest, err))
			}
		}
	}
	return errors.Join(errs...)
}

// under reports whether p is dir or inside it (both cleaned and absolute).
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir) && p[len(dir)] == '/'
}

// resolved is a tenant path after lexical cleaning and mount selection; nothing is opened yet.
type resolved struct {
	clean string      // cleaned absolute path inside the container
	m     *mountPoint // the mount that serves it
	rel   string      // path below m's root ("." for the root itself)
	slash bool        // the tenant's path ended in "/": the target must be a directory
}

// absPath joins a tenant path to the cwd and checks what the kernel's path walk would check first.
func absPath(cwd, p string) (string, error) {
	if p == "" {
		return "", unix.ENOENT
	}
	if len(p) >= unix.PathMax || strings.IndexByte(p, 0) >= 0 {
		return "", unix.ENAMETOOLONG
	}
	if p[0] == '/' {
		return p, nil
	}
	if cwd == "" || cwd[0] != '/' {
		cwd = "/" + cwd
	}
	return cwd + "/" + p, nil
}

// resolve chooses the mount for a tenant path.
func (fs *FS) resolve(cwd, p string) (resolved, error) {
	abs, err := absPath(cwd, p)
	if err != nil {
		return resolved{}, err
	}
	r := resolved{clean: path.Clean(abs), slash: strings.HasSuffix(abs, "/")}
	for _, m := range fs.mounts {
		if under(r.clean, m.dest) {
			r.m = m
			break
		}
	}
	r.rel = strings.TrimPrefix(strings.TrimPrefix(r.clean, r.m.dest), "/")
	if r.rel == "" {
		r.rel = "."
	}
	if r.m.kind == mountHidden || r.m.kind == mountSynth && fs.proc == nil {
		return r, unix.ENOENT
	}
	return r, nil
}

// hostRel is the path handed to openat2: rel, keeping a trailing slash so the host checks that
// the target is a directory.
func (r resolved) hostRel() string {
	if r.slash && r.rel != "." {
		return r.rel + "/"
	}
	return r.rel
}

// openHost opens a resolved host path with openat2, confined to its mount. flags must already be
// valid for openat2 (see hostOpenFlags).
func openHost(r resolved, flags int, mode uint32) (int, error) {
	m := r.m
	if !m.dir {
		return reopenFileMount(r, flags, mode)
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolveFlags}
	if flags&(unix.O_CREAT|unix.O_TMPFILE) != 0 {
		how.Mode = uint64(mode & 0o7777)
	}
	for try := 0; ; try++ {
		fd, err := unix.Openat2(m.fd, r.hostRel(), &how)
		// RESOLVE_IN_ROOT gives EAGAIN when a rename raced with a ".." step; the lookup is
		// simply redone.
		if err == unix.EAGAIN && try < 8 {
			continue
		}
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// reopenFileMount opens a mount whose source is one host file (such as /etc/hosts). Its O_PATH fd
// is reopened through /proc/self/fd: the magic link is ours, not the tenant's, and it names
// exactly that file.
func reopenFileMount(r resolved, flags int, mode uint32) (int, error) {
	if r.rel != "." || r.slash {
		return -1, unix.ENOTDIR
	}
	if flags&unix.O_CREAT != 0 && flags&unix.O_EXCL != 0 {
		return -1, unix.EEXIST
	}
	if flags&unix.O_TMPFILE == unix.O_TMPFILE {
		return -1, unix.ENOTDIR
	}
	flags &^= unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW
	for {
		fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(r.m.fd), flags|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// openPath opens a resolved host path as O_PATH, following a trailing symlink or not.
func openPath(r resolved, follow bool) (int, error) {
	flags := unix.O_PATH
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	return openHost(r, flags, 0)
}

// fdHostPath is the host path of an fd, from /proc/self/fd.
func fdHostPath(fd int) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// containerPath turns the host path of an fd opened through m into the canonical path inside the
// container, or returns fallback when the host path is not below m's root (a directory moved away
// by the host, or an unreadable /proc).
func containerPath(m *mountPoint, fd int, fallback string) string {
	if m == nil || m.kind != mountHost || m.hostPath == "" {
		return fallback
	}
	hp, err := fdHostPath(fd)
	if err != nil || strings.HasSuffix(hp, " (deleted)") {
		return fallback
	}
	var rest string
	switch {
	case hp == m.hostPath:
	case m.hostPath == "/":
		rest = hp
	case strings.HasPrefix(hp, m.hostPath) && hp[len(m.hostPath)] == '/':
		rest = hp[len(m.hostPath):]
	default:
		return fallback
	}
	return path.Join(m.dest, rest)
}
