package kernel

import (
	"encoding/binary"
	"errors"
	"os"
	"time"

	"github.com/endovisor/endo/sandbox/kernel/vfs"

	"golang.org/x/sys/unix"
)

// Smaller calls programs expect to find: times, clock_getres, fallocate, preadv/pwritev, flock,
// personality and getcpu.

// times(buf): the process's and its reaped children's CPU times in clock ticks; returns the
// ticks since the sandbox started.
func sysTimes(t *Task, a sysargs) (uint64, error) {
	p := t.p
	tick := time.Second / clockTicks
	if a[0] != 0 {
		self := p.usage()
		p.reapedMu.Lock()
		kids := p.reaped
		p.reapedMu.Unlock()
		var b [32]byte
		for i, d := range []time.Duration{self.user, self.sys, kids.user, kids.sys} {
			binary.LittleEndian.PutUint64(b[8*i:], uint64(d/tick))
		}
		if err := p.k.svc.CopyOut(p.as, a[0], b[:]); err != nil {
			return 0, err
		}
	}
	return uint64(time.Since(procBoot) / tick), nil
}

// clock_getres: the host's resolution of the clocks clock_gettime serves from the host; the CPU
// clocks count nanoseconds.
func sysClockGetres(t *Task, a sysargs) (uint64, error) {
	var ts unix.Timespec
	switch a[0] {
	case unix.CLOCK_REALTIME, unix.CLOCK_MONOTONIC, unix.CLOCK_MONOTONIC_RAW, unix.CLOCK_REALTIME_COARSE,
		unix.CLOCK_MONOTONIC_COARSE, unix.CLOCK_BOOTTIME:
		if err := unix.ClockGetres(int32(a[0]), &ts); err != nil {
			return 0, err
		}
	case unix.CLOCK_PROCESS_CPUTIME_ID, unix.CLOCK_THREAD_CPUTIME_ID:
		ts = unix.Timespec{Nsec: 1}
	default:
		return 0, unix.EINVAL
	}
	if a[1] == 0 {
		return 0, nil
	}
	return 0, t.p.k.svc.CopyOut(t.p.as, a[1], timespecBytes(&ts))
}

func sysFallocate(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	if int64(a[2]) < 0 || int64(a[3]) <= 0 {
		return 0, unix.EINVAL
	}
	return 0, f.Fallocate(uint32(a[1]), int64(a[2]), int64(a[3]))
}

// preadv(fd, iov, iovcnt, pos_l, pos_h) and pwritev: one positioned transfer through a bounce
// buffer (on x86-64 the whole offset is in pos_l). The "2" forms take flags (none served) and an
// offset of -1 for the file's own position, which is readv and writev.
func sysPreadv(t *Task, a sysargs) (uint64, error)  { return positionedIO(t, a, false, false) }
func sysPwritev(t *Task, a sysargs) (uint64, error) { return positionedIO(t, a, true, false) }
func sysPreadv2(t *Task, a sysargs) (uint64, error) { return positionedIO(t, a, false, true) }
func sysPwritev2(t *Task, a sysargs) (uint64, error) {
	return positionedIO(t, a, true, true)
}

func positionedIO(t *Task, a sysargs, write, v2 bool) (uint64, error) {
	if v2 {
		if a[5] != 0 {
			return 0, unix.EOPNOTSUPP // RWF_* flags
		}
		if int64(a[3]) == -1 {
			return vectorIO(t, a, write)
		}
	}
	off := int64(a[3])
	if off < 0 {
		return 0, unix.EINVAL
	}
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	bufs, err := t.iovecs(a[1], a[2], !write)
	if err != nil || len(bufs) == 0 {
		return 0, err
	}
	bounce := gather(bufs, write)
	if write {
		w, err := f.Pwrite(bounce, off)
		return uint64(w), err
	}
	n, err := f.Pread(bounce, off)
	if err != nil {
		return 0, err
	}
	scatter(bufs, bounce[:n])
	return uint64(n), nil
}

// flock(fd, op): the host's lock on the file, which the sandbox's processes share as Linux's
// open file descriptions do. A lock that must wait is tried again every few milliseconds
// without the vCPU, so that a signal or a kill cuts the wait.
func sysFlock(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	op := int(a[1])
	how := op &^ unix.LOCK_NB
	if how != unix.LOCK_SH && how != unix.LOCK_EX && how != unix.LOCK_UN {
		return 0, unix.EINVAL
	}
	fd := f.HostFd()
	if fd < 0 {
		return 0, unix.EINVAL // the sandbox's own objects hold no host lock
	}
	for {
		err := unix.Flock(fd, how|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) || op&unix.LOCK_NB != 0 {
			return 0, err
		}
		if err := t.waitRetry(); err != nil {
			return 0, err
		}
	}
}

