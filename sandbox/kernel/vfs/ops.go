package vfs

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrOpenBlocks is returned by Open for a fifo opened without O_NONBLOCK: such an open waits for
// the other end. The kernel gives its vCPU back and calls OpenBlocking with the same arguments.
var ErrOpenBlocks = fmt.Errorf("vfs: opening a fifo waits for its peer: %w", unix.EAGAIN)

// validOpenFlags are the open(2) flags that mean something; open(2) ignores other bits, while
// openat2(2) would refuse them, so they are dropped.
const validOpenFlags = unix.O_ACCMODE | unix.O_CREAT | unix.O_EXCL | unix.O_NOCTTY | unix.O_TRUNC |
	unix.O_APPEND | unix.O_NONBLOCK | unix.O_DSYNC | unix.O_SYNC | unix.O_ASYNC | unix.O_DIRECT |
	unix.O_LARGEFILE | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NOATIME | unix.O_CLOEXEC |
	unix.O_PATH | unix.O_TMPFILE

// cleanOpenFlags turns the tenant's flags into what this package works with: known bits only,
// no O_CLOEXEC (the fd table's business) and no O_ASYNC (open(2) ignores it too; a host SIGIO
// must never reach the sandbox).
func cleanOpenFlags(flags int) int {
	flags &= validOpenFlags
	flags &^= unix.O_CLOEXEC | unix.O_ASYNC
	if flags&unix.O_PATH != 0 {
		// open(2) ignores everything else with O_PATH; openat2(2) refuses it.
		flags &= unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW
	}
	return flags
}

// Open opens path for the tenant. flags and mode are the tenant's (O_CLOEXEC is ignored: it
// belongs to the fd table). A fifo opened without O_NONBLOCK gives ErrOpenBlocks.
func (fs *FS) Open(cwd, p string, flags int, mode uint32) (*File, error) {
	return fs.open(cwd, p, flags, mode, false)
}

// OpenBlocking is Open for a caller that has given its vCPU back: a fifo open waits for its peer
// on the host.
func (fs *FS) OpenBlocking(cwd, p string, flags int, mode uint32) (*File, error) {
	return fs.open(cwd, p, flags, mode, true)
}

func (fs *FS) open(cwd, p string, flags int, mode uint32, mayWait bool) (*File, error) {
	if !fs.enter() {
		return nil, unix.EBADF
	}
	defer fs.exit()
	r, err := fs.resolve(cwd, p)
	if err != nil {
		return nil, err
	}
	flags = cleanOpenFlags(flags)
	// What F_GETFL shows: the kernel drops the open-time-only flags; x86-64 forces O_LARGEFILE.
	tenantFlags := flags&^(unix.O_CREAT|unix.O_EXCL|unix.O_NOCTTY|unix.O_TRUNC) | unix.O_LARGEFILE
	res, r, err := fs.synthAtMagic(r, flags&unix.O_NOFOLLOW == 0)
	if ml, ok := err.(*magicLink); ok {
		if flags&(unix.O_CREAT|unix.O_EXCL) == unix.O_CREAT|unix.O_EXCL {
			return nil, unix.EEXIST
		}
		return ml.node.Reopen(flags)
	}
	if err == unix.ENOENT && flags&unix.O_CREAT != 0 {
		return nil, unix.EACCES // nothing can be created in /proc
	}
	if err != nil {
		return nil, err
	}
	if res != nil {
		return openSynth(r.m, res, flags, tenantFlags)
	}
	if r.m.kind == mountDev {
		return fs.openDev(r, flags, tenantFlags)
	}
	if r.m.ro {
		if flags, err = roOpenFlags(r, flags); err != nil {
			return nil, err
		}
	}
	isPath := flags&unix.O_PATH != 0
	hostFlags := flags | unix.O_NOCTTY
	if isPath {
		hostFlags = flags
	}
	// Opened non-blocking on the host unless the caller may wait, so that a fifo is found out
	// before it can hold the vCPU.
	probe := !isPath && flags&unix.O_NONBLOCK == 0 && !mayWait
	if probe {
		hostFlags |= unix.O_NONBLOCK
	}
	fd, err := openHost(r, hostFlags, mode)
	if err == unix.ENXIO && probe && flags&unix.O_ACCMODE == unix.O_WRONLY && isFifo(r, flags) {
		return nil, ErrOpenBlocks // a fifo without a reader
	}
	if err != nil {
		return nil, err
	}
	var typ uint32
	if probe {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, err
		}
		typ = st.Mode & unix.S_IFMT
		if typ == unix.S_IFIFO && flags&unix.O_ACCMODE != unix.O_RDWR { // O_RDWR never waits
			unix.Close(fd)
			return nil, ErrOpenBlocks
		}
	}
	hostNB := hostFlags&unix.O_NONBLOCK != 0
	if !isPath && !hostNB {
		// The open waited (OpenBlocking); from now on the host fd is non-blocking and the
		// tenant's blocking reads and writes are emulated (see File.blockingIO).
		if hf, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, hf|unix.O_NONBLOCK); err == nil {
				hostNB = true
			}
		}
	}
	return newHostFile(fd, r.m, r.clean, tenantFlags, hostNB, typ), nil
}

