package kernel

import (
	"encoding/binary"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Job control: a stop signal whose action is the default stops every task of the process, and
// SIGCONT lets them go on. A task stops at its next way back to tenant code (a task running tenant
// code is made to trap; one waiting in the kernel stops once its wait ends, as on Linux), and it
// waits stopped without a vCPU while its stub thread stays parked in the trap. The parent learns
// of stops and continues through SIGCHLD and wait4/waitid.

// si_code values of SIGCHLD.
const (
	cldExited    = 1
	cldKilled    = 2
	cldStopped   = 5
	cldContinued = 6

	saNocldstop = 1
)

// stopSignals are the signals whose default action is to stop.
const stopSignals = 1<<(unix.SIGSTOP-1) | 1<<(unix.SIGTSTP-1) | 1<<(unix.SIGTTIN-1) | 1<<(unix.SIGTTOU-1)

func isStopSignal(sig unix.Signal) bool { return sig > 0 && sig < 65 && stopSignals&sigbit(sig) != 0 }

// jobState is a process's job-control state. Its lock nests inside the kernel's (wait holds k.mu
// while it looks at children) and never around another lock.
type jobState struct {
	mu       sync.Mutex
	stopped  bool
	quick    atomic.Bool   // stopped, for the look every trap takes without the lock
	resume   chan struct{} // closed when the stopped process continues
	gen      uint64        // counts stops: a late report of an earlier stop is dropped
	reported bool          // the parent was told of the current stop
	waitStop unix.Signal   // a stop the parent has not collected (WUNTRACED / WSTOPPED)
	waitCont bool          // a continue the parent has not collected (WCONTINUED)
}

// isStopped reports whether the process is stopped.
func (p *Process) isStopped() bool {
	p.job.mu.Lock()
	defer p.job.mu.Unlock()
	return p.job.stopped
}

// dying reports whether the process's end has been decided (exit_group, a fatal signal).
func (p *Process) dying() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.statusSet
}

// stopJob stops the process with sig: every task stops before it runs tenant code again, and the
// parent is told once every task waits (stopped, or in a kernel wait that it finishes before it
// stops).
func (p *Process) stopJob(sig unix.Signal) {
	p.job.mu.Lock()
	if p.job.stopped {
		p.job.mu.Unlock()
		return
	}
	p.job.stopped = true
	p.job.quick.Store(true)
	p.job.resume = make(chan struct{})
	p.job.gen++
	gen := p.job.gen
	p.job.reported = false
	p.job.mu.Unlock()
	if !p.unsettled() {
		p.reportStop(gen, sig)
		return
	}
	go func() {
		// Kicked tasks trap within microseconds, and a task serving a call soon stops or waits;
		// the bound keeps a wedged stub from hiding the stop from the parent forever.
		deadline := time.Now().Add(2 * time.Second)
		for pause := 20 * time.Microsecond; p.unsettled() && time.Now().Before(deadline); pause = min(2*pause, 5*time.Millisecond) {
			time.Sleep(pause)
			if p.exited() {
				return
			}
		}
		p.reportStop(gen, sig)
	}()
}

// unsettled reports whether a task of the process still runs tenant or kernel code; the ones in
// tenant code are made to trap. A task kicked just as it resumes traps at once: the stub's host
// signal waits, pending, until the trap handler returns into tenant code.
func (p *Process) unsettled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	busy := false
	for _, t := range p.tasks {
		if t.inTenant.Load() != 0 {
			t.preempt()
			busy = true
		} else if !t.waiting.Load() {
			busy = true
		}
	}
	return busy
}

// reportStop tells the parent of stop number gen, unless the process went on meanwhile.
func (p *Process) reportStop(gen uint64, sig unix.Signal) {
	p.job.mu.Lock()
	if !p.job.stopped || p.job.gen != gen {
		p.job.mu.Unlock()
		return
	}
	p.job.reported = true
	p.job.waitStop, p.job.waitCont = sig, false
	p.job.mu.Unlock()
	p.notifyParent(cldStopped, int32(sig), true)
}

