package kernel

import (
	"errors"
	"time"

	"github.com/endovisor/endo/crossing"
	"golang.org/x/sys/unix"
)

// sysargs are a system call's six arguments.
type sysargs [6]uint64

// sysFn serves one system call; it returns the value for rax, or an error that carries an
// errno (anything else becomes EIO, logged).
type sysFn func(t *Task, a sysargs) (uint64, error)

var syscallTable [512]sysFn

func init() {
	for nr, fn := range map[uint64]sysFn{
		unix.SYS_READ: sysRead, unix.SYS_WRITE: sysWrite, unix.SYS_READV: sysReadv,
		unix.SYS_WRITEV: sysWritev, unix.SYS_PREAD64: sysPread, unix.SYS_PWRITE64: sysPwrite,
		unix.SYS_OPEN: sysOpen, unix.SYS_OPENAT: sysOpenat, unix.SYS_CLOSE: sysClose,
		unix.SYS_STAT: sysStat, unix.SYS_LSTAT: sysLstat, unix.SYS_FSTAT: sysFstat,
		unix.SYS_NEWFSTATAT: sysNewfstatat, unix.SYS_STATX: sysStatx, unix.SYS_LSEEK: sysLseek,
		unix.SYS_GETDENTS64: sysGetdents64, unix.SYS_READLINK: sysReadlink,
		unix.SYS_READLINKAT: sysReadlinkat, unix.SYS_ACCESS: sysAccess,
		unix.SYS_FACCESSAT: sysFaccessat, unix.SYS_FACCESSAT2: sysFaccessat,
		unix.SYS_GETCWD: sysGetcwd, unix.SYS_CHDIR: sysChdir, unix.SYS_FCHDIR: sysFchdir,
		unix.SYS_FCNTL: sysFcntl, unix.SYS_DUP: sysDup, unix.SYS_DUP2: sysDup2, unix.SYS_DUP3: sysDup3,
		unix.SYS_IOCTL: sysIoctl, unix.SYS_UMASK: sysUmask, unix.SYS_FADVISE64: sysFadvise,
		unix.SYS_MKDIRAT: sysMkdirat, unix.SYS_MKDIR: sysMkdir, unix.SYS_UNLINKAT: sysUnlinkat,
		unix.SYS_UNLINK: sysUnlink, unix.SYS_RMDIR: sysRmdir, unix.SYS_RENAMEAT: sysRenameat,
		unix.SYS_RENAMEAT2: sysRenameat2, unix.SYS_RENAME: sysRename, unix.SYS_FTRUNCATE: sysFtruncate,
		unix.SYS_FSYNC: sysFsync, unix.SYS_FDATASYNC: sysFsync,
		unix.SYS_SYMLINK: sysSymlink, unix.SYS_SYMLINKAT: sysSymlinkat, unix.SYS_LINK: sysLink,
		unix.SYS_LINKAT: sysLinkat, unix.SYS_CHMOD: sysChmod, unix.SYS_FCHMOD: sysFchmod,
		unix.SYS_FCHMODAT: sysFchmodat, unix.SYS_CHOWN: sysChown, unix.SYS_LCHOWN: sysLchown,
		unix.SYS_FCHOWN: sysFchown, unix.SYS_FCHOWNAT: sysFchownat, unix.SYS_UTIMENSAT: sysUtimensat,
		unix.SYS_UTIMES: sysUtimes, unix.SYS_FUTIMESAT: sysFutimesat, unix.SYS_UTIME: sysUtime,
		unix.SYS_STATFS: sysStatfs, unix.SYS_FSTATFS: sysFstatfs, unix.SYS_TRUNCATE: sysTruncate,
		unix.SYS_MKNOD: sysMknod, unix.SYS_MKNODAT: sysMknodat, unix.SYS_SYNC: sysSync,
		unix.SYS_SYNCFS: sysSyncfs, unix.SYS_SYSINFO: sysSysinfo, unix.SYS_GETGROUPS: sysGetgroups,
		unix.SYS_SYSLOG: sysSyslog, unix.SYS_TIMES: sysTimes, unix.SYS_CLOCK_GETRES: sysClockGetres,
		unix.SYS_FALLOCATE: sysFallocate, unix.SYS_PREADV: sysPreadv, unix.SYS_PWRITEV: sysPwritev,
		unix.SYS_PREADV2: sysPreadv2, unix.SYS_PWRITEV2: sysPwritev2, unix.SYS_FLOCK: sysFlock,
		unix.SYS_PERSONALITY: sysPersonality, unix.SYS_GETRESUID: sysGetresuid,
		unix.SYS_GETRESGID: sysGetresgid, unix.SYS_GETCPU: sysGetcpu,
		unix.SYS_SETUID: sysSetuid, unix.SYS_SETGID: sysSetgid, unix.SYS_SETREUID: sysSetreuid,
		unix.SYS_SETREGID: sysSetregid, unix.SYS_SETRESUID: sysSetresuid, unix.SYS_SETRESGID: sysSetresgid,
		unix.SYS_SETGROUPS: sysSetgroups, unix.SYS_SETFSUID: sysSetfsuid, unix.SYS_SETFSGID: sysSetfsgid,
		unix.SYS_RT_SIGTIMEDWAIT: sysRtSigtimedwait, unix.SYS_TIMERFD_CREATE: sysTimerfdCreate,
		unix.SYS_TIMERFD_SETTIME: sysTimerfdSettime, unix.SYS_TIMERFD_GETTIME: sysTimerfdGettime,
		unix.SYS_INOTIFY_INIT: sysInotifyInit, unix.SYS_INOTIFY_INIT1: sysInotifyInit1,
		unix.SYS_INOTIFY_ADD_WATCH: sysInotifyAddWatch, unix.SYS_INOTIFY_RM_WATCH: sysInotifyRmWatch,
		unix.SYS_SIGNALFD: sysSignalfd, unix.SYS_SIGNALFD4: sysSignalfd4,
		unix.SYS_MEMFD_CREATE: sysMemfdCreate, unix.SYS_SOCKETPAIR: sysSocketpair,
		unix.SYS_SENDTO: sysSendto, unix.SYS_RECVFROM: sysRecvfrom, unix.SYS_SENDMSG: sysSendmsg,
		unix.SYS_RECVMSG: sysRecvmsg, unix.SYS_SHUTDOWN: sysShutdown,
		unix.SYS_GETSOCKNAME: sysGetsockname, unix.SYS_GETPEERNAME: sysGetsockname,
		unix.SYS_GETSOCKOPT: sysGetsockopt, unix.SYS_SETSOCKOPT: sysSetsockopt,

		unix.SYS_BRK: sysBrk, unix.SYS_MMAP: sysMmap, unix.SYS_MUNMAP: sysMunmap,
		unix.SYS_MPROTECT: sysMprotect, unix.SYS_MADVISE: sysMadvise, unix.SYS_MREMAP: sysMremap,
		unix.SYS_SENDFILE: sysSendfile,

		unix.SYS_EXIT: sysExit, unix.SYS_EXIT_GROUP: sysExitGroup, unix.SYS_GETPID: sysGetpid,
		unix.SYS_GETTID: sysGettid, unix.SYS_GETPPID: sysGetppid, unix.SYS_GETUID: sysGetuid,
		unix.SYS_GETEUID: sysGeteuid, unix.SYS_GETGID: sysGetgid, unix.SYS_GETEGID: sysGetegid,
		unix.SYS_GETPGRP: sysGetpgrp, unix.SYS_GETPGID: sysGetpgid, unix.SYS_GETSID: sysGetsid,
		unix.SYS_SETPGID: sysSetpgid, unix.SYS_SETSID: sysSetsid,
		unix.SYS_FORK: sysFork, unix.SYS_VFORK: sysVfork, unix.SYS_CLONE: sysClone,
		unix.SYS_EXECVE: sysExecve, unix.SYS_EXECVEAT: sysExecveat, unix.SYS_WAIT4: sysWait4,
		unix.SYS_WAITID: sysWaitid, unix.SYS_POLL: sysPoll, unix.SYS_PPOLL: sysPpoll,
		unix.SYS_SELECT: sysSelect, unix.SYS_PSELECT6: sysPselect6,
		unix.SYS_PIPE: sysPipe, unix.SYS_PIPE2: sysPipe2,
		unix.SYS_RT_SIGRETURN: sysRtSigreturn, unix.SYS_SIGALTSTACK: sysSigaltstack,
		unix.SYS_RT_SIGPENDING: sysRtSigpending, unix.SYS_PAUSE: sysPause,
		unix.SYS_RT_SIGSUSPEND: sysRtSigsuspend, unix.SYS_FUTEX: sysFutex,
		unix.SYS_ARCH_PRCTL: sysArchPrctl, unix.SYS_PRCTL: sysPrctl, unix.SYS_SET_TID_ADDRESS: sysSetTidAddress,
		unix.SYS_SET_ROBUST_LIST: sysZero, unix.SYS_UNAME: sysUname,
		unix.SYS_RT_SIGACTION: sysRtSigaction, unix.SYS_RT_SIGPROCMASK: sysRtSigprocmask,
		unix.SYS_GETRANDOM: sysGetrandom, unix.SYS_PRLIMIT64: sysPrlimit,
		unix.SYS_GETRLIMIT: sysGetrlimit, unix.SYS_SETRLIMIT: sysSetrlimit,
		unix.SYS_CLOCK_GETTIME: sysClockGettime, unix.SYS_GETTIMEOFDAY: sysGettimeofday,
		unix.SYS_TIME: sysTime, unix.SYS_NANOSLEEP: sysNanosleep,
		unix.SYS_CLOCK_NANOSLEEP: sysClockNanosleep, unix.SYS_SCHED_YIELD: sysSchedYield,
		unix.SYS_SCHED_GETAFFINITY: sysSchedGetaffinity, unix.SYS_KILL: sysKill,
		unix.SYS_SCHED_SETAFFINITY: sysSchedSetaffinity, unix.SYS_GETPRIORITY: sysGetpriority,
		unix.SYS_SETPRIORITY: sysSetpriority, unix.SYS_SCHED_SETSCHEDULER: sysSchedSetscheduler,
		unix.SYS_SCHED_GETSCHEDULER: sysSchedGetscheduler, unix.SYS_SCHED_SETPARAM: sysSchedSetparam,
		unix.SYS_SCHED_GETPARAM: sysSchedGetparam, unix.SYS_SCHED_GET_PRIORITY_MAX: sysSchedGetPriorityMax,
		unix.SYS_SCHED_GET_PRIORITY_MIN: sysSchedGetPriorityMin, unix.SYS_SCHED_RR_GET_INTERVAL: sysSchedRRGetInterval,
		unix.SYS_TGKILL: sysTgkill, unix.SYS_TKILL: sysTkill, unix.SYS_GETRUSAGE: sysGetrusage,
		unix.SYS_EPOLL_CREATE:  sysEpollCreate,
		unix.SYS_EPOLL_CREATE1: sysEpollCreate1,
		unix.SYS_EPOLL_CTL:     sysEpollCtl,
		unix.SYS_EPOLL_WAIT:    sysEpollWait,
		unix.SYS_EPOLL_PWAIT:   sysEpollPwait,
		unix.SYS_EPOLL_PWAIT2:  sysEpollPwait2,
		unix.SYS_EVENTFD:       sysEventfd,
		unix.SYS_EVENTFD2:      sysEventfd2,
		unix.SYS_ALARM:         sysAlarm,
		unix.SYS_SETITIMER:     sysSetitimer,
		unix.SYS_GETITIMER:     sysGetitimer,
	} {
		syscallTable[nr] = fn
	}
	for _, nr := range notPermitted {
		syscallTable[nr] = sysNotPermitted
	}
}

