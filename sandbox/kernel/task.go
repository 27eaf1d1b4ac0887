package kernel

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/endovisor/endo/crossing"
	"github.com/endovisor/endo/sandbox/kernelet"
	"github.com/endovisor/endo/sandbox/kernelet/park"
	"golang.org/x/sys/unix"
)

// Task is one tenant thread as the kernel sees it: its stub thread, its registers' extra state,
// and its place in the kernelet.
type Task struct {
	p   *Process
	tid int
	th  *crossing.Thread

	kt    *kernelet.Task // its place in the kernelet: the vCPU it holds, policy, nice, affinity
	spare bool           // it borrowed an idle vCPU to spin on, returned when someone needs it
	// stubDone: the carrier is done with the task's stub thread (its last vCPU release follows).
	stubDone atomic.Bool

	resumeFlags crossing.ResumeFlags
	fast        bool        // the last trap came from a patched call site (no FPU state at hand)
	esc         *escalation // the task is on its way through crossing.EscalateAddr (calls.go)
	viaSite     int64       // calls served from patched sites
	served      int64       // system calls served
	fsBase      uint64
	comm        string // the thread's name (prctl PR_SET_NAME, /proc/<pid>/task/<tid>/comm), under p.mu
	clearTID    uint64
	sigmask     atomic.Uint64 // written only by the task itself
	sigwait     atomic.Uint64 // the signals it waits for in rt_sigtimedwait, 0 otherwise
	savedMask   *uint64       // the mask to restore after a handler that interrupted sigsuspend
	altstack    altstack
	interrupt   chan struct{} // poked when a signal arrives while the task blocks in the kernel
	intrMu      sync.Mutex
	intrFd      int          // eventfd for the same, when the task waits in a host poll (0: none yet)
	interrupted bool         // the last system call was cut short by a signal (EINTR)
	pending     uint64       // thread-directed signals (tgkill), guarded by p.mu
	stop        bool         // the task has stopped running tenant code
	alone       bool         // it ended by exit(2) while other tasks of its process go on
	killed      atomic.Bool  // asked to end (exit_group or execve by another task)
	inTenant    atomic.Int64 // when the task last resumed tenant code (unix ns), 0 while in the kernel
	carrier     atomic.Int32 // the host thread id of the task's goroutine (for the probe)
	waiting     atomic.Bool  // in blocking(): it runs nothing until woken (job control)

	spin spinState
	home home // the host CPU its hand-offs sleep on (home.go)
	// quiet: the task has just made another runnable (a fork, a new thread), whose carrier and
	// stub thread need the host's CPUs to start: its next round trip spins on neither side.
	quiet bool
	park  park.Parker // the carrier sleeps here in kernel waits that others end directly
	// sleepTimer: the deadline of the kernel wait it sleeps in, kept by the timer thread.
	sleepTimer sleepTimer
	host       hostCreds // the file system ids the carrier's thread holds (creds.go)
	// parked: the task gave way at a preemption with its registers parked in the stub: the
	// carrier only waits for its next trap, which some runner takes it to without the carrier.
	parked bool
	// fresh: a new thread of a running process that has not run yet (thread.go).
	fresh bool
	// The start (Task.start), whose caller sleeps on startWait: the new carrier is set up
	// (carrierUp), the caller hands it the task (handedOver), the task holds a vCPU, is parked
	// or is about to wait for one (settledOK).
	startWait                        park.Parker
	carrierUp, handedOver, settledOK atomic.Bool
}

// Spin windows, in microseconds. The carrier must spin longer than the tenant's gap between
// calls, the stub longer than the kernel's service time; both only on a spare vCPU.
const (
	spinMinMicros  = 50
	spinMaxMicros  = 200
	stubSpinMicros = 50
	spinBackoff    = 64 // round trips without spinning after the window kept missing
	// A task that waits in the kernel hands off to others, whose wake-ups need the CPUs: it
	// spins only after this many round trips without a wait.
	spinCalm = 64
)