// personality: tasks run as PER_LINUX, which may be asked for (0) or read (0xffffffff); no other
// persona is served.
func sysPersonality(t *Task, a sysargs) (uint64, error) {
	if uint32(a[0]) == 0xffffffff || uint32(a[0]) == 0 {
		return 0, nil
	}
	t.p.k.countUnimplemented(unix.SYS_PERSONALITY)
	return 0, unix.EINVAL
}

// getcpu(cpu, node, cache): the vCPU the task runs on, node 0.
func sysGetcpu(t *Task, a sysargs) (uint64, error) {
	var b [4]byte
	if a[0] != 0 {
		binary.LittleEndian.PutUint32(b[:], uint32(t.kt.Acquire().ID))
		if err := t.p.k.svc.CopyOut(t.p.as, a[0], b[:]); err != nil {
			return 0, err
		}
	}
	if a[1] != 0 {
		binary.LittleEndian.PutUint32(b[:], 0)
		if err := t.p.k.svc.CopyOut(t.p.as, a[1], b[:]); err != nil {
			return 0, err
		}
	}
	return 0, nil
}

// recordLock serves fcntl's byte-range locks (SQLite's) with the host's open-file-description
// locks on the shared host file. Every host fd belongs to the sandbox process, so the host's
// per-process POSIX locks would never conflict between the sandbox's processes; description
// locks do, for each process that opened the file itself. (A process's two opens of one file
// conflict too, where POSIX locks would not; and a holder's pid reads as -1.) A lock that must
// wait is tried again every few milliseconds without the vCPU, so that a signal cuts the wait.
func recordLock(t *Task, fd uint64, cmd int, addr uint64) (uint64, error) {
	f, err := t.file(fd)
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	hfd := f.HostFd()
	if hfd < 0 {
		return 0, unix.EINVAL // the sandbox's own objects hold no host lock
	}
	var lk unix.Flock_t
	if err := t.p.k.svc.CopyIn(t.p.as, structBytes(&lk), addr); err != nil {
		return 0, err
	}
	ofd := cmd == unix.F_OFD_GETLK || cmd == unix.F_OFD_SETLK || cmd == unix.F_OFD_SETLKW
	if ofd && lk.Pid != 0 {
		return 0, unix.EINVAL
	}
	lk.Pid = 0
	switch cmd {
	case unix.F_GETLK, unix.F_OFD_GETLK:
		if err := unix.FcntlFlock(uintptr(hfd), unix.F_OFD_GETLK, &lk); err != nil {
			return 0, err
		}
		return 0, t.p.k.svc.CopyOut(t.p.as, addr, structBytes(&lk))
	}
	for {
		err := unix.FcntlFlock(uintptr(hfd), unix.F_OFD_SETLK, &lk)
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) ||
			cmd == unix.F_SETLK || cmd == unix.F_OFD_SETLK {
			return 0, err
		}
		if err := t.waitRetry(); err != nil {
			return 0, err
		}
	}
}

// waitRetry waits a few milliseconds without the vCPU before a lock is tried again; a signal or
// the process's end cuts it short (EINTR).
func (t *Task) waitRetry() error {
	cut := false
	t.blocking(func() {
		select {
		case <-t.interrupt:
			cut = true
		case <-t.p.stub.Exited():
			cut = true
		case <-time.After(5 * time.Millisecond):
		}
	})
	if cut {
		return unix.EINTR
	}
	return nil
}

// Calls a container does not have the capabilities for (CAP_SYS_ADMIN, CAP_SYS_TIME,
// CAP_SYS_BOOT, CAP_SYS_MODULE, CAP_SYS_RAWIO): EPERM, as in a default container, rather than
// ENOSYS. mount, sethostname, date -s and their kind say "Operation not permitted".
func sysNotPermitted(t *Task, a sysargs) (uint64, error) { return 0, unix.EPERM }

var notPermitted = []uint64{
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF,
	unix.SYS_REBOOT, unix.SYS_SETHOSTNAME, unix.SYS_SETDOMAINNAME, unix.SYS_SETTIMEOFDAY,
	unix.SYS_CLOCK_SETTIME, unix.SYS_ACCT, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE,
	unix.SYS_DELETE_MODULE, unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_IOPL,
	unix.SYS_IOPERM,
}

// memfd_create(name, flags): an anonymous host file behind a tenant fd, read, written, sized
// and sealed like any host file. Its shared writable mappings are refused like any file's.
func sysMemfdCreate(t *Task, a sysargs) (uint64, error) {
	flags := a[1]
	if flags&^(unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING) != 0 {
		return 0, unix.EINVAL // MFD_HUGETLB and the exec flags are not served
	}
	name, err := t.p.k.svc.ReadString(t.p.as, a[0], 250)
	if err != nil {
		return 0, err
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|int(flags&unix.MFD_ALLOW_SEALING))
	if err != nil {
		return 0, err
	}
	f := vfs.HostFile(os.NewFile(uintptr(fd), "memfd"), "/memfd:"+name+" (deleted)")
	return t.install(f, 0, flags&unix.MFD_CLOEXEC != 0)
}
