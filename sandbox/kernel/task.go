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

	vcpu  *kernelet.VCPU // held while the task runs tenant or kernel code
	spare *kernelet.VCPU // an idle vCPU borrowed to spin on, returned when someone needs it

	resumeFlags crossing.ResumeFlags
	fsBase      uint64
	clearTID    uint64
	sigmask     atomic.Uint64 // written only by the task itself
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

	spin spinState
	park park.Parker // the carrier sleeps here in kernel waits that others end directly
}

// Spin windows, in microseconds. The carrier must spin longer than the tenant's gap between
// calls, the stub longer than the kernel's service time; both only on a spare vCPU.
const (
	spinMinMicros  = 50
	spinMaxMicros  = 200
	stubSpinMicros = 50
	spinBackoff    = 64 // round trips without spinning after the window kept missing
)

type spinState struct {
	window uint64 // cycles the carrier spins; 0 = sleep at once
	misses int
	pause  int
}

// spins decides this round trip's spin windows and borrows or returns the spare vCPU.
func (t *Task) spins() (stub, sandbox uint64) {
	sched := t.p.k.sched
	if t.spare != nil && sched.Waiting() {
		sched.Release(t.spare)
		t.spare = nil
	}
	if t.spin.pause > 0 {
		t.spin.pause--
		return 0, 0
	}
	if t.spare == nil {
		if t.spare = sched.TryAcquire(); t.spare == nil {
			return 0, 0
		}
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
		t.spin = spinState{pause: spinBackoff}
		if t.spare != nil {
			t.p.k.sched.Release(t.spare)
			t.spare = nil
		}
	}
}

// run is the task's life: resume tenant code, serve its trap, repeat. The goroutine keeps its
// OS thread so that the raw futex waits of the crossing keep their P.
func (t *Task) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t.recordCarrier()
	sched := t.p.k.sched
	t.vcpu = sched.Acquire()
	started := time.Now()
	var ended ExitStatus
	for !t.stop {
		if t.killed.Load() {
			// Another task ends the others (execve): this thread goes, the process stays.
			t.th.Exit()
			t.alone = true
			break
		}
		stubSpin, sandboxSpin := t.spins()
		flags := t.resumeFlags
		t.resumeFlags = 0
		c0 := crossing.Cycles()
		t.inTenant.Store(time.Now().UnixNano())
		err := t.th.Resume(flags, stubSpin, sandboxSpin)
		t.inTenant.Store(0)
		if err != nil {
			ended = t.stubEnded(err)
			break
		}
		if sandboxSpin > 0 {
			t.adapt(crossing.Cycles() - c0)
		}
		tr := t.th.Trap()
		switch tr.Kind {
		case crossing.TrapSyscall:
			t.syscall()
		case crossing.TrapFault:
			t.fault(tr)
		case crossing.TrapPreempt:
			t.yield()
		}
		if !t.stop {
			t.deliverSignals()
		}
	}
	if t.spare != nil {
		sched.Release(t.spare)
	}
	sched.Release(t.vcpu)
	t.p.cpu.Add(int64(time.Since(started)))
	t.closeInterrupt()
	t.p.taskDone(t, ended)
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
	unix.Tgkill(t.p.stub.Pid(), t.th.Tid(), sigPreemptHost)
}

// yield gives the vCPU to a waiting task, if any.
func (t *Task) yield() {
	sched := t.p.k.sched
	if sched.Waiting() {
		t.giveUpVCPUs()
		t.vcpu = sched.Acquire()
	}
}

// giveUpVCPUs releases the task's vCPU and any spare it borrowed; its stub thread stops spinning,
// since a thread without a vCPU must not be runnable.
func (t *Task) giveUpVCPUs() {
	sched := t.p.k.sched
	t.th.StopSpinning()
	if t.spare != nil {
		sched.Release(t.spare)
		t.spare = nil
	}
	sched.Release(t.vcpu)
	t.vcpu = nil
}

// blocking runs fn (which may block in the host) without holding the vCPU. fn should also
// return when t.interrupt is poked (a signal came).
func (t *Task) blocking(fn func()) {
	t.giveUpVCPUs()
	fn()
	t.vcpu = t.p.k.sched.Acquire()
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
