package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/endovisor/endo/sandbox/kernel/vfs"
	"golang.org/x/sys/unix"
)

const (
	pathMax    = 4096
	maxRWCount = 0x7ffff000 // Linux's MAX_RW_COUNT
	bounceMax  = 1 << 20
)

// install puts f in the lowest free descriptor at or above lowest and returns it; it takes the
// caller's reference to f, which it drops when there is no descriptor to give.
func (t *Task) install(f *vfs.File, lowest int, cloexec bool) (uint64, error) {
	fd, err := t.p.fds.Install(f, lowest, cloexec)
	if err != nil {
		f.DecRef()
		return 0, err
	}
	return uint64(fd), nil
}

// file returns the open file at fd with a reference the caller must drop.
func (t *Task) file(fd uint64) (*vfs.File, error) {
	return t.p.fds.Get(int(int32(fd)))
}

func (t *Task) path(addr uint64) (string, error) {
	s, err := t.p.k.svc.ReadString(t.p.as, addr, pathMax)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", unix.ENOENT
	}
	return s, nil
}

// base is the directory a path is resolved from: the cwd, or the directory open at dirfd.
func (t *Task) base(dirfd uint64, p string) (string, error) {
	if len(p) > 0 && p[0] == '/' || int32(dirfd) == unix.AT_FDCWD {
		t.p.mu.Lock()
		defer t.p.mu.Unlock()
		return t.p.cwd, nil
	}
	f, err := t.file(dirfd)
	if err != nil {
		return "", err
	}
	defer f.DecRef()
	if !f.IsDir() || f.Path() == "" {
		return "", unix.ENOTDIR
	}
	return f.Path(), nil
}

// tenantBufs returns the sandbox's views of a tenant buffer; a buffer the tenant cannot have
// whole (count larger than what is mapped) gets a bounce buffer, so that a short transfer still
// works as on Linux.
func (t *Task) tenantBufs(addr, count uint64, write bool) ([][]byte, bool, error) {
	count = min(count, maxRWCount)
	if count == 0 {
		return nil, false, nil
	}
	bufs, err := t.p.k.svc.Slices(t.p.as, addr, count, write)
	if err == nil {
		return bufs, false, nil
	}
	return [][]byte{make([]byte, min(count, bounceMax))}, true, nil
}

func sysRead(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	if sf, ok := f.Private().(*signalfd); ok {
		return sf.read(t, f, a[1], a[2])
	}
	bufs, bounce, err := t.tenantBufs(a[1], a[2], true)
	if err != nil || len(bufs) == 0 {
		return 0, err
	}
	n, err := t.transfer(f, bufs, false)
	if err != nil {
		return 0, err
	}
	if bounce {
		if err := t.p.k.svc.CopyOut(t.p.as, a[1], bufs[0][:n]); err != nil {
			return 0, err
		}
	}
	return uint64(n), nil
}

func sysWrite(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	count := min(a[2], maxRWCount)
	if count == 0 {
		return 0, nil
	}
	bufs, err := t.p.k.svc.Slices(t.p.as, a[1], count, false)
	if err != nil {
		return 0, err
	}
	n, err := t.transfer(f, bufs, true)
	return uint64(n), err
}

// transfer reads into bufs from f, or writes bufs to it, raising SIGPIPE for a write nobody
// reads. A file that may block is tried first with the vCPU held (giving it up and taking it back
// costs more than most pipe transfers); when it is not ready, the task waits for it without the
// vCPU (waitReady) and tries again. A blocking write goes on until all of it is written, as on
// Linux; a signal that cuts it short after part went returns that part.
func (t *Task) transfer(f *vfs.File, bufs [][]byte, write bool) (int, error) {
	if !f.MayBlock() || f.HostFd() < 0 {
		if write {
			n, err := f.WriteV(bufs)
			return n, t.brokenPipe(err)
		}
		return f.ReadV(bufs)
	}
	events := int16(unix.POLLIN)
	if write {
		events = unix.POLLOUT
	}
	left, done := totalLen(bufs), 0
	for {
		var n int
		var err error
		if write {
			n, err = f.TryWriteV(bufs)
		} else {
			n, err = f.TryReadV(bufs)
		}
		nonblocking := f.Flags()&unix.O_NONBLOCK != 0
		switch {
		case write && err == nil && n > 0 && n < left && !nonblocking:
			done, left, bufs = done+n, left-n, vfs.SkipBytes(bufs, n)
		case err != unix.EAGAIN || nonblocking:
			if done > 0 && err != nil {
				return done, nil // part went before the error, which the next write reports
			}
			if write {
				return done + n, t.brokenPipe(err)
			}
			return n, err
		}
		if werr := t.waitReady(f, events); werr != nil {
			if done > 0 {
				t.interrupted = false // a partial write is a result: nothing to restart
				return done, nil
			}
			return 0, werr
		}
	}
}

