package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Signals: process-directed ones wait in Process.pending, and every task checks for deliverable
// signals before it resumes tenant code. A handler runs on a frame the kernel builds on the
// tenant's stack, laid out as Linux lays out rt_sigframe (with the FPU state below it, which
// uc_mcontext.fpstate points at), and returns through rt_sigreturn.

const (
	sigDfl = 0
	sigIgn = 1

	saSiginfo   = 0x4
	saOnstack   = 0x08000000
	saRestart   = 0x10000000
	saNodefer   = 0x40000000
	saResethand = 0x80000000
	saRestorer  = 0x04000000

	ssOnstack = 1
	ssDisable = 2

	ucontextSize = 304 // uc_flags, uc_link, uc_stack, uc_mcontext (256), uc_sigmask
	siginfoSize  = 128
	redZone      = 128
)

type altstack struct {
	sp, size uint64
	flags    uint32
}

// si_code values of signals a process sends: kill(2), and tgkill(2) or tkill(2).
const (
	siUser  = 0
	siTkill = -6
)

type sigInfo struct {
	code   int32
	addr   uint64 // fault address
	pid    int    // sender (or the child, for SIGCHLD)
	status int32  // SIGCHLD: the child's exit code or signal
}

func sigbit(sig unix.Signal) uint64 { return 1 << (uint(sig) - 1) }

// fillSiginfo lays out a siginfo_t (siginfoSize zeroed bytes) for sig.
func fillSiginfo(inf []byte, sig unix.Signal, info sigInfo) {
	le := binary.LittleEndian
	le.PutUint32(inf[0:], uint32(sig))
	le.PutUint32(inf[8:], uint32(info.code))
	if info.addr != 0 {
		le.PutUint64(inf[16:], info.addr)
	} else {
		le.PutUint32(inf[16:], uint32(info.pid))
	}
	if sig == unix.SIGCHLD {
		le.PutUint32(inf[24:], uint32(info.status))
	}
}

const unblockable = 1<<(unix.SIGKILL-1) | 1<<(unix.SIGSTOP-1)

func defaultIgnored(sig unix.Signal) bool {
	switch sig {
	case unix.SIGCHLD, unix.SIGURG, unix.SIGWINCH, unix.SIGCONT:
		return true // SIGCONT's work (continuing) is done when it is sent, not here
	}
	return false
}

// Signal sends a signal to the process (from the shim, a terminal, or another tenant process).
func (p *Process) Signal(sig unix.Signal) error {
	if sig <= 0 || int(sig) >= len(p.sigacts) {
		return fmt.Errorf("signal %d: %w", int(sig), unix.EINVAL)
	}
	if p.exited() {
		return fmt.Errorf("process %d: %w", p.pid, unix.ESRCH)
	}
	return p.post(sig, nil)
}

// post sends sig to the process, or with t non-nil to that task alone (tgkill). A signal
// nobody handles and nobody blocks takes its default action at once; otherwise it waits as
// pending and the task that will take it is kicked.
func (p *Process) post(sig unix.Signal, t *Task) error { return p.postInfo(sig, t, sigInfo{}) }

// postInfo is post with the siginfo the handler will see.
func (p *Process) postInfo(sig unix.Signal, t *Task, info sigInfo) error {
	if sig == unix.SIGKILL {
		p.terminate(ExitStatus{Signal: sig})
		return nil
	}
	// Sending SIGCONT continues the process and sending a stop signal drops a pending SIGCONT,
	// whatever the signals' actions and masks.
	if sig == unix.SIGCONT {
		p.continueJob()
	} else if isStopSignal(sig) {
		p.discardContinue()
	}
	p.mu.Lock()
	act := p.sigacts[sig]
	if len(p.tasks) == 0 {
		p.mu.Unlock()
		return nil
	}
	pending := &p.pending
	if t != nil {
		pending = &t.pending
	} else {
		// The first task that does not block the signal takes it.
		t = p.tasks[0]
		for _, x := range p.tasks {
			if x.mask()&sigbit(sig) == 0 || x.sigwait.Load()&sigbit(sig) != 0 {
				t = x
				break
			}
		}
	}
	blocked := t.mask()&sigbit(sig) != 0
	// A signal a task waits for in sigtimedwait is taken there, whatever its action.
	waited := t.sigwait.Load()&sigbit(sig) != 0
	// An ignored signal is dropped, unless it is blocked (its action may change before it is
	// unblocked, as Linux reasons) or waited for: then it waits, pending, for sigtimedwait or a
	// signalfd to take it (a container init's SIGCHLD, for one).
	if (act.handler == sigIgn || act.handler == sigDfl && defaultIgnored(sig)) && !blocked && !waited {
		p.mu.Unlock()
		return nil
	}
	// A fatal signal to a stopped process waits, pending, until the process continues.
	if act.handler == sigDfl && !blocked && !waited && (isStopSignal(sig) || !p.isStopped()) {
		p.mu.Unlock()
		if isStopSignal(sig) {
			p.stopAction(sig)
			return nil
		}
		p.terminate(ExitStatus{Signal: sig})
		return nil
	}
	if *pending&sigbit(sig) == 0 {
		p.info[sig] = info // a standard signal already pending keeps its first siginfo
	}
	*pending |= sigbit(sig)
	p.mu.Unlock()
	if !blocked || waited {
		t.kick()
	}
	p.signalfdsSee(sig)
	return nil
}