type spinState struct {
	window uint64 // cycles the carrier spins; 0 = sleep at once
	misses int
	pause  int
	calm   int // round trips since the task last waited in the kernel (blocking), up to spinCalm
}

// calmed reports whether the task has made spinCalm round trips without a wait in the kernel.
func (s *spinState) calmed() bool { return s.calm >= spinCalm }

// spins decides this round trip's spin windows and borrows or returns the spare vCPU.
func (t *Task) spins() (stub, sandbox uint64) {
	paused := t.spin.pause > 0
	if paused {
		t.spin.pause--
	}
	if !t.spin.calmed() {
		t.spin.calm++
	}
	still := paused || t.quiet || !t.spin.calmed()
	t.quiet = false
	if t.spare || !still {
		t.spare = t.kt.SpinSpare(!still)
	}
	if still || !t.spare {
		return 0, 0
	}
	us := crossing.CyclesPerMicrosecond()
	if t.spin.window == 0 {
		t.spin.window = spinMaxMicros * us
	}
	return stubSpinMicros * us, t.spin.window
}

// adapt moves the window after a round trip that took elapsed cycles.
func (t *Task) adapt(elapsed uint64) {
	if t.spin.window == 0 {
		return
	}
	us := crossing.CyclesPerMicrosecond()
	if elapsed <= t.spin.window {
		t.spin.misses = 0
		t.spin.window = min(max(4*elapsed, spinMinMicros*us), spinMaxMicros*us)
		return
	}
	// The trap came after the carrier had gone to sleep: the spin bought nothing.
	if t.spin.misses++; t.spin.misses >= 3 {
		t.spin = spinState{pause: spinBackoff, calm: t.spin.calm}
		if t.spare {
			t.kt.ReturnSpare()
			t.spare = false
		}
	}
}

// start runs the task's carrier and waits until the task holds a vCPU, is parked, or waits for
// one. The new carrier's setup (its host thread, its stolen-time mark, its weight) runs before
// it has a vCPU: while its creator sleeps, Linux still sees only one of the two runnable. Without
// this wait a burst of clones made several carriers runnable at once, up to 9 on 2 vCPUs in one
// probe sample.
//
// The caller sleeps on the task's start word, which the new carrier wakes with one host call.
// For a new thread the caller, a carrier, also hands the task over on the new carrier's park
// word, so that the Go runtime's part (a thread for the new goroutine, which it wakes and which
// may preempt the creator) is over before the new carrier counts as the task's: the new carrier
// first sleeps, set up, until its creator hands it the task and sleeps in turn. When the
// runtime's thread, woken as the goroutine started, preempted the creator and went on to run the
// task, the two carriers were runnable at once beside the other vCPU's runner (traced: for 300
// us, which the probe saw as three). Through a channel the new carrier's "settled" went by the Go
// runtime too, which woke another of its threads to hand the creator a P; that one preempted the
// new carrier before it could sleep.
func (t *Task) start() {
	// A forked child's carrier (and a spawned process's) goes straight on: the handshake cost a
	// fork 50-70 us (endo bench, fork + exit + wait: 249-301 us without, 307-377 with), and a
	// fork is far rarer than a new thread in the loads the probe watches.
	handshake := t.fresh
	go t.run(handshake)
	if handshake {
		t.startWait.Until(t.carrierUp.Load)
		t.handedOver.Store(true)
		t.park.Wake()
	}
	t.startWait.Until(t.settledOK.Load)
}

// settled lets start return (the task's carrier runs it).
func (t *Task) settled() {
	if t.settledOK.CompareAndSwap(false, true) {
		t.startWait.Wake()
	}
}