// gather returns one buffer for a transfer of tenant buffers through the sandbox (at most
// bounceMax bytes), holding their bytes when fill is set (a write).
func gather(bufs [][]byte, fill bool) []byte {
	bounce := make([]byte, min(totalLen(bufs), bounceMax))
	if fill {
		n := 0
		for _, b := range bufs {
			n += copy(bounce[n:], b)
		}
	}
	return bounce
}

// scatter copies what a read put in a gathered buffer out to the tenant buffers.
func scatter(bufs [][]byte, data []byte) {
	for _, b := range bufs {
		data = data[copy(b, data):]
	}
}

func totalLen(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}

// waitReady waits without the vCPU until f's host fd is ready for events, or a signal (or the
// process's end) cuts the wait short: then it returns EINTR.
func (t *Task) waitReady(f *vfs.File, events int16) error {
	ifd, err := t.interruptFd()
	if err != nil {
		return err
	}
	if t.signalPending() {
		t.interrupted = true
		return unix.EINTR
	}
	cut := false
	t.blocking(func() { cut = pollInterruptible(f.HostFd(), ifd, events) })
	if cut {
		t.interrupted = true
		return unix.EINTR
	}
	return nil
}

// pollInterruptible waits until fd is ready for events or the interrupt fd ifd is readable, and
// reports whether it was the interrupt.
func pollInterruptible(fd, ifd int, events int16) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: events}, {Fd: int32(ifd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(pfd, -1); err != unix.EINTR {
			break
		}
	}
	return pfd[1].Revents != 0
}

// brokenPipe raises SIGPIPE for a write to a pipe nobody reads, as Linux does; the call still
// fails with EPIPE if the signal is ignored or handled.
func (t *Task) brokenPipe(err error) error {
	if errors.Is(err, unix.EPIPE) {
		t.signalThread(unix.SIGPIPE)
	}
	return err
}

// iovecs reads a tenant iovec array and returns the sandbox's views of its buffers.
func (t *Task) iovecs(addr, cnt uint64, write bool) ([][]byte, error) {
	if cnt > 1024 {
		return nil, unix.EINVAL
	}
	raw := make([]byte, 16*cnt)
	if err := t.p.k.svc.CopyIn(t.p.as, raw, addr); err != nil {
		return nil, err
	}
	var bufs [][]byte
	var total uint64
	for i := uint64(0); i < cnt; i++ {
		base := binary.LittleEndian.Uint64(raw[16*i:])
		n := binary.LittleEndian.Uint64(raw[16*i+8:])
		if n > maxRWCount || total+n > maxRWCount {
			return nil, unix.EINVAL
		}
		total += n
		if n == 0 {
			continue
		}
		b, err := t.p.k.svc.Slices(t.p.as, base, n, write)
		if err != nil {
			return nil, err
		}
		bufs = append(bufs, b...)
	}
	return bufs, nil
}

func sysReadv(t *Task, a sysargs) (uint64, error)  { return vectorIO(t, a, false) }
func sysWritev(t *Task, a sysargs) (uint64, error) { return vectorIO(t, a, true) }

// vectorIO is readv and writev: an iovec array of tenant buffers, one transfer.
func vectorIO(t *Task, a sysargs, write bool) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	bufs, err := t.iovecs(a[1], a[2], !write)
	if err != nil || len(bufs) == 0 {
		return 0, err
	}
	n, err := t.transfer(f, bufs, write)
	return uint64(n), err
}

func sysPread(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	if int64(a[3]) < 0 {
		return 0, unix.EINVAL
	}
	buf := make([]byte, min(a[2], bounceMax))
	n, err := f.Pread(buf, int64(a[3]))
	if err != nil {
		return 0, err
	}
	return uint64(n), t.p.k.svc.CopyOut(t.p.as, a[1], buf[:n])
}

func sysPwrite(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	if int64(a[3]) < 0 {
		return 0, unix.EINVAL
	}
	buf := make([]byte, min(a[2], bounceMax))
	if err := t.p.k.svc.CopyIn(t.p.as, buf, a[1]); err != nil {
		return 0, err
	}
	n, err := f.Pwrite(buf, int64(a[3]))
	return uint64(n), err
}