// kick makes the task notice a signal: out of tenant code through the preemption signal, out of
// a blocking kernel wait through its interrupt channel.
func (t *Task) kick() {
	t.wakeWaits()
	t.th.Kick()
}

// wakeWaits cuts short a kernel wait of the task: the channel for waits in Go, the wake word for
// waits on it, the eventfd for waits in a host poll.
func (t *Task) wakeWaits() {
	notify(t.interrupt)
	t.park.Wake()
	t.intrMu.Lock()
	defer t.intrMu.Unlock()
	if t.intrFd > 0 {
		var one [8]byte
		one[0] = 1
		unix.Write(t.intrFd, one[:])
	}
}

// waitCut reports (and takes) a signal's poke of the task's interrupt channel, or its stub's
// end: what cuts a kernel wait on the wake word short.
func (t *Task) waitCut() bool {
	select {
	case <-t.interrupt:
		return true
	case <-t.p.stub.Exited():
		return true
	default:
		return false
	}
}

// interruptFd is the task's eventfd for host polls, made on first use; a stale count from an
// earlier wake is drained (signals that came meanwhile are pending, and io checks for them).
func (t *Task) interruptFd() (int, error) {
	t.intrMu.Lock()
	defer t.intrMu.Unlock()
	if t.intrFd <= 0 {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			return -1, err
		}
		t.intrFd = fd
	}
	var b [8]byte
	unix.Read(t.intrFd, b[:])
	return t.intrFd, nil
}

// closeInterrupt frees the eventfd when the task ends.
func (t *Task) closeInterrupt() {
	t.intrMu.Lock()
	defer t.intrMu.Unlock()
	if t.intrFd > 0 {
		unix.Close(t.intrFd)
		t.intrFd = 0
	}
}

// signalPending reports a signal the task would take now.
func (t *Task) signalPending() bool {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	return (t.p.pending|t.pending)&^t.mask() != 0
}

// sigPreemptHost is the host signal that makes a stub thread trap (crossing's SIG_PREEMPT).
const sigPreemptHost = unix.SIGUSR2

// forceSignal delivers a synchronous signal (a fault): to the handler if there is one and the
// signal is not blocked, else it kills the process.
func (t *Task) forceSignal(sig unix.Signal, info sigInfo) {
	p := t.p
	p.mu.Lock()
	act := p.sigacts[sig]
	p.mu.Unlock()
	if act.handler <= sigIgn || t.mask()&sigbit(sig) != 0 {
		t.exitGroup(ExitStatus{Signal: sig})
		return
	}
	if err := t.setupFrame(sig, act, info); err != nil {
		t.exitGroup(ExitStatus{Signal: unix.SIGSEGV})
	}
}