// run is the task's life: resume tenant code, serve its trap, repeat. The goroutine keeps its
// OS thread so that the raw futex waits of the crossing keep their P. handshake: its start waits
// for the new carrier to be set up before it hands the task over (start).
func (t *Task) run(handshake bool) {
	defer t.settled() // should the task end before it ever ran
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer t.dropCreds() // before the thread goes back to the runtime
	t.home.cpu = crossing.Anywhere
	defer t.float() // likewise
	if t.p.k.lowWeight {
		// Carriers weigh what the stubs they take turns with weigh (weight.go).
		unix.Setpriority(unix.PRIO_PROCESS, 0, niceCarrier)
		defer unix.Setpriority(unix.PRIO_PROCESS, 0, niceSandbox)
	}
	if handshake {
		t.carrierUp.Store(true)
		t.startWait.Wake()
		t.park.Until(t.handedOver.Load)
	}
	t.recordCarrier()
	defer t.carrierDone()
	t.p.mu.Lock() // others find the task's kt under p.mu (sys_sched.go)
	if t.kt == nil {
		t.kt = t.p.k.sched.NewTask(t)
	}
	t.p.mu.Unlock()
	t.kt.OnGiveWay = t.stopSpinning
	t.kt.OnGrant = t.granted
	t.th.SpinWhile = &t.kt.SpareHeld
	t.kt.BeforeWait = t.settled
	if t.fresh {
		// A new thread that must wait for a vCPU waits parked, as a preempted one does: a ring
		// can take it up without its carrier.
		t.fresh = false
		if t.kt.AcquireOrPark(t.parkFresh) == nil {
			t.parked = true
		}
	} else {
		t.kt.Acquire()
	}
	t.kt.BeforeWait = nil
	t.settled()
	started := threadCPU() // the carrier's own CPU time: the task's system time
	t.fast = t.th.Trap().Kind == crossing.TrapCall
	var ended ExitStatus
	for !t.stop {
		if t.killed.Load() {
			// Another task ends the others (execve): this thread goes, the process stays.
			t.th.Exit()
			t.alone = true
			break
		}
		stubSpin, sandboxSpin := t.spins()
		var flags crossing.ResumeFlags
		if t.esc == nil && t.resumeFlags != 0 && t.fast {
			// A new FS base or FPU state needs the full state (calls.go): the flags wait.
			t.escalate(false)
		} else if t.esc == nil {
			flags, t.resumeFlags = t.resumeFlags, 0
		}
		c0 := crossing.Cycles()
		t.inTenant.Store(time.Now().UnixNano())
		var err error
		if t.parked {
			// Parked: the kernelet resumes the registers on a runner when the task's turn
			// comes (Kernel.runParked, or a switch); the carrier sleeps until they trap.
			t.parked = false
			err = t.th.Wait()
		} else {
			t.kt.JoinRing() // among the turns of an open ring, as an equal
			t.place(sandboxSpin > 0)
			t.kt.InTenant.Store(true)
			err = t.th.Resume(flags, stubSpin, sandboxSpin)
		}
		elapsed := crossing.Cycles() - c0
		t.kt.InTenant.Store(false)
		t.inTenant.Store(0)
		if err != nil {
			ended = t.stubEnded(err)
			break
		}
		// The kernelet may have handed the vCPU on while the task ran tenant code (a switch):
		// kernel code runs only on a vCPU.
		t.kt.Acquire()
		if sandboxSpin > 0 {
			t.adapt(elapsed)
		}
		tr := t.th.Trap()
		t.ran(elapsed, tr.Kind)
		t.fast = tr.Kind == crossing.TrapCall
		switch {
		case t.esc != nil && t.endEscalation(tr):
		case tr.Kind == crossing.TrapCall:
			t.viaSite++
			if fullStateCall(t.th.Regs.Orig_rax) {
				t.escalate(true)
				continue
			}
			t.syscall()
			if t.parked {
				continue // a yield parked: nothing of the task runs until its turn
			}
		case tr.Kind == crossing.TrapSyscall:
			if ret := t.p.k.calls.Trapped(tr.Addr); ret != tr.Addr {
				t.th.Regs.Rip = ret // a patched site's call, made while the tenant has threads
			} else {
				t.patchSite(tr.Addr)
			}
			t.syscall()
			if t.parked {
				continue // a yield parked: nothing of the task runs until its turn
			}
		case tr.Kind == crossing.TrapFault:
			if !t.patchedCallFault(tr) {
				t.fault(tr)
			}
		case tr.Kind == crossing.TrapPreempt:
			if t.preempted() {
				continue // parked: nothing of the task runs until its turn
			}
		}
		if !t.stop {
			t.deliverSignals()
		}
	}
	t.spare = false
	t.p.cpu.Add(int64(threadCPU() - started))
	t.p.k.viaSite.Add(t.viaSite)
	t.p.k.served.Add(t.served)
	t.closeInterrupt()
	t.stubDone.Store(true)
	t.p.taskDone(t, ended)
	// The vCPU goes last: the carrier's work for the task (the stub thread's end, a process's
	// teardown) runs on it. When the vCPU went first, that work ran beside its next holders: 50
	// threads ending one after the other on 2 vCPUs made the probe see three runnable.
	t.kt.Exit()
}