func sysOpen(t *Task, a sysargs) (uint64, error) {
	return openat(t, atFDCWD, a[0], a[1], a[2])
}

func sysOpenat(t *Task, a sysargs) (uint64, error) {
	return openat(t, a[0], a[1], a[2], a[3])
}

func openat(t *Task, dirfd, pathAddr, flags, mode uint64) (uint64, error) {
	p, err := t.path(pathAddr)
	if err != nil {
		return 0, err
	}
	base, err := t.base(dirfd, p)
	if err != nil {
		return 0, err
	}
	t.p.mu.Lock()
	umask := t.p.umask
	t.p.mu.Unlock()
	f, err := t.p.fs.Open(base, p, int(int32(flags)), uint32(mode)&^umask&0o7777)
	if err != nil {
		return 0, err
	}
	return t.install(f, 0, flags&unix.O_CLOEXEC != 0)
}

func sysClose(t *Task, a sysargs) (uint64, error) {
	return 0, t.p.fds.Close(int(int32(a[0])))
}

// statBytes is struct stat as x86-64 Linux lays it out, which unix.Stat_t matches.
func statBytes(st *unix.Stat_t) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(st)), unsafe.Sizeof(*st))
}

func statxBytes(st *unix.Statx_t) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(st)), unsafe.Sizeof(*st))
}

func (t *Task) statPath(dirfd, pathAddr, flags uint64) (unix.Stat_t, error) {
	if flags&unix.AT_EMPTY_PATH != 0 {
		if s, err := t.p.k.svc.ReadString(t.p.as, pathAddr, pathMax); err == nil && s == "" {
			f, err := t.file(dirfd)
			if err != nil {
				return unix.Stat_t{}, err
			}
			defer f.DecRef()
			return f.Stat()
		}
	}
	p, err := t.path(pathAddr)
	if err != nil {
		return unix.Stat_t{}, err
	}
	base, err := t.base(dirfd, p)
	if err != nil {
		return unix.Stat_t{}, err
	}
	return t.p.fs.Stat(base, p, flags&unix.AT_SYMLINK_NOFOLLOW == 0)
}

func (t *Task) putStat(addr uint64, st unix.Stat_t, err error) (uint64, error) {
	if err != nil {
		return 0, err
	}
	return 0, t.p.k.svc.CopyOut(t.p.as, addr, statBytes(&st))
}

func sysStat(t *Task, a sysargs) (uint64, error) {
	st, err := t.statPath(atFDCWD, a[0], 0)
	return t.putStat(a[1], st, err)
}

func sysLstat(t *Task, a sysargs) (uint64, error) {
	st, err := t.statPath(atFDCWD, a[0], unix.AT_SYMLINK_NOFOLLOW)
	return t.putStat(a[1], st, err)
}

func sysFstat(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	st, err := f.Stat()
	return t.putStat(a[1], st, err)
}

func sysNewfstatat(t *Task, a sysargs) (uint64, error) {
	st, err := t.statPath(a[0], a[1], a[3])
	return t.putStat(a[2], st, err)
}

func sysStatx(t *Task, a sysargs) (uint64, error) {
	dirfd, pathAddr, flags, mask, out := a[0], a[1], a[2], uint32(a[3]), a[4]
	var st unix.Statx_t
	var err error
	if s, e := t.p.k.svc.ReadString(t.p.as, pathAddr, pathMax); e == nil && s == "" && flags&unix.AT_EMPTY_PATH != 0 {
		var f *vfs.File
		if f, err = t.file(dirfd); err != nil {
			return 0, err
		}
		st, err = f.Statx(mask)
		f.DecRef()
	} else {
		p, err := t.path(pathAddr)
		if err != nil {
			return 0, err
		}
		base, err := t.base(dirfd, p)
		if err != nil {
			return 0, err
		}
		st, err = t.p.fs.Statx(base, p, flags&unix.AT_SYMLINK_NOFOLLOW == 0, mask)
		if err != nil {
			return 0, err
		}
	}
	if err != nil {
		return 0, err
	}
	return 0, t.p.k.svc.CopyOut(t.p.as, out, statxBytes(&st))
}

func sysLseek(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	off, err := f.Seek(int64(a[1]), int(a[2]))
	return uint64(off), err
}

func sysGetdents64(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	buf := make([]byte, min(a[2], bounceMax))
	n, err := f.Getdents(buf)
	if err != nil {
		return 0, err
	}
	return uint64(n), t.p.k.svc.CopyOut(t.p.as, a[1], buf[:n])
}