// deliverSignals runs before the task resumes: the first deliverable signal gets its default
// action or a handler frame; a system call cut short by a signal whose handler allows it, or by
// one that needed no handler, is restarted.
func (t *Task) deliverSignals() {
	p := t.p
	t.jobPark()
	handled := false
	for !t.stop {
		p.mu.Lock()
		pend := (p.pending | t.pending) &^ (t.mask() &^ unblockable)
		if pend == 0 {
			p.mu.Unlock()
			break
		}
		sig := unix.Signal(1)
		for pend&1 == 0 {
			pend >>= 1
			sig++
		}
		if t.fast && p.sigacts[sig].handler > sigIgn {
			// A handler's frame needs the FPU state: take the signal at the escalation.
			p.mu.Unlock()
			t.escalate(false)
			return
		}
		if t.pending&sigbit(sig) != 0 {
			t.pending &^= sigbit(sig)
		} else {
			p.pending &^= sigbit(sig)
		}
		act := p.sigacts[sig]
		if act.handler > sigIgn && act.flags&saResethand != 0 {
			p.sigacts[sig] = sigaction{}
		}
		info := p.info[sig]
		p.info[sig] = sigInfo{}
		p.mu.Unlock()
		switch {
		case act.handler == sigIgn:
			continue
		case act.handler == sigDfl:
			if defaultIgnored(sig) {
				continue
			}
			if isStopSignal(sig) {
				p.stopAction(sig)
				t.jobPark()
				continue
			}
			t.exitGroup(ExitStatus{Signal: sig})
			return
		}
		if t.interrupted && act.flags&saRestart != 0 {
			t.restartSyscall()
		}
		if err := t.setupFrame(sig, act, info); err != nil {
			p.k.cfg.Log("pid %d: signal %d: %v", p.pid, sig, err)
			if errors.Is(err, unix.ENOMEM) {
				t.exitGroup(ExitStatus{Signal: unix.SIGKILL, OOMKilled: true})
			} else {
				t.exitGroup(ExitStatus{Signal: unix.SIGSEGV})
			}
			return
		}
		handled = true
		break
	}
	if t.interrupted && !handled {
		t.restartSyscall()
	}
	t.interrupted = false
	// A mask that sigsuspend, ppoll or pselect6 set for their wait lasts until a handler's frame
	// has saved the one to go back to; with no handler run, it goes back now.
	if t.savedMask != nil {
		t.setMask(*t.savedMask)
		t.savedMask = nil
	}
}

// copyOutRetry writes a signal frame; when the grant is short (a copy-on-write page of the stack
// needs a frame), it waits for the memory of exited processes to come back and tries once more.
func (t *Task) copyOutRetry(addr uint64, b []byte) error {
	err := t.p.k.svc.CopyOut(t.p.as, addr, b)
	if errors.Is(err, unix.ENOMEM) {
		t.p.k.dropGhosts()
		t.blocking(t.p.k.releasing.Wait)
		err = t.p.k.svc.CopyOut(t.p.as, addr, b)
	}
	return err
}

// restartSyscall makes the tenant issue its interrupted system call again.
func (t *Task) restartSyscall() {
	r := t.th.Regs
	r.Rip -= 2 // back onto the syscall instruction
	r.Rax = r.Orig_rax
	t.interrupted = false
}

// setupFrame builds an rt_sigframe on the tenant's stack (or its alternate stack) and points
// the registers at the handler.
func (t *Task) setupFrame(sig unix.Signal, act sigaction, info sigInfo) error {
	if act.flags&saRestorer == 0 {
		return fmt.Errorf("handler for signal %d has no restorer: %w", sig, unix.EFAULT)
	}
	r := t.th.Regs
	sp := r.Rsp
	onAlt := t.altstack.flags&ssDisable == 0 && t.altstack.size != 0 &&
		sp > t.altstack.sp && sp <= t.altstack.sp+t.altstack.size
	if act.flags&saOnstack != 0 && t.altstack.flags&ssDisable == 0 && t.altstack.size != 0 && !onAlt {
		sp = t.altstack.sp + t.altstack.size
	} else {
		sp -= redZone
	}
	fp := t.th.FPState()
	var fpAddr uint64
	if fp != nil {
		fpAddr = (sp - uint64(len(fp))) &^ 63 // XSAVE wants 64-byte alignment
		if err := t.copyOutRetry(fpAddr, fp); err != nil {
			return err
		}
		sp = fpAddr
	}
	size := uint64(8 + ucontextSize + siginfoSize)
	sp = ((sp - size) &^ 15) - 8 // as if the handler had been called: rsp+8 is 16-aligned
	uc := sp + 8
	si := uc + ucontextSize

	f := make([]byte, size)
	le := binary.LittleEndian
	le.PutUint64(f[0:], act.restorer)
	u := f[8:]
	// uc_flags, uc_link: 0. uc_stack:
	le.PutUint64(u[16:], t.altstack.sp)
	le.PutUint32(u[24:], t.altstack.flags)
	le.PutUint64(u[32:], t.altstack.size)
	mc := u[40:]
	for i, v := range []uint64{r.R8, r.R9, r.R10, r.R11, r.R12, r.R13, r.R14, r.R15, r.Rdi, r.Rsi,
		r.Rbp, r.Rbx, r.Rdx, r.Rax, r.Rcx, r.Rsp, r.Rip, r.Eflags} {
		le.PutUint64(mc[8*i:], v)
	}
	le.PutUint16(mc[144:], 0x33)        // cs
	le.PutUint16(mc[150:], 0x2b)        // ss
	le.PutUint64(mc[176:], uint64(sig)) // oldmask slot: not used by glibc
	le.PutUint64(mc[184:], fpAddr)      // fpstate
	mask := t.mask()
	if t.savedMask != nil {
		mask = *t.savedMask
		t.savedMask = nil
	}
	le.PutUint64(u[296:], mask)
	fillSiginfo(f[8+ucontextSize:], sig, info)
	if err := t.copyOutRetry(sp, f); err != nil {
		return err
	}
	r.Rsp = sp
	r.Rip = act.handler
	r.Rdi = uint64(sig)
	r.Rsi = si
	r.Rdx = uc
	r.Rax = 0
	r.Eflags &^= 0x400 | 0x100 // DF, TF
	t.setMask(t.mask() | act.mask)
	if act.flags&saNodefer == 0 {
		t.setMask(t.mask() | sigbit(sig))
	}
	t.setMask(t.mask() &^ unblockable)
	return nil
}

