package vfs

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// File is an open file description: dup'ed and inherited fds share one File, and with it the
// offset and status flags. Host-backed files hold one host fd, whose host offset is the offset;
// the synthetic /dev and /proc files hold none.
//
// A File starts with one reference; IncRef/DecRef count the fd-table entries and in-flight calls
// that use it, and the host fd is closed when the count drops to zero.
type File struct {
	refs atomic.Int64

	fd    int          // host fd, or -1
	dev   *devNode     // synthetic /dev node, or nil
	devfs *devFS       // for dev's stat and listing
	syn   *synthFile   // a /proc entry's snapshot, or nil
	mount *mountPoint  // the mount it was opened through (nil for HostFile and /dev)
	path  string       // path inside the container as opened (lexically cleaned)
	host  *os.File     // kept alive for HostFile so its finalizer does not close fd
	flags atomic.Int32 // the tenant's access mode and status flags (F_GETFL)

	// hostNB: the host fd is O_NONBLOCK. The sandbox keeps descriptors that may block (pipes,
	// fifos, ttys, sockets) non-blocking on the host and emulates a blocking tenant fd by
	// polling, so that the same host fd serves both kinds of tenant fd.
	hostNB bool

	typ atomic.Uint32 // S_IFMT of the file, |typKnown once fetched

	canonOnce sync.Once
	canon     string // canonical container path of a directory

	dirMu  sync.Mutex
	dirOff int64 // listing position of the synthetic /dev directory

	anon *anonFile    // an epoll set or eventfd (epoll.go), or nil
	rel  releaseWatch // told when the last reference goes (epoll sets holding the File)
}

const typKnown = 1 << 31

// tenantStatusFlags are the flags F_SETFL may change.
const tenantStatusFlags = unix.O_APPEND | unix.O_NONBLOCK | unix.O_DIRECT | unix.O_NOATIME | unix.O_ASYNC

func newHostFile(fd int, m *mountPoint, p string, tenantFlags int, hostNB bool, typ uint32) *File {
	f := &File{fd: fd, mount: m, path: p, hostNB: hostNB}
	f.flags.Store(int32(tenantFlags))
	if typ != 0 {
		f.typ.Store(typ | typKnown)
	}
	f.refs.Store(1)
	return f
}

// HostFile wraps a host file given to the tenant (stdio, a tty). It takes f over: the caller must
// not use or close f afterwards; the File closes it when its last reference goes. path is what
// the File reports as its path ("" for pipes and stdio).
func HostFile(f *os.File, path string) *File {
	fd := int(f.Fd()) // also puts the fd in blocking mode as far as Go is concerned
	hostFlags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		hostFlags = unix.O_RDWR
	}
	file := &File{fd: fd, path: path, host: f, hostNB: hostFlags&unix.O_NONBLOCK != 0}
	file.flags.Store(int32(hostFlags&(unix.O_ACCMODE|unix.O_APPEND) | unix.O_LARGEFILE))
	file.refs.Store(1)
	if file.MayBlock() && !file.hostNB {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, hostFlags|unix.O_NONBLOCK); err == nil {
			file.hostNB = true
		}
	}
	return file
}

func newDevFile(d *devFS, n *devNode, tenantFlags int) *File {
	f := &File{fd: -1, dev: n, devfs: d, path: "/dev"}
	if n.kind != devDir {
		f.path = "/dev/" + n.name
	}
	f.flags.Store(int32(tenantFlags))
	f.refs.Store(1)
	return f
}

// IncRef adds a reference.
func (f *File) IncRef() { f.refs.Add(1) }

// DecRef drops a reference and closes the host fd when it was the last one.
func (f *File) DecRef() error {
	n := f.refs.Add(-1)
	if n > 0 {
		return nil
	}
	if n < 0 {
		panic(fmt.Sprintf("vfs: File %q released more often than referenced", f.path))
	}
	f.fireRelease()
	if f.host != nil {
		return f.host.Close()
	}
	if f.fd >= 0 {
		// close(2) always frees the fd, even when it reports EINTR: never retry.
		return unix.Close(f.fd)
	}
	return nil
}

// Flags returns the tenant's access mode and status flags, as F_GETFL reports them.
func (f *File) Flags() int { return int(f.flags.Load()) }