func sysReadlink(t *Task, a sysargs) (uint64, error) {
	return readlinkat(t, atFDCWD, a[0], a[1], a[2])
}

func sysReadlinkat(t *Task, a sysargs) (uint64, error) {
	return readlinkat(t, a[0], a[1], a[2], a[3])
}

func readlinkat(t *Task, dirfd, pathAddr, buf, size uint64) (uint64, error) {
	if int64(size) <= 0 {
		return 0, unix.EINVAL
	}
	p, err := t.path(pathAddr)
	if err != nil {
		return 0, err
	}
	base, err := t.base(dirfd, p)
	if err != nil {
		return 0, err
	}
	target, err := t.p.fs.Readlink(base, p)
	if err != nil {
		return 0, err
	}
	b := []byte(target)[:min(uint64(len(target)), size)]
	return uint64(len(b)), t.p.k.svc.CopyOut(t.p.as, buf, b)
}

func sysAccess(t *Task, a sysargs) (uint64, error) {
	return faccessat(t, atFDCWD, a[0], a[1])
}

func sysFaccessat(t *Task, a sysargs) (uint64, error) {
	return faccessat(t, a[0], a[1], a[2])
}

func faccessat(t *Task, dirfd, pathAddr, mode uint64) (uint64, error) {
	p, err := t.path(pathAddr)
	if err != nil {
		return 0, err
	}
	base, err := t.base(dirfd, p)
	if err != nil {
		return 0, err
	}
	return 0, t.p.fs.Access(base, p, uint32(mode))
}

func sysGetcwd(t *Task, a sysargs) (uint64, error) {
	t.p.mu.Lock()
	cwd := t.p.cwd
	t.p.mu.Unlock()
	b := append([]byte(cwd), 0)
	if uint64(len(b)) > a[1] {
		return 0, unix.ERANGE
	}
	return uint64(len(b)), t.p.k.svc.CopyOut(t.p.as, a[0], b)
}

func sysChdir(t *Task, a sysargs) (uint64, error) {
	p, err := t.path(a[0])
	if err != nil {
		return 0, err
	}
	// Never hold p.mu across a vfs call: /proc's provider takes it.
	t.p.mu.Lock()
	cwd := t.p.cwd
	t.p.mu.Unlock()
	cwd, err = t.p.fs.Chdir(cwd, p)
	if err != nil {
		return 0, err
	}
	t.p.mu.Lock()
	t.p.cwd = cwd
	t.p.mu.Unlock()
	return 0, nil
}

func sysFchdir(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	if !f.IsDir() || f.Path() == "" {
		return 0, unix.ENOTDIR
	}
	t.p.mu.Lock()
	t.p.cwd = f.Path()
	t.p.mu.Unlock()
	return 0, nil
}

func sysFcntl(t *Task, a sysargs) (uint64, error) {
	fd := int(int32(a[0]))
	switch int(a[1]) {
	case unix.F_DUPFD, unix.F_DUPFD_CLOEXEC:
		f, err := t.p.fds.Get(fd)
		if err != nil {
			return 0, err
		}
		return t.install(f, int(int32(a[2])), int(a[1]) == unix.F_DUPFD_CLOEXEC)
	case unix.F_GETFD:
		c, err := t.p.fds.GetCloexec(fd)
		if err != nil || !c {
			return 0, err
		}
		return unix.FD_CLOEXEC, nil
	case unix.F_SETFD:
		return 0, t.p.fds.SetCloexec(fd, a[2]&unix.FD_CLOEXEC != 0)
	case unix.F_GETFL:
		f, err := t.file(a[0])
		if err != nil {
			return 0, err
		}
		defer f.DecRef()
		return uint64(f.Flags()), nil
	case unix.F_SETFL:
		f, err := t.file(a[0])
		if err != nil {
			return 0, err
		}
		defer f.DecRef()
		return 0, f.SetFlags(int(a[2]))
	case unix.F_GETLK, unix.F_SETLK, unix.F_SETLKW, unix.F_OFD_GETLK, unix.F_OFD_SETLK, unix.F_OFD_SETLKW:
		return recordLock(t, a[0], int(a[1]), a[2])
	case unix.F_ADD_SEALS, unix.F_GET_SEALS:
		// Seals are the host file's own (a memfd's).
		f, err := t.file(a[0])
		if err != nil {
			return 0, err
		}
		defer f.DecRef()
		if f.HostFd() < 0 || !f.IsRegular() {
			return 0, unix.EINVAL
		}
		v, err := unix.FcntlInt(uintptr(f.HostFd()), int(a[1]), int(a[2]))
		return uint64(v), err
	}
	return 0, fmt.Errorf("fcntl %d: %w", a[1], unix.EINVAL)
}

