package kernel

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/endovisor/endo/crossing"
	"golang.org/x/sys/unix"
)

// What uname(2) reports: a tenant can tell it runs in Endo.
const (
	unameSysname = "Linux"
	unameRelease = "6.6.0-endo"
	unameVersion = "#1 SMP Endo"
	unameMachine = "x86_64"
)

func sysZero(t *Task, a sysargs) (uint64, error) { return 0, nil }

func sysExit(t *Task, a sysargs) (uint64, error) {
	t.p.mu.Lock()
	last := t.p.live == 1
	t.p.mu.Unlock()
	if last {
		t.exitGroup(ExitStatus{Code: int(a[0] & 0xff)})
	} else {
		t.exitThread()
	}
	return 0, nil
}

func sysExitGroup(t *Task, a sysargs) (uint64, error) {
	t.exitGroup(ExitStatus{Code: int(a[0] & 0xff)})
	return 0, nil
}

func sysGetpid(t *Task, a sysargs) (uint64, error) { return uint64(t.p.pid), nil }
func sysGettid(t *Task, a sysargs) (uint64, error) { return uint64(t.tid), nil }

const (
	archSetGS = 0x1001
	archSetFS = 0x1002
	archGetFS = 0x1003
	archGetGS = 0x1004
)

func sysArchPrctl(t *Task, a sysargs) (uint64, error) {
	switch a[0] {
	case archSetFS:
		if a[1] >= 1<<47 {
			return 0, unix.EPERM
		}
		t.fsBase = a[1]
		t.th.Regs.Fs_base = a[1]
		t.resumeFlags |= crossing.ResumeSetFS
		return 0, nil
	case archGetFS:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], t.fsBase)
		return 0, t.p.k.svc.CopyOut(t.p.as, a[1], b[:])
	case archGetGS:
		var b [8]byte
		return 0, t.p.k.svc.CopyOut(t.p.as, a[1], b[:])
	}
	return 0, unix.EINVAL
}

func sysSetTidAddress(t *Task, a sysargs) (uint64, error) {
	t.clearTID = a[0]
	return uint64(t.tid), nil
}

func sysUname(t *Task, a sysargs) (uint64, error) {
	var u [6 * 65]byte
	for i, s := range []string{unameSysname, t.p.k.cfg.Hostname, unameRelease, unameVersion, unameMachine, "(none)"} {
		copy(u[i*65:i*65+64], s)
	}
	return 0, t.p.k.svc.CopyOut(t.p.as, a[0], u[:])
}

func sysRtSigaction(t *Task, a sysargs) (uint64, error) {
	sig := a[0]
	if sig == 0 || sig >= 65 || a[3] != 8 {
		return 0, unix.EINVAL
	}
	p := t.p
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.sigacts[sig]
	if a[1] != 0 {
		if sig == uint64(unix.SIGKILL) || sig == uint64(unix.SIGSTOP) {
			return 0, unix.EINVAL
		}
		var b [32]byte
		if err := p.k.svc.CopyIn(p.as, b[:], a[1]); err != nil {
			return 0, err
		}
		p.sigacts[sig] = sigaction{
			handler: binary.LittleEndian.Uint64(b[0:]), flags: binary.LittleEndian.Uint64(b[8:]),
			restorer: binary.LittleEndian.Uint64(b[16:]), mask: binary.LittleEndian.Uint64(b[24:]),
		}
	}
	if a[2] != 0 {
		var b [32]byte
		binary.LittleEndian.PutUint64(b[0:], old.handler)
		binary.LittleEndian.PutUint64(b[8:], old.flags)
		binary.LittleEndian.PutUint64(b[16:], old.restorer)
		binary.LittleEndian.PutUint64(b[24:], old.mask)
		if err := p.k.svc.CopyOut(p.as, a[2], b[:]); err != nil {
			return 0, err
		}
	}
	return 0, nil
}