// SetFlags changes the status flags that F_SETFL may change (O_APPEND, O_NONBLOCK, O_DIRECT,
// O_NOATIME, O_ASYNC); other bits of flags are ignored. O_NONBLOCK is the tenant's view only: the
// host fd's own O_NONBLOCK never changes. O_ASYNC is recorded but delivers no signal yet.
func (f *File) SetFlags(flags int) error {
	for {
		old := f.flags.Load()
		nf := old&^tenantStatusFlags | int32(flags&tenantStatusFlags)
		if f.fd >= 0 && f.flags.Load()&unix.O_PATH == 0 {
			const hostBits = unix.O_APPEND | unix.O_DIRECT | unix.O_NOATIME
			if (old^nf)&hostBits != 0 {
				hf, err := unix.FcntlInt(uintptr(f.fd), unix.F_GETFL, 0)
				if err != nil {
					return err
				}
				if _, err := unix.FcntlInt(uintptr(f.fd), unix.F_SETFL, hf&^hostBits|int(nf)&hostBits); err != nil {
					return err
				}
			}
		} else if f.flags.Load()&unix.O_PATH != 0 {
			return unix.EBADF
		}
		if f.flags.CompareAndSwap(old, nf) {
			return nil
		}
	}
}

// Path is the File's path inside the container: canonical for directories (so that *at calls
// relative to it resolve like the kernel would), as opened for other files, "" for pipes and
// stdio.
func (f *File) Path() string {
	if f.fd < 0 || f.mount == nil {
		return f.path
	}
	if f.fileType() != unix.S_IFDIR {
		return f.path
	}
	f.canonOnce.Do(func() { f.canon = containerPath(f.mount, f.fd, f.path) })
	return f.canon
}

// CanonicalPath is the file's path inside the container with every symlink resolved (what Linux
// shows for /proc/<pid>/exe and in maps), or the path it was opened by when that is not known.
func (f *File) CanonicalPath() string {
	if f.fd < 0 || f.mount == nil {
		return f.path
	}
	return containerPath(f.mount, f.fd, f.path)
}

// HostFd is the host descriptor, or -1 for synthetic files. The kernel uses it for tty ioctls
// and polling; it must not close it.
func (f *File) HostFd() int { return f.fd }

// MayBlock reports whether reads or writes can wait for another party (pipes, fifos, ttys,
// sockets, character devices): the kernel gives its vCPU back before calling them.
func (f *File) MayBlock() bool {
	if f.fd < 0 {
		return false
	}
	if f.anon != nil {
		return f.anon.mayBlock
	}
	switch f.fileType() {
	case unix.S_IFIFO, unix.S_IFSOCK, unix.S_IFCHR:
		return true
	}
	return false
}

// IsDir reports whether the File is a directory.
func (f *File) IsDir() bool {
	if f.syn != nil {
		return f.syn.isDir()
	}
	if f.dev != nil {
		return f.dev.kind == devDir
	}
	return f.fileType() == unix.S_IFDIR
}

// fileType is S_IFMT of the host file, fetched once. 0 if fstat fails.
func (f *File) fileType() uint32 {
	t := f.typ.Load()
	if t&typKnown != 0 {
		return t &^ typKnown
	}
	var st unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return 0
	}
	t = st.Mode & unix.S_IFMT
	f.typ.Store(t | typKnown)
	return t
}

func (f *File) canRead() bool {
	fl := f.flags.Load()
	return fl&unix.O_PATH == 0 && fl&unix.O_ACCMODE != unix.O_WRONLY
}

func (f *File) canWrite() bool {
	fl := f.flags.Load()
	return fl&unix.O_PATH == 0 && fl&unix.O_ACCMODE != unix.O_RDONLY
}

// blockingIO runs one host I/O call with the tenant's blocking semantics: when the tenant's fd is
// blocking and the host fd is not, EAGAIN waits for the fd with poll; when the tenant's fd is
// non-blocking and the host fd is not, a not-ready fd gives EAGAIN without calling op.
func (f *File) blockingIO(events int16, op func() (int, error)) (int, error) {
	tenantNB := f.flags.Load()&unix.O_NONBLOCK != 0
	if tenantNB && !f.hostNB && f.MayBlock() {
		if err := f.readyNow(events); err != nil {
			return 0, err
		}
	}
	for {
		n, err := op()
		switch {
		case err == nil:
			return n, nil
		case err == unix.EINTR:
			// The Go runtime's own signals (preemption) interrupt host calls; the tenant's
			// signals do not come through here.
			continue
		case err == unix.EAGAIN && !tenantNB && f.hostNB:
			if _, err := pollFd(f.fd, events, -1); err != nil {
				return 0, err
			}
			continue
		default:
			return 0, err
		}
	}
}