// rt_sigreturn restores what setupFrame saved; the frame's ucontext is at rsp (the handler's
// return popped the restorer's address).
func sysRtSigreturn(t *Task, a sysargs) (uint64, error) {
	r := t.th.Regs
	u := make([]byte, ucontextSize)
	if err := t.p.k.svc.CopyIn(t.p.as, u, r.Rsp); err != nil {
		t.exitGroup(ExitStatus{Signal: unix.SIGSEGV})
		return 0, nil
	}
	le := binary.LittleEndian
	mc := u[40:]
	g := func(i int) uint64 { return le.Uint64(mc[8*i:]) }
	r.R8, r.R9, r.R10, r.R11, r.R12, r.R13, r.R14, r.R15 = g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7)
	r.Rdi, r.Rsi, r.Rbp, r.Rbx, r.Rdx, r.Rax, r.Rcx, r.Rsp, r.Rip = g(8), g(9), g(10), g(11), g(12), g(13), g(14), g(15), g(16)
	const userFlags = 0x50dd5 // the flags a tenant may set: CF PF AF ZF SF TF DF OF AC
	r.Eflags = r.Eflags&^userFlags | g(17)&userFlags
	t.setMask(le.Uint64(u[296:]) &^ unblockable)
	if fpAddr := le.Uint64(mc[184:]); fpAddr != 0 {
		if cur := t.th.FPState(); cur != nil {
			saved := make([]byte, len(cur))
			if err := t.p.k.svc.CopyIn(t.p.as, saved, fpAddr); err != nil {
				t.exitGroup(ExitStatus{Signal: unix.SIGSEGV})
				return 0, nil
			}
			t.th.SetFPState(saved)
		}
	}
	// A signal that came while the handler ran may be deliverable now.
	return r.Rax, nil
}

func sysSigaltstack(t *Task, a sysargs) (uint64, error) {
	le := binary.LittleEndian
	if a[1] != 0 {
		b := make([]byte, 24)
		le.PutUint64(b[0:], t.altstack.sp)
		flags := t.altstack.flags
		if t.altstack.size == 0 {
			flags = ssDisable
		} else if sp := t.th.Regs.Rsp; sp > t.altstack.sp && sp <= t.altstack.sp+t.altstack.size {
			flags |= ssOnstack
		}
		le.PutUint32(b[8:], flags)
		le.PutUint64(b[16:], t.altstack.size)
		if err := t.p.k.svc.CopyOut(t.p.as, a[1], b); err != nil {
			return 0, err
		}
	}
	if a[0] != 0 {
		b := make([]byte, 24)
		if err := t.p.k.svc.CopyIn(t.p.as, b, a[0]); err != nil {
			return 0, err
		}
		flags := le.Uint32(b[8:])
		if flags&^(ssDisable|1<<31) != 0 {
			return 0, unix.EINVAL
		}
		if flags&ssDisable != 0 {
			t.altstack = altstack{flags: ssDisable}
			return 0, nil
		}
		size := le.Uint64(b[16:])
		if size < 2048 {
			return 0, unix.ENOMEM
		}
		t.altstack = altstack{sp: le.Uint64(b[0:]), size: size}
	}
	return 0, nil
}