// stopSpinning is the kernelet's OnGiveWay: the stub thread stops spinning as its vCPU goes. Once
// the carrier is done with the stub (stubDone), there is no thread to stop, and the stub's memory
// may be gone.
func (t *Task) stopSpinning() {
	if !t.stubDone.Load() {
		t.th.StopSpinning()
	}
}

func (t *Task) mask() uint64     { return t.sigmask.Load() }
func (t *Task) setMask(m uint64) { t.sigmask.Store(m) }

// stubEnded turns the stub's death into an exit status: a signal the host sent it (SIGKILL from
// Signal, SIGSYS from the filter).
func (t *Task) stubEnded(err error) ExitStatus {
	if !errors.Is(err, crossing.ErrStubDead) {
		return ExitStatus{Signal: unix.SIGKILL}
	}
	ws := t.p.stub.WaitStatus()
	if ws.Signaled() {
		return ExitStatus{Signal: unix.Signal(ws.Signal())}
	}
	return ExitStatus{Signal: unix.SIGKILL}
}

// fault serves a fault: memory the grant populates lazily (or copies on write); else the tenant's
// handler for the signal runs, or the signal kills the process.
func (t *Task) fault(tr crossing.Trap) {
	if tr.Signal == syscall.SIGSEGV || tr.Signal == syscall.SIGBUS {
		if tr.Write {
			t.p.k.faults.Writes.Add(1)
		} else {
			t.p.k.faults.Reads.Add(1)
		}
		t.p.faults.Add(1)
		ok, err := t.p.k.svc.HandleFault(t.p.as, tr.Addr, tr.Write)
		if errors.Is(err, unix.ENOMEM) {
			// Memory of processes that just exited may be on its way back, and cached pages
			// can go: wait for the one and drop the other before calling this an
			// out-of-memory kill.
			t.p.k.pages.drop()
			t.p.k.dropGhosts()
			t.blocking(t.p.k.releasing.Wait)
			ok, err = t.p.k.svc.HandleFault(t.p.as, tr.Addr, tr.Write)
		}
		if ok {
			return
		}
		if errors.Is(err, unix.ENOMEM) {
			t.p.k.cfg.Log("pid %d: out of memory at %#x: killed", t.p.pid, tr.Addr)
			t.exitGroup(ExitStatus{Signal: unix.SIGKILL, OOMKilled: true})
			return
		}
		t.p.k.cfg.Log("pid %d tid %d: %v at %#x (write %v, ip %#x): %v", t.p.pid, t.tid, tr.Signal, tr.Addr, tr.Write, t.th.Regs.Rip, err)
	}
	t.forceSignal(unix.Signal(tr.Signal), sigInfo{code: tr.Code, addr: tr.Addr})
}

// preempt makes the task's stub thread trap, without interrupting a kernel wait.
func (t *Task) preempt() {
	t.th.Kick()
}