// readyNow fails with EAGAIN unless the host fd is ready for events at once.
func (f *File) readyNow(events int16) error {
	ready, err := pollFd(f.fd, events, 0)
	if err == nil && !ready {
		err = unix.EAGAIN
	}
	return err
}

// pollFd waits until fd is ready for events, or timeout ms (-1: forever).
func pollFd(fd int, events int16, timeout int) (bool, error) {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: events}}
	for {
		n, err := unix.Poll(pfd, timeout)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, err
		}
		if n > 0 && pfd[0].Revents&unix.POLLNVAL != 0 {
			return false, unix.EBADF
		}
		// POLLHUP and POLLERR count as ready: the following call reports EOF or the error.
		return n > 0, nil
	}
}

// Read reads into p at the file offset.
func (f *File) Read(p []byte) (int, error) {
	if f.syn != nil {
		if !f.canRead() {
			return 0, unix.EBADF
		}
		return f.syn.read([][]byte{p})
	}
	if f.dev != nil {
		if !f.canRead() {
			return 0, unix.EBADF
		}
		return f.dev.read(p)
	}
	return f.blockingIO(unix.POLLIN, func() (int, error) { return unix.Read(f.fd, p) })
}

// ReadV reads into several slices (tenant memory) with one host call.
func (f *File) ReadV(bufs [][]byte) (int, error) {
	if f.syn != nil {
		if !f.canRead() {
			return 0, unix.EBADF
		}
		return f.syn.read(bufs)
	}
	if f.dev != nil {
		if !f.canRead() {
			return 0, unix.EBADF
		}
		total := 0
		for _, b := range bufs {
			n, err := f.dev.read(b)
			total += n
			if err != nil {
				if total > 0 {
					return total, nil
				}
				return 0, err
			}
			if n < len(b) {
				break
			}
		}
		return total, nil
	}
	return f.blockingIO(unix.POLLIN, func() (int, error) { return unix.Readv(f.fd, bufs) })
}

// Write writes p at the file offset (at the end with O_APPEND). A blocking tenant fd that may
// block gets all of p written, as the kernel does for pipes.
func (f *File) Write(p []byte) (int, error) {
	if f.syn != nil {
		return 0, unix.EBADF // /proc files are only ever opened for reading
	}
	if f.dev != nil {
		if !f.canWrite() {
			return 0, unix.EBADF
		}
		return f.dev.write(p)
	}
	total := 0
	for {
		n, err := f.blockingIO(unix.POLLOUT, func() (int, error) { return unix.Write(f.fd, p[total:]) })
		total += n
		if err != nil {
			if total > 0 {
				return total, nil
			}
			return 0, err
		}
		if total == len(p) || n == 0 || !f.completeWrites() {
			return total, nil
		}
	}
}

// completeWrites: a short host write must be continued, because the tenant expects a blocking
// write to a pipe or tty to write everything.
func (f *File) completeWrites() bool {
	return f.hostNB && f.flags.Load()&unix.O_NONBLOCK == 0 && f.MayBlock()
}

// WriteV writes several slices (tenant memory) with one host call when it can.
func (f *File) WriteV(bufs [][]byte) (int, error) {
	if f.syn != nil {
		return 0, unix.EBADF
	}
	if f.dev != nil {
		if !f.canWrite() {
			return 0, unix.EBADF
		}
		total := 0
		for _, b := range bufs {
			n, err := f.dev.write(b)
			total += n
			if err != nil {
				if total > 0 {
					return total, nil
				}
				return 0, err
			}
		}
		return total, nil
	}
	want := 0
	for _, b := range bufs {
		want += len(b)
	}
	total := 0
	for {
		n, err := f.blockingIO(unix.POLLOUT, func() (int, error) { return unix.Writev(f.fd, bufs) })
		total += n
		if err != nil {
			if total > 0 {
				return total, nil
			}
			return 0, err
		}
		if total == want || n == 0 || !f.completeWrites() {
			return total, nil
		}
		bufs = skipBytes(bufs, n)
	}
}

// TryReadV is ReadV that never waits: where a blocking read would wait for the file, it fails
// with EAGAIN instead. The kernel calls it before giving up its vCPU for a read that may block.
func (f *File) TryReadV(bufs [][]byte) (int, error) {
	if f.syn != nil || f.dev != nil || !f.MayBlock() {
		return f.ReadV(bufs)
	}
	return f.tryIO(unix.POLLIN, func() (int, error) { return unix.Readv(f.fd, bufs) })
}