// isFifo reports whether a path names a fifo.
func isFifo(r resolved, flags int) bool {
	fd, err := openPath(r, flags&unix.O_NOFOLLOW == 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

// roOpenFlags applies a read-only mount to an open: opening an existing file (and writing to a
// fifo, socket or device) is fine, creating or changing a file is EROFS.
func roOpenFlags(r resolved, flags int) (int, error) {
	if flags&unix.O_PATH != 0 {
		return flags, nil
	}
	if flags&unix.O_TMPFILE == unix.O_TMPFILE {
		return 0, unix.EROFS
	}
	writes := flags&unix.O_ACCMODE != unix.O_RDONLY || flags&unix.O_TRUNC != 0
	if !writes && flags&unix.O_CREAT == 0 {
		return flags, nil
	}
	fd, err := openPath(r, flags&(unix.O_NOFOLLOW|unix.O_EXCL) == 0)
	if err == unix.ENOENT && flags&unix.O_CREAT != 0 {
		return 0, unix.EROFS
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if flags&(unix.O_CREAT|unix.O_EXCL) == unix.O_CREAT|unix.O_EXCL {
		return 0, unix.EEXIST
	}
	flags &^= unix.O_CREAT | unix.O_EXCL
	if writes {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return 0, err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFIFO, unix.S_IFCHR, unix.S_IFSOCK, unix.S_IFBLK:
		case unix.S_IFDIR:
			return 0, unix.EISDIR
		default:
			return 0, unix.EROFS
		}
	}
	return flags, nil
}

func (fs *FS) openDev(r resolved, flags, tenantFlags int) (*File, error) {
	n, err := fs.dev.lookup(r)
	if err == unix.ENOENT && flags&unix.O_CREAT != 0 {
		return nil, unix.EROFS // the sandbox's /dev holds only its own nodes
	}
	if err != nil {
		return nil, err
	}
	if flags&(unix.O_CREAT|unix.O_EXCL) == unix.O_CREAT|unix.O_EXCL {
		return nil, unix.EEXIST
	}
	isPath := flags&unix.O_PATH != 0
	switch n.kind {
	case devMountPoint:
		return nil, unix.ENOENT // a directory on the way to a deeper mount, not a mount itself
	case devDir:
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
		if n.kind == devTTY && !isPath {
			return nil, unix.ENXIO // no controlling terminal yet
		}
	}
	return newDevFile(fs.dev, n, tenantFlags), nil
}

// Stat is stat(2) (follow) or lstat(2).
func (fs *FS) Stat(cwd, p string, follow bool) (unix.Stat_t, error) {
	if !fs.enter() {
		return unix.Stat_t{}, unix.EBADF
	}
	defer fs.exit()
	r, err := fs.resolve(cwd, p)
	if err != nil {
		return unix.Stat_t{}, err
	}
	res, r, err := fs.synthAtMagic(r, follow)
	if ml, ok := err.(*magicLink); ok {
		f, err := ml.node.Reopen(unix.O_PATH)
		if err != nil {
			return unix.Stat_t{}, err
		}
		defer f.DecRef()
		return f.Stat()
	}
	if err != nil {
		return unix.Stat_t{}, err
	}
	if res != nil {
		return synthStat(&res.node, res.canon), nil
	}
	if r.m.kind == mountDev {
		n, err := fs.dev.lookup(r)
		if err != nil {
			return unix.Stat_t{}, err
		}
		return fs.dev.stat(n), nil
	}
	fd, err := openPath(r, follow)
	if err != nil {
		return unix.Stat_t{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	return st, err
}

// Statx is statx(2) on a path (follow: without AT_SYMLINK_NOFOLLOW).
func (fs *FS) Statx(cwd, p string, follow bool, mask uint32) (unix.Statx_t, error) {
	if !fs.enter() {
		return unix.Statx_t{}, unix.EBADF
	}
	defer fs.exit()
	r, err := fs.resolve(cwd, p)
	if err != nil {
		return unix.Statx_t{}, err
	}
	res, r, err := fs.synthAt(r, follow)
	if err != nil {
		return unix.Statx_t{}, err
	}
	if res != nil {
		return statxFromStat(synthStat(&res.node, res.canon)), nil
	}
	if r.m.kind == mountDev {
		n, err := fs.dev.lookup(r)
		if err != nil {
			return unix.Statx_t{}, err
		}
		return statxFromStat(fs.dev.stat(n)), nil
	}
	fd, err := openPath(r, follow)
	if err != nil {
		return unix.Statx_t{}, err
	}
	defer unix.Close(fd)
	var stx unix.Statx_t
	err = unix.Statx(fd, "", unix.AT_EMPTY_PATH, int(mask), &stx)
	return stx, err
}

// Readlink is readlink(2): the target of a symlink, as stored.
func (fs *FS) Readlink(cwd, p string) (string, error) {
	if !fs.enter() {
		return "", unix.EBADF
	}
	defer fs.exit()
	r, err := fs.resolve(cwd, p)
	if err != nil {
		return "", err
	}
	res, r, err := fs.synthAt(r, false)
	if err != nil {
		return "", err
	}
	if res != nil {
		if !res.isLink() {
			return "", unix.EINVAL
		}
		return res.node.Target, nil
	}
	if r.m.kind == mountDev {
		if _, err := fs.dev.lookup(r); err != nil {
			return "", err
		}
		return "", unix.EINVAL
	}
	fd, err := openPath(r, false)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFLNK {
				return "", unix.EINVAL
			}
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// Access is access(2)/faccessat2(2) for the tenant, who is root inside; mode is F_OK or a mix of
// R_OK, W_OK, X_OK.
func (fs *FS) Access(cwd, p string, mode uint32) error {
	if !fs.enter() {
		return unix.EBADF
	}
	defer fs.exit()
	if mode&^uint32(unix.R_OK|unix.W_OK|unix.X_OK) != 0 {
		return unix.EINVAL
	}
	r, err := fs.resolve(cwd, p)
	if err != nil {
		return err
	}
	res, r, err := fs.synthAt(r, true)
	if err != nil {
		return err
	}
	if res != nil {
		if mode&unix.W_OK != 0 || mode&unix.X_OK != 0 && !res.isDir() {
			return unix.EACCES
		}
		return nil
	}
	if r.m.kind == mountDev {
		n, err := fs.dev.lookup(r)
		if err != nil {
			return err
		}
		if mode&unix.X_OK != 0 && n.kind != devDir {
			return unix.EACCES
		}
		return nil
	}
	fd, err := openPath(r, true)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if mode&unix.W_OK != 0 && r.m.ro {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG, unix.S_IFDIR, unix.S_IFLNK:
			return unix.EROFS
		}
	}
	return unix.Faccessat2(fd, "", mode, unix.AT_EMPTY_PATH)
}

// Chdir checks that path is a directory and returns it as a canonical absolute path inside the
// container, the tenant's new cwd.
func (fs *FS) Chdir(cwd, p string) (string, error) {
	if !fs.enter() {
		return "", unix.EBADF
	}
	defer fs.exit()
	r, err := fs.resolve(cwd, p)
	if err != nil {
		return "", err
	}
	res, r, err := fs.synthAt(r, true)
	if err != nil {
		return "", err
	}
	if res != nil {
		if !res.isDir() {
			return "", unix.ENOTDIR
		}
		return res.containerPath(r.m), nil
	}
	if r.m.kind == mountDev {
		n, err := fs.dev.lookup(r)
		if err != nil {
			return "", err
		}
		if n.kind != devDir {
			return "", unix.ENOTDIR
		}
		return "/dev", nil
	}
	fd, err := openHost(r, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	return containerPath(r.m, fd, r.clean), nil
}

// Chmod is chmod(2); it follows a trailing symlink.
func (fs *FS) Chmod(cwd, p string, mode uint32) error {
	if !fs.enter() {
		return unix.EBADF
	}
	defer fs.exit()
	r, err := fs.resolve(cwd, p)
	if err != nil {
		return err
	}
	res, r, err := fs.synthAt(r, true)
	if err != nil {
		return err
	}
	if res != nil {
		return unix.EPERM
	}
	if r.m.kind == mountDev {
		if _, err := fs.dev.lookup(r); err != nil {
			return err
		}
		return unix.EROFS
	}
	fd, err := openPath(r, true)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if r.m.ro {
		return unix.EROFS
	}
	mode &= 0o7777
	err = unix.Fchmodat(fd, "", mode, unix.AT_EMPTY_PATH)
	if err == unix.ENOSYS || err == unix.EOPNOTSUPP || err == unix.EINVAL {
		// Before fchmodat2 (Linux 6.6) an O_PATH fd is changed through its /proc link, which
		// names exactly the inode we opened.
		err = unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode)
	}
	return err
}

// Truncate is truncate(2).
func (fs *FS) Truncate(cwd, p string, size int64) error {
	if !fs.enter() {
		return unix.EBADF
	}
	defer fs.exit()
	if size < 0 {
		return unix.EINVAL
	}
	r, err := fs.resolve(cwd, p)
	if err != nil {
		return err
	}
	res, r, err := fs.synthAt(r, true)
	if err != nil {
		return err
	}
	if res != nil {
		if res.isDir() {
			return unix.EISDIR
		}
		return unix.EACCES
	}
	if r.m.kind == mountDev {
		n, err := fs.dev.lookup(r)
		if err != nil {
			return err
		}
		if n.kind == devDir {
			return unix.EISDIR
		}
		return unix.EINVAL
	}
	if r.m.ro {
		if _, err := roOpenFlags(r, unix.O_WRONLY); err != nil {
			return err
		}
	}
	fd, err := openHost(r, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return ignoreEINTR(func() error { return unix.Ftruncate(fd, size) })
}

// parentRef is the directory holding the last component of a tenant path, opened O_PATH, for the
// calls that act on a name (mkdir, unlink, rename, link, symlink, mknod). Those host calls do not
// follow a symlink in the last component, and base is a single component, so nothing escapes.
type parentRef struct {
	r          resolved // the parent directory
	dirfd      int      // -1 for /dev
	base       string   // last component; "." or ".." possible, "/" for the root itself
	slash      bool     // the tenant's path ended in "/"
	mountPoint bool     // the path is a mount point (or /, /dev, /proc, /sys)
}

func (p *parentRef) close() {
	if p.dirfd >= 0 {
		unix.Close(p.dirfd)
	}
}

// dots reports a last component that names no entry of its own: ".", ".." or the root.
func (p *parentRef) dots() bool { return p.base == "." || p.base == ".." || p.base == "/" }

// parent resolves the parent of a tenant path. On success the caller must call close.
func (fs *FS) parent(cwd, p string) (*parentRef, error) {
	abs, err := absPath(cwd, p)
	if err != nil {
		return nil, err
	}
	t := strings.TrimRight(abs, "/")
	ref := &parentRef{dirfd: -1, slash: len(t) < len(abs)}
	if t == "" {
		ref.base, ref.mountPoint = "/", true
		ref.r = resolved{clean: "/", m: fs.mounts[len(fs.mounts)-1], rel: "."}
		return ref, nil
	}
	i := strings.LastIndexByte(t, '/')
	dir := t[:i]
	if dir == "" {
		dir = "/"
	}
	ref.base = t[i+1:]
	full := path.Clean(t)
	for _, m := range fs.mounts {
		if m.dest == full {
			ref.mountPoint = true
		}
	}
	if ref.r, err = fs.resolve("/", dir); err != nil {
		return nil, err
	}
	if ref.r.m.kind == mountSynth {
		// Nothing in /proc can be made, removed or renamed. (Symlinks in the directory part are
		// not followed out of /proc here: every name operation there is refused anyway.)
		if !ref.mountPoint {
			if _, _, err := fs.synthWalk(ref.r, true); err != nil {
				return nil, err
			}
		}
		return nil, unix.EACCES
	}
	if ref.r.m.kind == mountDev {
		if ref.r.rel != "." {
			if _, err := fs.dev.lookup(ref.r); err != nil {
				return nil, err
			}
			return nil, unix.ENOTDIR
		}
		return ref, nil
	}
	if ref.dots() {
		return ref, nil
	}
	if ref.dirfd, err = openHost(ref.r, unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
		return nil, err
	}
	return ref, nil
}

// devHas reports whether /dev holds name.
func (fs *FS) devHas(name string) bool {
	_, err := fs.dev.lookup(resolved{rel: name})
	return err == nil
}

// Mkdir is mkdir(2).
func (fs *FS) Mkdir(cwd, p string, mode uint32) error {
	if !fs.enter() {
		return unix.EBADF
	}
	defer fs.exit()
	ref, err := fs.parent(cwd, p)
	if err != nil {
		return err
	}
	defer ref.close()
	switch {
	case ref.dots() || ref.mountPoint:
		return unix.EEXIST
	case ref.r.m.kind == mountDev:
		if fs.devHas(ref.base) {
			return unix.EEXIST
		}
		return unix.EROFS
	case ref.r.m.ro:
		return unix.EROFS
	}
	return unix.Mkdirat(ref.dirfd, ref.base, mode&0o7777)
}

// Mknod is mknod(2) for regular files, fifos and sockets; device nodes are refused (EPERM).
func (fs *FS) Mknod(cwd, p string, mode uint32, dev uint64) error {
	if !fs.enter() {
		return unix.EBADF
	}
	defer fs.exit()
	switch mode & unix.S_IFMT {
	case 0:
		mode |= unix.S_IFREG
	case unix.S_IFREG, unix.S_IFIFO, unix.S_IFSOCK:
	case unix.S_IFCHR, unix.S_IFBLK:
		return unix.EPERM
	default:
		return unix.EINVAL
	}
	ref, err := fs.parent(cwd, p)
	if err != nil {
		return err
	}
	defer ref.close()
	switch {
	case ref.dots() || ref.mountPoint:
		return unix.EEXIST
	case ref.r.m.kind == mountDev:
		if fs.devHas(ref.base) {
			return unix.EEXIST
		}
		return unix.EROFS
	case ref.r.m.ro:
		return unix.EROFS
	case ref.slash:
		return unix.ENOENT
	}
	return unix.Mknodat(ref.dirfd, ref.base, mode&(unix.S_IFMT|0o7777), 0)
}

// Unlink is unlink(2), or rmdir(2) when dir is true.
func (fs *FS) Unlink(cwd, p string, dir bool) error {
	if !fs.enter() {
		return unix.EBADF
	}
	defer fs.exit()
	ref, err := fs.parent(cwd, p)
	if err != nil {
		return err
	}
	defer ref.close()
	if !dir && ref.dots() {
		return unix.EISDIR
	}
	switch {
	case ref.base == ".":
		return unix.EINVAL
	case ref.base == "..":
		return unix.ENOTEMPTY
	case ref.mountPoint:
		return unix.EBUSY
	case ref.r.m.kind == mountDev:
		if !fs.devHas(ref.base) {
			return unix.ENOENT
		}
		return unix.EROFS
	case ref.r.m.ro:
		return unix.EROFS
	}
	if dir {
		return unix.Unlinkat(ref.dirfd, ref.base, unix.AT_REMOVEDIR)
	}
	if ref.slash {
		// "file/" names a directory: unlink refuses it either way.
		var st unix.Stat_t
		if err := unix.Fstatat(ref.dirfd, ref.base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return unix.EISDIR
		}
		return unix.ENOTDIR
	}
	return unix.Unlinkat(ref.dirfd, ref.base, 0)
}

// twoParents resolves the parents of the two paths of rename and link.
func (fs *FS) twoParents(cwd, oldpath, newpath string) (*parentRef, *parentRef, error) {
	po, err := fs.parent(cwd, oldpath)
	if err != nil {
		return nil, nil, err
	}
	pn, err := fs.parent(cwd, newpath)
	if err != nil {
		po.close()
		return nil, nil, err
	}
	return po, pn, nil
}

// Rename is rename(2).
func (fs *FS) Rename(cwd, oldpath, newpath string) error {
	if !fs.enter() {
		return unix.EBADF
	}
	defer fs.exit()
	po, pn, err := fs.twoParents(cwd, oldpath, newpath)
	if err != nil {
		return err
	}
	defer po.close()
	defer pn.close()
	switch {
	case po.dots() || pn.dots() || po.mountPoint || pn.mountPoint:
		return unix.EBUSY
	case po.r.m != pn.r.m:
		return unix.EXDEV
	case po.r.m.kind == mountDev:
		if !fs.devHas(po.base) {
			return unix.ENOENT
		}
		return unix.EROFS
	case po.r.m.ro:
		return unix.EROFS
	}
	if po.slash || pn.slash {
		var st unix.Stat_t
		if err := unix.Fstatat(po.dirfd, po.base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return unix.ENOTDIR
		}
	}
	return unix.Renameat2(po.dirfd, po.base, pn.dirfd, pn.base, 0)
}

// Link is link(2): a hard link; a symlink at oldpath is linked itself, not followed.
func (fs *FS) Link(cwd, oldpath, newpath string) error {
	if !fs.enter() {
		return unix.EBADF
	}
	defer fs.exit()
	po, pn, err := fs.twoParents(cwd, oldpath, newpath)
	if err != nil {
		return err
	}
	defer po.close()
	defer pn.close()
	switch {
	case po.dots():
		return unix.EPERM
	case pn.dots() || pn.mountPoint:
		return unix.EEXIST
	case po.r.m != pn.r.m:
		return unix.EXDEV
	case po.r.m.kind == mountDev:
		if !fs.devHas(po.base) {
			return unix.ENOENT
		}
		if fs.devHas(pn.base) {
			return unix.EEXIST
		}
		return unix.EROFS
	case po.r.m.ro:
		return unix.EROFS
	}
	return unix.Linkat(po.dirfd, po.base, pn.dirfd, pn.base, 0)
}

// Symlink is symlink(2): linkpath becomes a symlink holding target (any string; it is resolved
// later, confined like every other lookup).
func (fs *FS) Symlink(cwd, target, linkpath string) error {
	if !fs.enter() {
		return unix.EBADF
	}
	defer fs.exit()
	if target == "" {
		return unix.ENOENT
	}
	if len(target) >= unix.PathMax || strings.IndexByte(target, 0) >= 0 {
		return unix.ENAMETOOLONG
	}
	ref, err := fs.parent(cwd, linkpath)
	if err != nil {
		return err
	}
	defer ref.close()
	switch {
	case ref.dots() || ref.mountPoint:
		return unix.EEXIST
	case ref.r.m.kind == mountDev:
		if fs.devHas(ref.base) {
			return unix.EEXIST
		}
		return unix.EROFS
	case ref.r.m.ro:
		return unix.EROFS
	case ref.slash:
		var st unix.Stat_t
		if unix.Fstatat(ref.dirfd, ref.base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return unix.EEXIST
		}
		return unix.ENOENT
	}
	return unix.Symlinkat(target, ref.dirfd, ref.base)
}