// yield gives the task's vCPU to a waiting task if the kernelet says it should (a kick, the time
// slice, a change of priority or affinity), and waits for one again. Its stub thread stops
// spinning before the vCPU goes (OnGiveWay), since a thread without a vCPU must not be runnable.
func (t *Task) yield() {
	if t.kt.Preempted() {
		t.spare = false
	}
}

// preempted serves a preemption trap (a kick or the time slice) as yield does, except that a task
// that gives way has its registers parked in the stub, where a runner takes them up when the
// task's turn comes, and preempted reports true: its carrier is not woken for that.
func (t *Task) preempted() bool {
	if t.fast || t.pendingSignal() {
		// A patched call's registers are not all in the slot; a signal is to be delivered.
		t.yield()
		return false
	}
	return t.giveWayParked(t.kt.PreemptedPark)
}

// giveWayParked gives way through give (the kernelet's PreemptedPark or YieldPark) with the
// registers parked in the stub, and reports whether the task is parked now: its carrier then
// only waits for the registers' next trap.
func (t *Task) giveWayParked(give func(park func()) bool) bool {
	parked := false
	if !give(func() { parked = t.th.Park() }) {
		return false
	}
	t.spare = false
	if !parked {
		t.kt.Acquire() // the kernelet counts it parked; it takes the vCPU here instead
		return false
	}
	t.parked = true
	return true
}

// giveUpVCPUs releases the task's vCPU and any spare it borrowed; its stub thread stops spinning,
// since a thread without a vCPU must not be runnable.
func (t *Task) giveUpVCPUs() {
	t.kt.Release() // stops the stub's spinning first (OnGiveWay)
	t.spare = false
}

// blocking runs fn (which may block in the host) without holding the vCPU. fn should also
// return when t.interrupt is poked (a signal came).
func (t *Task) blocking(fn func()) {
	t.giveUpVCPUs()
	t.spin.calm = 0
	t.waiting.Store(true)
	fn()
	t.kt.Acquire() // to a vCPU, kicking a holder of lower rank
	t.waiting.Store(false)
}

// exitGroup ends the whole process with st: the other tasks see their stub threads die.
func (t *Task) exitGroup(st ExitStatus) {
	t.p.setStatus(st)
	t.stop = true
	t.p.mu.Lock()
	others := t.p.live > 1
	t.p.mu.Unlock()
	if others {
		t.p.stub.Kill()
	}
}

// wakePlaced wakes a task that sleeps in the kernel without a vCPU, kt being its kernelet task
// (nil: not yet made): the kernelet places it (Wake), and its carrier is woken now if it got a
// vCPU, else when it is given one (granted).
func (t *Task) wakePlaced(kt *kernelet.Task) {
	if kt == nil || kt.Wake() {
		t.granted()
	}
}

// granted wakes the carrier of a task the kernelet has given a vCPU after a Wake: from its wake
// word (a futex wait), or from any wait when its process is ending (wakeToEnd).
func (t *Task) granted() {
	if t.p.ending.Load() {
		t.wakeWaits()
		return
	}
	t.park.Wake()
}

// parkFresh parks a new thread's registers before its first run, with the fresh FPU state and
// FS base its first resume would set (kernelet.AcquireOrPark).
func (t *Task) parkFresh() bool {
	if t.resumeFlags != crossing.ResumeSetFS|crossing.ResumeResetFPU || !t.th.ParkFresh() {
		return false
	}
	t.resumeFlags = 0
	return true
}

// pendingSignal reports whether the task has something to do in the kernel before it runs tenant
// code again: a signal to deliver, a job-control stop, an end, or resume flags its parked
// registers would not carry.
func (t *Task) pendingSignal() bool {
	p := t.p
	if t.killed.Load() || t.stop || t.esc != nil || t.resumeFlags != 0 || p.job.quick.Load() {
		return true
	}
	p.mu.Lock()
	pend := (p.pending | t.pending) &^ (t.mask() &^ unblockable)
	p.mu.Unlock()
	return pend != 0
}