// continueJob is what sending SIGCONT does, whatever its action: pending stop signals go, and a
// stopped process goes on (its parent is told if it was told of the stop).
func (p *Process) continueJob() {
	p.mu.Lock()
	p.pending &^= stopSignals
	for _, t := range p.tasks {
		t.pending &^= stopSignals
	}
	p.mu.Unlock()
	p.job.mu.Lock()
	if !p.job.stopped {
		p.job.mu.Unlock()
		return
	}
	p.job.stopped = false
	p.job.quick.Store(false)
	close(p.job.resume)
	reported := p.job.reported
	p.job.reported = false
	if reported {
		p.job.waitStop, p.job.waitCont = 0, true
	}
	p.job.mu.Unlock()
	if reported {
		p.notifyParent(cldContinued, int32(unix.SIGCONT), true)
	}
}

// discardContinue is what sending a stop signal does first, whatever its action: a pending
// SIGCONT goes.
func (p *Process) discardContinue() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending &^= sigbit(unix.SIGCONT)
	for _, t := range p.tasks {
		t.pending &^= sigbit(unix.SIGCONT)
	}
}

// jobPark holds the task while its process is stopped, without a vCPU. It returns when the
// process continues or is ending, or the task must end.
func (t *Task) jobPark() {
	p := t.p
	if !p.job.quick.Load() {
		return
	}
	for {
		p.job.mu.Lock()
		stopped, resume := p.job.stopped, p.job.resume
		p.job.mu.Unlock()
		if !stopped || t.killed.Load() || p.dying() {
			return
		}
		t.blocking(func() {
			select {
			case <-resume:
			case <-t.interrupt: // a signal or a kill: look again
			case <-p.stub.Exited():
			}
		})
	}
}

// notifyParent wakes the parent's wait and sends it SIGCHLD with code and status; a stop or
// continue (cld) sends none to a parent whose SIGCHLD action has SA_NOCLDSTOP.
func (p *Process) notifyParent(code, status int32, cld bool) {
	k := p.k
	k.mu.Lock()
	parent := p.parent
	k.mu.Unlock()
	if parent == nil {
		return
	}
	// The signal goes first, so that a parent whose wait returns has it pending, as on Linux.
	parent.mu.Lock()
	flags := parent.sigacts[unix.SIGCHLD].flags
	parent.mu.Unlock()
	if (!cld || flags&saNocldstop == 0) && !parent.exited() {
		parent.postInfo(unix.SIGCHLD, nil, sigInfo{code: code, pid: p.pid, status: status})
	}
	parent.childChanged()
}

// childExited sends the parent SIGCHLD for p's exit, with its cause.
func (p *Process) childExited(parent *Process) {
	info := sigInfo{code: cldExited, pid: p.pid, status: int32(p.status.Code & 0xff)}
	if p.status.Signal != 0 {
		info.code, info.status = cldKilled, int32(p.status.Signal)
	}
	if !parent.exited() {
		parent.postInfo(unix.SIGCHLD, nil, info)
	}
	parent.childChanged()
}

// childChanged wakes the tasks of p that wait for a child's event. A waiter wakes on its own
// wake word: one host call that reaches its carrier, where a Go channel would hand a P to the
// carrier's locked thread first (tens of µs here, on every fork+exit+wait).
func (p *Process) childChanged() {
	p.waitersMu.Lock()
	defer p.waitersMu.Unlock()
	for _, t := range p.childWaiters {
		t.park.Wake()
	}
}

// waitForChildren makes t a waiter for p's children's events until the returned function is
// called.
func (p *Process) waitForChildren(t *Task) (done func()) {
	p.waitersMu.Lock()
	p.childWaiters = append(p.childWaiters, t)
	p.waitersMu.Unlock()
	return func() {
		p.waitersMu.Lock()
		p.childWaiters = slices.DeleteFunc(p.childWaiters, func(x *Task) bool { return x == t })
		p.waitersMu.Unlock()
	}
}

// orphanedPgrp reports whether p's process group is orphaned: no member has a parent in another
// group of the same session (session.go). Linux drops SIGTSTP, SIGTTIN and SIGTTOU whose action
// would stop a member of such a group, since nobody would be there to continue it.
func (p *Process) orphanedPgrp() bool {
	k := p.k
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.orphanedLocked(p.c, p.pgid)
}