func sysRtSigprocmask(t *Task, a sysargs) (uint64, error) {
	if a[3] != 8 {
		return 0, unix.EINVAL
	}
	old := t.mask()
	if a[1] != 0 {
		var b [8]byte
		if err := t.p.k.svc.CopyIn(t.p.as, b[:], a[1]); err != nil {
			return 0, err
		}
		set := binary.LittleEndian.Uint64(b[:]) &^ (1<<(unix.SIGKILL-1) | 1<<(unix.SIGSTOP-1))
		switch a[0] {
		case unix.SIG_BLOCK:
			t.setMask(t.mask() | set)
		case unix.SIG_UNBLOCK:
			t.setMask(t.mask() &^ set)
		case unix.SIG_SETMASK:
			t.setMask(set)
		default:
			return 0, unix.EINVAL
		}
	}
	if a[2] != 0 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], old)
		return 0, t.p.k.svc.CopyOut(t.p.as, a[2], b[:])
	}
	return 0, nil
}

func sysGetrandom(t *Task, a sysargs) (uint64, error) {
	if a[2]&^(unix.GRND_NONBLOCK|unix.GRND_RANDOM|unix.GRND_INSECURE) != 0 {
		return 0, unix.EINVAL
	}
	b := make([]byte, min(a[1], bounceMax))
	rand.Read(b)
	return uint64(len(b)), t.p.k.svc.CopyOut(t.p.as, a[0], b)
}

func defaultRlimits() map[int]unix.Rlimit {
	inf := uint64(unix.RLIM_INFINITY)
	return map[int]unix.Rlimit{
		unix.RLIMIT_STACK:   {Cur: stackSize, Max: inf},
		unix.RLIMIT_NOFILE:  {Cur: 1024, Max: 4096},
		unix.RLIMIT_CORE:    {Cur: 0, Max: inf},
		unix.RLIMIT_NPROC:   {Cur: 4096, Max: 4096},
		unix.RLIMIT_MEMLOCK: {Cur: 8 << 20, Max: 8 << 20},
	}
}

func (p *Process) rlimit(res int) unix.Rlimit {
	if r, ok := p.rlimits[res]; ok {
		return r
	}
	return unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
}

func sysPrlimit(t *Task, a sysargs) (uint64, error) {
	if a[0] != 0 && a[0] != uint64(t.p.pid) {
		return 0, unix.ESRCH
	}
	return prlimit(t, int(a[1]), a[2], a[3])
}

func sysGetrlimit(t *Task, a sysargs) (uint64, error) { return prlimit(t, int(a[0]), 0, a[1]) }
func sysSetrlimit(t *Task, a sysargs) (uint64, error) { return prlimit(t, int(a[0]), a[1], 0) }

func prlimit(t *Task, res int, newAddr, oldAddr uint64) (uint64, error) {
	if res < 0 || res >= unix.RLIMIT_RTTIME+1 {
		return 0, unix.EINVAL
	}
	p := t.p
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.rlimit(res)
	if newAddr != 0 {
		var b [16]byte
		if err := p.k.svc.CopyIn(p.as, b[:], newAddr); err != nil {
			return 0, err
		}
		n := unix.Rlimit{Cur: binary.LittleEndian.Uint64(b[:]), Max: binary.LittleEndian.Uint64(b[8:])}
		if n.Cur > n.Max {
			return 0, unix.EINVAL
		}
		p.rlimits[res] = n
		if res == unix.RLIMIT_NOFILE {
			p.fds.SetLimit(int(min(n.Cur, 1<<20)))
		}
	}
	if oldAddr != 0 {
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:], old.Cur)
		binary.LittleEndian.PutUint64(b[8:], old.Max)
		return 0, p.k.svc.CopyOut(p.as, oldAddr, b[:])
	}
	return 0, nil
}

func timespecBytes(ts *unix.Timespec) []byte {
	return structBytes(ts)
}