func sysDup(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	return t.install(f, 0, false)
}

func sysDup2(t *Task, a sysargs) (uint64, error) {
	if a[0] == a[1] {
		f, err := t.file(a[0])
		if err != nil {
			return 0, err
		}
		f.DecRef()
		return a[1], nil
	}
	return dup3(t, a[0], a[1], 0)
}

func sysDup3(t *Task, a sysargs) (uint64, error) {
	if a[0] == a[1] || a[2]&^unix.O_CLOEXEC != 0 {
		return 0, unix.EINVAL
	}
	return dup3(t, a[0], a[1], a[2])
}

func dup3(t *Task, oldfd, newfd, flags uint64) (uint64, error) {
	f, err := t.file(oldfd)
	if err != nil {
		return 0, err
	}
	if int32(newfd) < 0 || int(int32(newfd)) >= t.p.fds.Limit() {
		f.DecRef()
		return 0, unix.EBADF
	}
	if err := t.p.fds.InstallAt(int(int32(newfd)), f, flags&unix.O_CLOEXEC != 0); err != nil {
		f.DecRef()
		return 0, err
	}
	return newfd, nil
}

// Terminal ioctls forwarded to a host terminal the tenant was given (a pty slave or the
// caller's tty); everything else is refused.
func sysIoctl(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	fd := f.HostFd()
	req := uint(a[1])
	switch req {
	case unix.TCGETS, unix.TCSETS, unix.TCSETSW, unix.TCSETSF:
		if fd < 0 {
			return 0, unix.ENOTTY
		}
		if req == unix.TCGETS {
			tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
			if err != nil {
				return 0, err
			}
			b := unsafe.Slice((*byte)(unsafe.Pointer(tio)), kernelTermiosSize)
			return 0, t.p.k.svc.CopyOut(t.p.as, a[2], b)
		}
		tio, err := unix.IoctlGetTermios(fd, unix.TCGETS) // keeps the speeds the kernel's struct lacks
		if err != nil {
			return 0, err
		}
		if err := t.p.k.svc.CopyIn(t.p.as, unsafe.Slice((*byte)(unsafe.Pointer(tio)), kernelTermiosSize), a[2]); err != nil {
			return 0, err
		}
		return 0, unix.IoctlSetTermios(fd, req, tio)
	case unix.TIOCGWINSZ:
		if fd < 0 {
			return 0, unix.ENOTTY
		}
		ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
		if err != nil {
			return 0, err
		}
		b := unsafe.Slice((*byte)(unsafe.Pointer(ws)), unsafe.Sizeof(*ws))
		return 0, t.p.k.svc.CopyOut(t.p.as, a[2], b)
	case unix.TIOCGPGRP:
		if fd < 0 {
			return 0, unix.ENOTTY
		}
		if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
			return 0, err
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(t.p.pid))
		return 0, t.p.k.svc.CopyOut(t.p.as, a[2], b[:])
	case fionbio:
		var b [4]byte
		if err := t.p.k.svc.CopyIn(t.p.as, b[:], a[2]); err != nil {
			return 0, err
		}
		fl := f.Flags() &^ unix.O_NONBLOCK
		if binary.LittleEndian.Uint32(b[:]) != 0 {
			fl |= unix.O_NONBLOCK
		}
		return 0, f.SetFlags(fl)
	case fioclex, fionclex:
		return 0, t.p.fds.SetCloexec(int(int32(a[0])), req == fioclex)
	}
	return 0, unix.ENOTTY
}

func sysUmask(t *Task, a sysargs) (uint64, error) {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	old := t.p.umask
	t.p.umask = uint32(a[0]) & 0o777
	return uint64(old), nil
}

func sysFadvise(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	f.DecRef()
	return 0, nil
}

func (t *Task) pathAt(dirfd, addr uint64) (string, string, error) {
	p, err := t.path(addr)
	if err != nil {
		return "", "", err
	}
	base, err := t.base(dirfd, p)
	return base, p, err
}

// kernelTermiosSize is the size of the kernel's struct termios (c_cc[19], no speeds), which
// TCGETS and TCSETS copy; unix.Termios is glibc's larger one.
const kernelTermiosSize = 36