// stopAction applies a stop signal's default action: SIGSTOP always stops, the others not in an
// orphaned process group.
func (p *Process) stopAction(sig unix.Signal) {
	if sig != unix.SIGSTOP && p.orphanedPgrp() {
		return
	}
	p.stopJob(sig)
}

// What wait4 and waitid look for.
const (
	wExited = 4
	wNowait = 0x1000000

	pAll  = 0
	pPid  = 1
	pPgid = 2
)

// waitEvent is one child state change that a wait collects.
type waitEvent struct {
	ru     usage // of an exited child and its waited-for children
	pid    int
	code   int32  // si_code: CLD_EXITED, CLD_KILLED, CLD_STOPPED, CLD_CONTINUED
	status int32  // si_status: exit code or signal
	word   uint32 // the status word of wait4
}

// exitEvent is what waiting reports of a zombie.
func (p *Process) exitEvent() waitEvent {
	if p.status.Signal != 0 {
		return waitEvent{pid: p.pid, code: cldKilled, status: int32(p.status.Signal), word: uint32(p.status.Signal) & 0x7f}
	}
	code := int32(p.status.Code & 0xff)
	return waitEvent{pid: p.pid, code: cldExited, status: code, word: uint32(code) << 8}
}

// wait4(pid, wstatus, options, rusage).
func sysWait4(t *Task, a sysargs) (uint64, error) {
	pid, statusAddr, options, rusageAddr := int64(int32(a[0])), a[1], a[2], a[3]
	if options&^(unix.WNOHANG|unix.WUNTRACED|unix.WCONTINUED|unix.WALL|unix.WCLONE|unix.WNOTHREAD) != 0 {
		return 0, unix.EINVAL
	}
	t.p.k.mu.Lock()
	pgrp := t.p.pgid
	t.p.k.mu.Unlock()
	match := func(ch *Process) bool {
		switch {
		case pid == -1:
			return true
		case pid > 0:
			return int64(ch.pid) == pid
		case pid == 0:
			return ch.pgid == pgrp
		}
		return int64(ch.pgid) == -pid
	}
	ev, err := t.waitChild(match, options|wExited)
	if err != nil || ev.pid == 0 {
		return 0, err
	}
	if statusAddr != 0 {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], ev.word)
		if err := t.p.k.svc.CopyOut(t.p.as, statusAddr, b[:]); err != nil {
			return 0, err
		}
	}
	if rusageAddr != 0 {
		var ru [144]byte
		ev.ru.put(&ru)
		if err := t.p.k.svc.CopyOut(t.p.as, rusageAddr, ru[:]); err != nil {
			return 0, err
		}
	}
	return uint64(ev.pid), nil
}

// waitid(idtype, id, infop, options, rusage).
func sysWaitid(t *Task, a sysargs) (uint64, error) {
	infop, rusageAddr := a[2], a[4]
	ev, err := t.waitid(a[0], int64(int32(a[1])), a[3])
	if rusageAddr != 0 && ev.pid != 0 {
		var ru [144]byte
		ev.ru.put(&ru)
		if err := t.p.k.svc.CopyOut(t.p.as, rusageAddr, ru[:]); err != nil {
			return 0, err
		}
	}
	if infop == 0 {
		return 0, err
	}
	// Linux writes these fields, and no others, whatever the outcome: zeros when nothing was
	// collected (WNOHANG) or the call failed.
	var head [12]byte // si_signo, si_errno, si_code
	var body [12]byte // si_pid, si_uid, si_status
	if ev.pid != 0 {
		binary.LittleEndian.PutUint32(head[0:], uint32(unix.SIGCHLD))
		binary.LittleEndian.PutUint32(head[8:], uint32(ev.code))
		binary.LittleEndian.PutUint32(body[0:], uint32(ev.pid))
		binary.LittleEndian.PutUint32(body[8:], uint32(ev.status))
	}
	if cerr := t.p.k.svc.CopyOut(t.p.as, infop, head[:]); cerr != nil {
		return 0, cerr
	}
	if cerr := t.p.k.svc.CopyOut(t.p.as, infop+16, body[:]); cerr != nil {
		return 0, cerr
	}
	return 0, err
}