// syscall serves the system call the task trapped on.
func (t *Task) syscall() {
	t.served++
	r := t.th.Regs
	nr := r.Orig_rax
	a := sysargs{r.Rdi, r.Rsi, r.Rdx, r.R10, r.R8, r.R9}
	var fn sysFn
	if nr < uint64(len(syscallTable)) {
		fn = syscallTable[nr]
	}
	if fn == nil {
		t.p.k.countUnimplemented(nr)
		r.Rax = negErrno(unix.ENOSYS)
		return
	}
	t.applyCreds()
	v, err := fn(t, a)
	if t.parked {
		return // the call parked the registers (a yield): the stub owns them, result and all
	}
	if err != nil {
		r.Rax = negErrno(errnoOf(t, nr, err))
		return
	}
	r.Rax = v
}

func negErrno(e unix.Errno) uint64 { return uint64(-int64(e)) }

// errnoOf finds the errno an error carries; an error without one is a kernel bug, logged.
func errnoOf(t *Task, nr uint64, err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	t.p.k.cfg.Log("pid %d: %s: %v", t.p.pid, sysNames[nr], err)
	return unix.EIO
}

// timeCrossing measures the tenant round trip on the first stub of the kernel, which waits at
// its boot ping, and the service table's overhead; both are logged.
func (k *Kernel) timeCrossing(th *crossing.Thread) {
	k.mu.Lock()
	if k.timed {
		k.mu.Unlock()
		return
	}
	k.timed = true
	k.mu.Unlock()

	svc := k.svc.TimeNoop()
	var spin uint64
	spare := k.sched.TryAcquire()
	if spare != nil && k.sched.Idle() > 0 {
		spin = spinMaxMicros * crossing.CyclesPerMicrosecond()
	}
	best := time.Hour
	for i := 0; i < 7; i++ {
		t0 := time.Now()
		if err := th.Resume(0, spin, spin); err != nil {
			break
		}
		best = min(best, time.Since(t0))
	}
	if spare != nil {
		k.sched.Release(spare)
	}
	k.mu.Lock()
	k.timings = Timings{Service: svc, RoundTrip: best}
	k.mu.Unlock()
	k.cfg.Log("crossing: tenant round trip %v (cheapest of 7, spinning=%v); %v", best, spin > 0, svc)
}