const (
	fionbio  = 0x5421
	fionclex = 0x5450
	fioclex  = 0x5451
)

const atFDCWD = uint64(unix.AT_FDCWD & 0xffffffff)

func sysMkdir(t *Task, a sysargs) (uint64, error) { return mkdirat(t, atFDCWD, a[0], a[1]) }
func sysMkdirat(t *Task, a sysargs) (uint64, error) {
	return mkdirat(t, a[0], a[1], a[2])
}

func mkdirat(t *Task, dirfd, addr, mode uint64) (uint64, error) {
	base, p, err := t.pathAt(dirfd, addr)
	if err != nil {
		return 0, err
	}
	t.p.mu.Lock()
	umask := t.p.umask
	t.p.mu.Unlock()
	return 0, t.p.fs.Mkdir(base, p, uint32(mode)&^umask&0o7777)
}

func sysUnlink(t *Task, a sysargs) (uint64, error) { return unlinkat(t, atFDCWD, a[0], 0) }
func sysRmdir(t *Task, a sysargs) (uint64, error) {
	return unlinkat(t, atFDCWD, a[0], unix.AT_REMOVEDIR)
}
func sysUnlinkat(t *Task, a sysargs) (uint64, error) { return unlinkat(t, a[0], a[1], a[2]) }

func unlinkat(t *Task, dirfd, addr, flags uint64) (uint64, error) {
	base, p, err := t.pathAt(dirfd, addr)
	if err != nil {
		return 0, err
	}
	return 0, t.p.fs.Unlink(base, p, flags&unix.AT_REMOVEDIR != 0)
}

func sysRename(t *Task, a sysargs) (uint64, error) {
	return renameat(t, atFDCWD, a[0], atFDCWD, a[1], 0)
}
func sysRenameat(t *Task, a sysargs) (uint64, error) {
	return renameat(t, a[0], a[1], a[2], a[3], 0)
}
func sysRenameat2(t *Task, a sysargs) (uint64, error) {
	return renameat(t, a[0], a[1], a[2], a[3], a[4])
}

func renameat(t *Task, olddir, oldaddr, newdir, newaddr, flags uint64) (uint64, error) {
	if flags != 0 {
		return 0, unix.EINVAL
	}
	from, to, err := t.pathPair(olddir, oldaddr, newdir, newaddr)
	if err != nil {
		return 0, err
	}
	return 0, t.p.fs.Rename("/", from, to)
}

// pathPair reads the two paths of a call like renameat, each relative to its own directory, as
// absolute paths: the vfs resolves both from one directory.
func (t *Task) pathPair(olddir, oldaddr, newdir, newaddr uint64) (string, string, error) {
	ob, op, err := t.pathAt(olddir, oldaddr)
	if err != nil {
		return "", "", err
	}
	nb, np, err := t.pathAt(newdir, newaddr)
	if err != nil {
		return "", "", err
	}
	return joinPath(ob, op), joinPath(nb, np), nil
}

func joinPath(base, p string) string {
	if len(p) > 0 && p[0] == '/' {
		return p
	}
	if base == "/" {
		return "/" + p
	}
	return base + "/" + p
}

func sysFtruncate(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	return 0, f.Truncate(int64(a[1]))
}

func sysFsync(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	return 0, f.Sync()
}

// sendfile(out, in, offset*, count) as a copy through the sandbox.
func sysSendfile(t *Task, a sysargs) (uint64, error) {
	out, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer out.DecRef()
	in, err := t.file(a[1])
	if err != nil {
		return 0, err
	}
	defer in.DecRef()
	buf := make([]byte, min(a[3], 1<<20))
	var n int
	if a[2] != 0 {
		var b [8]byte
		if err := t.p.k.svc.CopyIn(t.p.as, b[:], a[2]); err != nil {
			return 0, err
		}
		off := int64(binary.LittleEndian.Uint64(b[:]))
		if n, err = in.Pread(buf, off); err != nil {
			return 0, err
		}
		binary.LittleEndian.PutUint64(b[:], uint64(off+int64(n)))
		if err := t.p.k.svc.CopyOut(t.p.as, a[2], b[:]); err != nil {
			return 0, err
		}
	} else if n, err = t.transfer(in, [][]byte{buf}, false); err != nil {
		return 0, err
	}
	// The output waits as a write(2) to it would, and may end short if a signal cuts it.
	w, err := t.transfer(out, [][]byte{buf[:n]}, true)
	if err != nil && w == 0 {
		return 0, err
	}
	return uint64(w), nil
}