func sysClockGettime(t *Task, a sysargs) (uint64, error) {
	var ts unix.Timespec
	switch a[0] {
	case unix.CLOCK_REALTIME, unix.CLOCK_MONOTONIC, unix.CLOCK_MONOTONIC_RAW, unix.CLOCK_REALTIME_COARSE,
		unix.CLOCK_MONOTONIC_COARSE, unix.CLOCK_BOOTTIME:
		if err := unix.ClockGettime(int32(a[0]), &ts); err != nil {
			return 0, err
		}
	case unix.CLOCK_PROCESS_CPUTIME_ID, unix.CLOCK_THREAD_CPUTIME_ID:
		ts = unix.NsecToTimespec(int64(t.p.cpuTime()))
	default:
		return 0, unix.EINVAL
	}
	return 0, t.p.k.svc.CopyOut(t.p.as, a[1], timespecBytes(&ts))
}

func sysGettimeofday(t *Task, a sysargs) (uint64, error) {
	if a[0] == 0 {
		return 0, nil
	}
	now := time.Now()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], uint64(now.Unix()))
	binary.LittleEndian.PutUint64(b[8:], uint64(now.Nanosecond()/1000))
	return 0, t.p.k.svc.CopyOut(t.p.as, a[0], b[:])
}

func sysTime(t *Task, a sysargs) (uint64, error) {
	now := uint64(time.Now().Unix())
	if a[0] != 0 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], now)
		if err := t.p.k.svc.CopyOut(t.p.as, a[0], b[:]); err != nil {
			return 0, err
		}
	}
	return now, nil
}

func (t *Task) readTimespec(addr uint64) (time.Duration, error) {
	var ts unix.Timespec
	if err := t.p.k.svc.CopyIn(t.p.as, timespecBytes(&ts), addr); err != nil {
		return 0, err
	}
	if ts.Sec < 0 || ts.Nsec < 0 || ts.Nsec >= 1e9 {
		return 0, unix.EINVAL
	}
	return time.Duration(ts.Sec)*time.Second + time.Duration(ts.Nsec), nil
}

// sleep waits without a vCPU; a signal or the process being killed cuts it short (EINTR).
func (t *Task) sleep(d time.Duration) error {
	cut := false
	t.blocking(func() { cut = t.parkUntil(time.Now().Add(d)) })
	if cut {
		return unix.EINTR
	}
	return nil
}

// parkUntil sleeps on the carrier's own wake word until deadline (zero: none). It reports
// whether a signal's poke or the stub's end (waitCut) cut it short.
func (t *Task) parkUntil(deadline time.Time) (cut bool) {
	cut, _ = t.waitWoken(t.park.Ticket(), deadline, func() bool { return false })
	return cut
}

func sysNanosleep(t *Task, a sysargs) (uint64, error) {
	d, err := t.readTimespec(a[0])
	if err != nil {
		return 0, err
	}
	return 0, t.sleep(d)
}

func sysClockNanosleep(t *Task, a sysargs) (uint64, error) {
	d, err := t.readTimespec(a[2])
	if err != nil {
		return 0, err
	}
	if a[1]&unix.TIMER_ABSTIME != 0 {
		var now unix.Timespec
		if err := unix.ClockGettime(int32(a[0]), &now); err != nil {
			return 0, unix.EINVAL
		}
		d -= time.Duration(now.Nano())
	}
	if d > 0 {
		return 0, t.sleep(d)
	}
	return 0, nil
}

func sysTgkill(t *Task, a sysargs) (uint64, error) {
	p := t.p.k.lookup(int(int32(a[0])))
	if p == nil {
		return 0, unix.ESRCH
	}
	return tkill(t, p, int(int32(a[1])), a[2])
}

func sysTkill(t *Task, a sysargs) (uint64, error) {
	return tkill(t, t.p, int(int32(a[0])), a[1])
}

func tkill(sender *Task, p *Process, tid int, sig uint64) (uint64, error) {
	if sig >= 65 {
		return 0, unix.EINVAL
	}
	target := p.task(tid)
	if target == nil {
		return 0, unix.ESRCH
	}
	if sig == 0 {
		return 0, nil
	}
	return 0, p.postInfo(unix.Signal(sig), target, sigInfo{code: siTkill, pid: sender.p.pid})
}