// TryWriteV is one WriteV step that never waits: it writes what fits now (possibly less than
// asked, even of a blocking pipe) and fails with EAGAIN where a write would wait.
func (f *File) TryWriteV(bufs [][]byte) (int, error) {
	if f.syn != nil || f.dev != nil || !f.MayBlock() {
		return f.WriteV(bufs)
	}
	return f.tryIO(unix.POLLOUT, func() (int, error) { return unix.Writev(f.fd, bufs) })
}

// tryIO runs op once if the file is ready for events: at once on a non-blocking host fd, after a
// poll that does not wait on a blocking one.
func (f *File) tryIO(events int16, op func() (int, error)) (int, error) {
	if !f.hostNB {
		if err := f.readyNow(events); err != nil {
			return 0, err
		}
	}
	for {
		n, err := op()
		if err != unix.EINTR {
			return n, err
		}
	}
}

// SkipBytes drops the first n bytes of an iovec list.
func SkipBytes(bufs [][]byte, n int) [][]byte { return skipBytes(bufs, n) }

// skipBytes drops the first n bytes of an iovec list.
func skipBytes(bufs [][]byte, n int) [][]byte {
	for len(bufs) > 0 && n >= len(bufs[0]) {
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if len(bufs) > 0 && n > 0 {
		rest := make([][]byte, len(bufs))
		copy(rest, bufs)
		rest[0] = rest[0][n:]
		bufs = rest
	}
	return bufs
}

// Pread reads at off without moving the file offset.
func (f *File) Pread(p []byte, off int64) (int, error) {
	if f.syn != nil {
		if !f.canRead() {
			return 0, unix.EBADF
		}
		return f.syn.readAt(p, off)
	}
	if f.dev != nil {
		if off < 0 {
			return 0, unix.EINVAL
		}
		return f.Read(p)
	}
	for {
		n, err := unix.Pread(f.fd, p, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		return n, nil
	}
}

// Pwrite writes at off without moving the file offset.
func (f *File) Pwrite(p []byte, off int64) (int, error) {
	if f.syn != nil {
		return 0, unix.EBADF
	}
	if f.dev != nil {
		if off < 0 {
			return 0, unix.EINVAL
		}
		return f.Write(p)
	}
	for {
		n, err := unix.Pwrite(f.fd, p, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		return n, nil
	}
}

// Seek moves the file offset (whence: SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA, SEEK_HOLE).
func (f *File) Seek(off int64, whence int) (int64, error) {
	if f.syn != nil {
		if f.flags.Load()&unix.O_PATH != 0 {
			return 0, unix.EBADF
		}
		return f.syn.seek(off, whence)
	}
	if f.dev != nil {
		if f.flags.Load()&unix.O_PATH != 0 {
			return 0, unix.EBADF
		}
		if f.dev.kind != devDir {
			return 0, nil // like the kernel's null/zero/random: the offset stays 0
		}
		f.dirMu.Lock()
		defer f.dirMu.Unlock()
		switch {
		case whence == unix.SEEK_SET && off >= 0:
			f.dirOff = off
		case whence == unix.SEEK_CUR && f.dirOff+off >= 0:
			f.dirOff += off
		default:
			return 0, unix.EINVAL
		}
		return f.dirOff, nil
	}
	return unix.Seek(f.fd, off, whence)
}

// Stat is fstat(2).
func (f *File) Stat() (unix.Stat_t, error) {
	if f.syn != nil {
		return synthStat(&f.syn.node, f.syn.canon), nil
	}
	if f.dev != nil {
		return f.devfs.stat(f.dev), nil
	}
	var st unix.Stat_t
	err := unix.Fstat(f.fd, &st)
	return st, err
}

// Statx is statx(2) on the file (AT_EMPTY_PATH).
func (f *File) Statx(mask uint32) (unix.Statx_t, error) {
	if f.syn != nil {
		return statxFromStat(synthStat(&f.syn.node, f.syn.canon)), nil
	}
	if f.dev != nil {
		return statxFromStat(f.devfs.stat(f.dev)), nil
	}
	var stx unix.Statx_t
	err := unix.Statx(f.fd, "", unix.AT_EMPTY_PATH, int(mask), &stx)
	return stx, err
}

// Getdents fills p with linux_dirent64 records, as getdents64(2) returns them.
func (f *File) Getdents(p []byte) (int, error) {
	if f.syn != nil {
		if f.flags.Load()&unix.O_PATH != 0 {
			return 0, unix.EBADF
		}
		return f.syn.getdents(p)
	}
	if f.dev != nil {
		if f.flags.Load()&unix.O_PATH != 0 {
			return 0, unix.EBADF
		}
		if f.dev.kind != devDir {
			return 0, unix.ENOTDIR
		}
		f.dirMu.Lock()
		defer f.dirMu.Unlock()
		return f.devfs.getdents(p, &f.dirOff)
	}
	for {
		n, err := unix.Getdents(f.fd, p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		return n, nil
	}
}

// Truncate is ftruncate(2).
func (f *File) Truncate(size int64) error {
	if f.syn != nil {
		return unix.EINVAL
	}
	if f.dev != nil {
		return unix.EINVAL
	}
	if f.mount != nil && f.mount.ro {
		return unix.EROFS
	}
	return ignoreEINTR(func() error { return unix.Ftruncate(f.fd, size) })
}

// Sync is fsync(2).
func (f *File) Sync() error {
	if f.dev != nil || f.syn != nil {
		return unix.EINVAL
	}
	return ignoreEINTR(func() error { return unix.Fsync(f.fd) })
}

// Datasync is fdatasync(2).
func (f *File) Datasync() error {
	if f.dev != nil || f.syn != nil {
		return unix.EINVAL
	}
	return ignoreEINTR(func() error { return unix.Fdatasync(f.fd) })
}

// Chmod is fchmod(2).
func (f *File) Chmod(mode uint32) error {
	if f.dev != nil || f.syn != nil {
		return unix.EPERM
	}
	if f.flags.Load()&unix.O_PATH != 0 {
		return unix.EBADF
	}
	if f.mount != nil && f.mount.ro {
		return unix.EROFS
	}
	return unix.Fchmod(f.fd, mode&0o7777)
}

func ignoreEINTR(op func() error) error {
	for {
		if err := op(); err != unix.EINTR {
			return err
		}
	}
}

// statxFromStat fills a statx record from a stat record (for the synthetic files).
func statxFromStat(st unix.Stat_t) unix.Statx_t {
	ts := func(t unix.Timespec) unix.StatxTimestamp {
		return unix.StatxTimestamp{Sec: t.Sec, Nsec: uint32(t.Nsec)}
	}
	return unix.Statx_t{
		Mask:       unix.STATX_BASIC_STATS,
		Blksize:    uint32(st.Blksize),
		Nlink:      uint32(st.Nlink),
		Uid:        st.Uid,
		Gid:        st.Gid,
		Mode:       uint16(st.Mode),
		Ino:        st.Ino,
		Size:       uint64(st.Size),
		Blocks:     uint64(st.Blocks),
		Atime:      ts(st.Atim),
		Ctime:      ts(st.Ctim),
		Mtime:      ts(st.Mtim),
		Rdev_major: unix.Major(st.Rdev),
		Rdev_minor: unix.Minor(st.Rdev),
		Dev_major:  unix.Major(st.Dev),
		Dev_minor:  unix.Minor(st.Dev),
	}
}

// Reopen opens the file f is an open description of anew, with the tenant's open flags: what
// open(2) through /proc/<pid>/fd/N gives on Linux, a new description of the same file with its
// own offset and flags (of a pipe: a new end of the same pipe). Only files the host holds can be
// reopened so; the sandbox's own objects (epoll sets, eventfds, /proc entries) give ENXIO, as a
// socket does on Linux.
func (f *File) Reopen(flags int) (*File, error) {
	if f.fd < 0 || f.anon != nil || f.syn != nil || f.dev != nil {
		return nil, unix.ENXIO
	}
	flags = cleanOpenFlags(flags)
	typ := f.fileType()
	if flags&unix.O_DIRECTORY != 0 && typ != unix.S_IFDIR {
		return nil, unix.ENOTDIR
	}
	isPath := flags&unix.O_PATH != 0
	if !isPath && f.mount != nil && f.mount.ro && typ == unix.S_IFREG &&
		(flags&unix.O_ACCMODE != unix.O_RDONLY || flags&unix.O_TRUNC != 0) {
		return nil, unix.EROFS
	}
	tenantFlags := flags&^(unix.O_CREAT|unix.O_EXCL|unix.O_NOCTTY|unix.O_TRUNC) | unix.O_LARGEFILE
	hostFlags := flags&^(unix.O_CREAT|unix.O_EXCL) | unix.O_NOCTTY | unix.O_NONBLOCK | unix.O_CLOEXEC
	if isPath {
		hostFlags = flags | unix.O_CLOEXEC
	}
	// The host's own magic link of the sandbox's descriptor reaches the same file (or pipe).
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", f.fd), hostFlags, 0)
	if err != nil {
		return nil, err
	}
	return newHostFile(fd, f.mount, f.path, tenantFlags, !isPath, typ), nil
}