func sysRtSigpending(t *Task, a sysargs) (uint64, error) {
	t.p.mu.Lock()
	pend := (t.p.pending | t.pending) & t.mask()
	t.p.mu.Unlock()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], pend)
	return 0, t.p.k.svc.CopyOut(t.p.as, a[0], b[:a[1]&15])
}

// waitSignal blocks until a signal the task does not block is pending.
func (t *Task) waitSignal() {
	for {
		t.p.mu.Lock()
		ready := (t.p.pending|t.pending)&^t.mask() != 0
		t.p.mu.Unlock()
		if ready {
			return
		}
		dying := false
		t.blocking(func() {
			select {
			case <-t.interrupt:
			case <-t.p.stub.Exited():
				dying = true
			}
		})
		if dying {
			return
		}
	}
}

func sysPause(t *Task, a sysargs) (uint64, error) {
	t.waitSignal()
	return 0, unix.EINTR
}

func sysRtSigsuspend(t *Task, a sysargs) (uint64, error) {
	if a[1] != 8 {
		return 0, unix.EINVAL
	}
	var b [8]byte
	if err := t.p.k.svc.CopyIn(t.p.as, b[:], a[0]); err != nil {
		return 0, err
	}
	old := t.mask()
	t.setMask(binary.LittleEndian.Uint64(b[:]) &^ unblockable)
	t.waitSignal()
	// The handler's frame carries the old mask; sigreturn puts it back.
	t.savedMask = &old
	t.p.mu.Lock()
	none := (t.p.pending|t.pending)&^t.mask() == 0
	t.p.mu.Unlock()
	if none {
		t.setMask(old)
		t.savedMask = nil
	}
	return 0, unix.EINTR
}

// signalThread sends a signal of the kernel's own to this thread (SIGPIPE).
func (t *Task) signalThread(sig unix.Signal) error { return t.p.post(sig, t) }

// rt_sigtimedwait(set, info, timeout, sigsetsize): takes a pending signal of set (which the
// caller normally blocks) without running its handler, waiting for one up to timeout (NULL:
// for ever). EAGAIN when the time is up; EINTR when another signal, not blocked, comes first.
// Container inits (tini, dumb-init) wait for their signals this way.
func sysRtSigtimedwait(t *Task, a sysargs) (uint64, error) {
	p := t.p
	if a[3] != 8 {
		return 0, unix.EINVAL
	}
	var b [16]byte
	if err := p.k.svc.CopyIn(p.as, b[:8], a[0]); err != nil {
		return 0, err
	}
	set := binary.LittleEndian.Uint64(b[:8]) &^ unblockable
	var deadline time.Time
	if a[2] != 0 {
		if err := p.k.svc.CopyIn(p.as, b[:], a[2]); err != nil {
			return 0, err
		}
		sec, nsec := int64(binary.LittleEndian.Uint64(b[:8])), int64(binary.LittleEndian.Uint64(b[8:]))
		if sec < 0 || nsec < 0 || nsec >= 1e9 {
			return 0, unix.EINVAL
		}
		deadline = time.Now().Add(time.Duration(sec)*time.Second + time.Duration(nsec))
	}
	t.sigwait.Store(set)
	defer t.sigwait.Store(0)
	for {
		if sig, info, ok := p.takeSignal(t, set); ok {
			p.signalfdsSee(sig) // taken: a signalfd that showed it may have nothing left
			if a[1] != 0 {
				var inf [siginfoSize]byte
				fillSiginfo(inf[:], sig, info)
				if err := p.k.svc.CopyOut(p.as, a[1], inf[:]); err != nil {
					return 0, err
				}
			}
			return uint64(sig), nil
		}
		p.mu.Lock()
		other := (t.pending|p.pending)&^t.mask()&^set != 0
		p.mu.Unlock()
		if other || t.killed.Load() {
			return 0, unix.EINTR
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return 0, unix.EAGAIN
		}
		// A poke or the deadline: the loop looks again; the stub's end: the wait is over.
		t.blocking(func() { t.parkUntil(deadline) })
		select {
		case <-p.stub.Exited():
			return 0, unix.EINTR
		default:
		}
	}
}