// waitid checks waitid's arguments and waits.
func (t *Task) waitid(idtype uint64, id int64, options uint64) (waitEvent, error) {
	if options&^(unix.WNOHANG|wNowait|wExited|unix.WSTOPPED|unix.WCONTINUED|unix.WALL|unix.WCLONE|unix.WNOTHREAD) != 0 ||
		options&(wExited|unix.WSTOPPED|unix.WCONTINUED) == 0 {
		return waitEvent{}, unix.EINVAL
	}
	var match func(*Process) bool
	switch idtype {
	case pAll:
		match = func(*Process) bool { return true }
	case pPid:
		if id <= 0 {
			return waitEvent{}, unix.EINVAL
		}
		match = func(ch *Process) bool { return int64(ch.pid) == id }
	case pPgid:
		if id < 0 {
			return waitEvent{}, unix.EINVAL
		}
		if id == 0 {
			t.p.k.mu.Lock()
			id = int64(t.p.pgid)
			t.p.k.mu.Unlock()
		}
		match = func(ch *Process) bool { return int64(ch.pgid) == id }
	default:
		return waitEvent{}, unix.EINVAL // P_PIDFD: no pidfds yet
	}
	return t.waitChild(match, options)
}

// waitChild waits for a child that match accepts to exit (wExited), stop (WSTOPPED) or continue
// (WCONTINUED), and collects the event unless WNOWAIT. With WNOHANG and nothing to collect it
// returns a zero event. Children are looked at in pid order, oldest first, as Linux does.
func (t *Task) waitChild(match func(*Process) bool, options uint64) (waitEvent, error) {
	p, k := t.p, t.p.k
	cut := false
	// A waiter from before the first look: an event after it wakes the wait below.
	defer p.waitForChildren(t)()
	for {
		ticket := t.park.Ticket()
		k.mu.Lock()
		pids := make([]int, 0, len(p.children))
		for pid, ch := range p.children {
			if match(ch) {
				pids = append(pids, pid)
			}
		}
		sort.Ints(pids)
		var ev waitEvent
		for _, pid := range pids {
			if ev = p.children[pid].collect(p, options); ev.pid != 0 {
				break
			}
		}
		k.mu.Unlock()
		if ev.pid != 0 {
			return ev, nil
		}
		if len(pids) == 0 {
			return waitEvent{}, unix.ECHILD
		}
		if options&unix.WNOHANG != 0 {
			return waitEvent{}, nil
		}
		// A signal cuts the wait short only when, looking once more, nothing is there to
		// collect: a child's SIGCHLD comes just before its event.
		if cut {
			t.interrupted = true
			return waitEvent{}, unix.EINTR
		}
		t.blocking(func() {
			// Signals and the stub's end wake the wake word too (wakeWaits, watchStub).
			if cut = t.waitCut(); !cut {
				t.park.Wait(ticket, time.Time{})
				cut = t.waitCut()
			}
		})
	}
}

// collect takes the event a wait with options may see of child ch of parent, if any. The
// caller holds k.mu.
func (ch *Process) collect(parent *Process, options uint64) waitEvent {
	keep := options&wNowait != 0
	if ch.zombie {
		if options&wExited == 0 {
			return waitEvent{}
		}
		ev := ch.exitEvent()
		ch.reapedMu.Lock()
		ev.ru = ch.reaped
		ch.reapedMu.Unlock()
		ev.ru.add(ch.usage())
		if !keep {
			delete(parent.children, ch.pid)
			ch.zombie = false
			parent.reapedMu.Lock()
			parent.reaped.add(ev.ru)
			parent.reapedMu.Unlock()
		}
		return ev
	}
	ch.job.mu.Lock()
	defer ch.job.mu.Unlock()
	if options&unix.WSTOPPED != 0 && ch.job.waitStop != 0 {
		sig := ch.job.waitStop
		if !keep {
			ch.job.waitStop = 0
		}
		return waitEvent{pid: ch.pid, code: cldStopped, status: int32(sig), word: 0x7f | uint32(sig)<<8}
	}
	if options&unix.WCONTINUED != 0 && ch.job.waitCont {
		if !keep {
			ch.job.waitCont = false
		}
		return waitEvent{pid: ch.pid, code: cldContinued, status: int32(unix.SIGCONT), word: 0xffff}
	}
	return waitEvent{}
}