// getrusage: the caller's (or its waited-for children's) user and system time and the page
// faults the sandbox served (the faults a sandbox that maps eagerly never sees are none).
func sysGetrusage(t *Task, a sysargs) (uint64, error) {
	const (
		rusageSelf     = 0
		rusageChildren = -1
		rusageThread   = 1
	)
	var ru [144]byte
	switch int32(a[0]) {
	case rusageSelf, rusageThread:
		t.p.usage().put(&ru)
	case rusageChildren:
		t.p.reapedMu.Lock()
		u := t.p.reaped
		t.p.reapedMu.Unlock()
		u.put(&ru)
	default:
		return 0, unix.EINVAL
	}
	return 0, t.p.k.svc.CopyOut(t.p.as, a[1], ru[:])
}

// prctl(2) options served here; everything else is EINVAL (as Linux answers an option it does
// not know) and counted in the sandbox's report.
const (
	prSetPdeathsig     = 1
	prGetPdeathsig     = 2
	prGetDumpable      = 3
	prSetDumpable      = 4
	prSetName          = 15
	prGetName          = 16
	prGetTimerslack    = 30
	prSetNoNewPrivs    = 38
	prGetNoNewPrivs    = 39
	taskCommLen        = 16
	defaultTimerslack  = 50_000 // ns, Linux's default for a normal task
	maxSignalForPrctls = 64
)

func sysPrctl(t *Task, a sysargs) (uint64, error) {
	p := t.p
	switch a[0] {
	case prSetName:
		// The thread's name: the string's first 15 bytes (a longer one is cut, not refused).
		name, err := p.k.svc.ReadString(p.as, a[1], taskCommLen)
		if errors.Is(err, unix.ENAMETOOLONG) {
			var b [taskCommLen - 1]byte
			err = p.k.svc.CopyIn(p.as, b[:], a[1])
			name = string(b[:])
		}
		if err != nil {
			return 0, err
		}
		if len(name) > taskCommLen-1 {
			name = name[:taskCommLen-1]
		}
		p.mu.Lock()
		t.comm = name
		p.mu.Unlock()
		return 0, nil
	case prGetName:
		var b [taskCommLen]byte
		copy(b[:taskCommLen-1], t.name())
		return 0, p.k.svc.CopyOut(p.as, a[1], b[:])
	case prSetPdeathsig:
		if a[1] > maxSignalForPrctls {
			return 0, unix.EINVAL
		}
		p.pdeathsig.Store(int32(a[1]))
		return 0, nil
	case prGetPdeathsig:
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(p.pdeathsig.Load()))
		return 0, p.k.svc.CopyOut(p.as, a[1], b[:])
	case prSetDumpable:
		if a[1] > 1 {
			return 0, unix.EINVAL
		}
		p.undumpable.Store(a[1] == 0)
		return 0, nil
	case prGetDumpable:
		if p.undumpable.Load() {
			return 0, nil
		}
		return 1, nil
	case prSetNoNewPrivs:
		// The sandbox never grants privileges at execve (no set-user-ID programs), so the
		// promise holds as it is; it cannot be taken back.
		if a[1] != 1 || a[2]|a[3]|a[4] != 0 {
			return 0, unix.EINVAL
		}
		p.noNewPrivs.Store(true)
		return 0, nil
	case prGetNoNewPrivs:
		if a[1]|a[2]|a[3]|a[4] != 0 {
			return 0, unix.EINVAL
		}
		if p.noNewPrivs.Load() {
			return 1, nil
		}
		return 0, nil
	case prGetTimerslack:
		return defaultTimerslack, nil
	}
	p.k.countUnimplemented(unix.SYS_PRCTL)
	return 0, fmt.Errorf("prctl option %d: %w", a[0], unix.EINVAL)
}
