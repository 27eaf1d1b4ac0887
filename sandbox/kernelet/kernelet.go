// Package kernelet schedules the sandbox's tenant tasks over its N vCPUs, so that Linux never
// sees more than N runnable threads of a pod: a task holds a vCPU while it runs tenant or kernel
// code and gives it back before it blocks; a carrier may spin only on a vCPU nobody else needs.
//
// Each vCPU has a run queue of the tasks waiting for it. A vCPU that comes free runs the best
// task allowed on it: real-time tasks (FIFO, RR) by priority, then ordinary ones by least
// virtual runtime (weighted by nice, as Linux's fair class does), then idle ones. A task that
// wakes goes to a vCPU it may use; if that vCPU's holder should give way at once, the kernelet
// asks the kernel to kick it (the kernel makes the holder's stub thread trap, and the holder then
// calls Preempted). The time slice works the same way: the kernel's preemption ticker asks Overdue
// which holders have run long enough while someone of their rank waits.
//
// A task preempted in tenant code may instead wait "parked" (PreemptedPark): its registers wait
// in shared memory, no carrier waits for it, and when it is given a vCPU the kernelet calls the
// kernel's OnRun hook rather than waking a carrier; Overdue may also swap a holder running tenant
// code for a parked task at once (a Switch), which the kernel carries out on the same stub thread.
//
// When every vCPU runs tenant code of one process and only parked equals of it wait, Delegate
// hands them to that process's stub (a ring, ring.go): its runners take turns on their own
// timers, and no sandbox thread wakes for a slice until a call that changes anything takes the
// ring back.
//
// It must never import the kernel proper, and never let a task run (or spin) without holding a
// vCPU: the kernelet only hands out vCPUs, it does not run anything itself.
package kernelet

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/endovisor/endo/sandbox/kernelet/park"
)

// Policy is a task's scheduling policy; the values are Linux's SCHED_* numbers.
type Policy int

const (
	Other Policy = 0 // SCHED_OTHER: fair share by nice
	FIFO  Policy = 1 // SCHED_FIFO: real time, runs until it blocks, yields or a higher one comes
	RR    Policy = 2 // SCHED_RR: real time, sliced among equals
	Batch Policy = 3 // SCHED_BATCH: scheduled as Other
	Idle  Policy = 5 // SCHED_IDLE: runs only when nothing else waits
)

// Scheduling constants. Runtimes and virtual runtimes are in nanoseconds.
const (
	// Slice is how long a task may hold a vCPU while an equal waits for it.
	Slice = 10 * time.Millisecond
	// wakeupGranularity is how far ahead (in virtual runtime) a waking ordinary task must be of
	// an ordinary holder to kick it rather than wait for the slice's end.
	wakeupGranularity = int64(2 * time.Millisecond)
	// sleeperCredit is how much virtual runtime a task that slept may be behind the others when
	// it wakes: enough to run first, not enough to starve the others after a long sleep.
	sleeperCredit = int64(5 * time.Millisecond)
	// newTaskDebit places a new task behind the ones that run: a thread or process that starts
	// does not push its parent off the vCPU (which would make starting many threads quadratic).
	newTaskDebit = int64(Slice / 2)
	// maxLead bounds how far (in real time, before the weight) one stretch on a vCPU may put a
	// task ahead of the equals that waited meanwhile. A stretch is timed by the clock, not by
	// the host CPU it got: a slice's end that came late (the ticker waited for a host CPU), or a
	// start that came late (the stub thread of a parked task waited for one), ran the clock for
	// the task while Linux ran it little or not at all. Charged in full, such a stretch put the
	// task far ahead of its equals, and it then waited until every one of them had caught up:
	// with 50 busy threads in two processes on 2 vCPUs, one 100 ms stretch cost about 2.5 s of
	// waiting, and the thread creating the others waited so (beside a sibling, 13 interleaved
	// runs each: threads up after 0.04-5.5 s, 1.95 on average, and 0.2-2.7 s, 0.95, with the
	// bound; the sibling's share moved within the noise, .962 and .946).
	// Only the lead over waiters is bounded: a task that runs on because every waiter is ahead
	// of it is charged in full, or it would never catch up and give way.
	maxLead = int64(2 * Slice)
	// kinGrace is how far behind (in virtual runtime) of the best waiter a kin of the holder may
	// be and still take the holder's vCPU at a slice's end instead (OnKin).
	kinGrace    = int64(Slice)
	nice0Weight = 1024
)

// weights maps nice -20..19 to a weight: 1024 at nice 0, each step about 1.25 times the next.
var weights [40]int64

func init() {
	for i := range weights {
		weights[i] = int64(math.Round(nice0Weight / math.Pow(1.25, float64(i-20))))
	}
}

// Weight is the share weight of an ordinary task of the given nice value.
func Weight(nice int) int64 { return weights[min(max(nice, -20), 19)+20] }

// class orders the policies: lower runs first.
func (p Policy) class() int {
	switch p {
	case FIFO, RR:
		return 0
	case Idle:
		return 2
	}
	return 1
}

// Valid reports whether the kernelet knows the policy.
func (p Policy) Valid() bool {
	switch p {
	case Other, FIFO, RR, Batch, Idle:
		return true
	}
	return false
}

// RealTime reports whether the policy takes an rt priority (1..99).
func (p Policy) RealTime() bool { return p == FIFO || p == RR }

// Kernelet owns the vCPUs of one sandbox.
type Kernelet struct {
	onWait func()      // called (without the lock) when a task has to wait for a vCPU
	kick   func(*Task) // called (without the lock) when a holder should give way at once
	onRun  func(*Task, *VCPU)
	kin    func(a, b *Task) bool // nil: no task is another's kin (OnKin)
	// sliceDue is how long a holder must have held its vCPU for an equal to take it at a
	// slice's end: Slice, less what LookEvery allows, for Overdue and for Preempted alike (a
	// holder Overdue found due and kicked gives way).
	sliceDue int64
	epoch    time.Time
	clock    func() int64 // ns since epoch; tests replace it

	mu      sync.Mutex
	n       int          // the vCPUs there are to be; held ones beyond it go when released
	vcpus   []*VCPU      // by ID; IDs >= n are retiring
	waiting atomic.Int32 // tasks in run queues: changed under the lock, read without it too
	seq     uint64       // queueing order
	minVr   int64        // a floor under the virtual runtimes of ordinary tasks (monotonic)
	tasks   int          // live tasks, for Stats

	// runs are the parked tasks given a vCPU whose OnRun call is still due: give records them
	// under the lock, and whoever unlocks next calls the hook. runsPending lets doKicks (the
	// unlock path of methods outside this file) see them without taking the lock again.
	runs        []run
	runsPending atomic.Bool
	runDone     *sync.Cond // on mu: a task's OnRun calls in flight are over

	// wakes wake the carriers given a vCPU while holdWakes was set (their grant box's futex, or
	// OnGrant): they wait for unlock. A carrier woken under the lock found it still held the
	// moment it ran (it preempts the waker on its CPU), and a locked goroutine that blocks on a
	// Go mutex is handed a P from thread to thread: two threads yielding to each other on one
	// vCPU took 49 us a round trip, where their two futex hand-offs alone take 3.5 us.
	wakes     []func()
	holdWakes bool

	// delegated are the open rings (ring.go): the vCPUs and waiting tasks of each group given to
	// its stub's runners.
	delegated []*ring
	ringOpen  atomic.Bool // len(delegated) != 0, read without the lock
	rings     RingStats   // of the rings so far
}

// run is one OnRun call still to be made.
type run struct {
	t *Task
	v *VCPU
}

// VCPU is one of the sandbox's virtual CPUs.
type VCPU struct {
	ID int

	holder   *Task   // the task running on it
	lent     bool    // lent as a spare for spinning (holder is nil)
	borrower *Task   // the task that borrowed it, if a task did
	queue    []*Task // tasks waiting for it
	retiring bool    // beyond N: it goes when it is released
	ring     bool    // attached to a ring: its runner takes turns among the members (holder nil)
	home     *ring   // the open ring it was given to, which it goes back to when free (nil: none)
	taken    bool    // being taken from the ring for the task queued on it
	takenAt  int64   // when it was last asked of the ring's runner (Shrink)
}

// Task is a tenant task's place in the kernelet. Its fields are guarded by the kernelet's lock;
// one goroutine (the task's own) calls Acquire, Release, Yield and Preempted.
type Task struct {
	k *Kernelet
	// Owner is the kernel's task, for the kick callback.
	Owner any
	// OnGiveWay, if set, is called just before the task lets go of its vCPU (Release, Exit, or
	// giving way in Yield or Preempted), under the kernelet's lock: it must only flip a flag (the
	// kernel ends its stub thread's spinning). Set it before the task's first Acquire.
	OnGiveWay func()
	// OnGrant, if set, wakes the task's carrier when it is given a vCPU after another task woke
	// it (Wake); it is called under the kernelet's lock and must only make one host call.
	OnGrant func()
	// BeforeWait, if set, is called once, and then cleared, just before the task's carrier
	// would first sleep in Acquire for a vCPU (outside the kernelet's lock): the kernel's
	// creator of a new task waits until the task holds a vCPU, is parked, or waits for one, and
	// may itself hold the vCPU the task waits for.
	BeforeWait func()

	policy   Policy
	nice     int
	rtprio   int
	affinity CPUSet // nil: every vCPU

	vr    int64 // virtual runtime (ns, weighted by nice)
	since int64 // when it got its vCPU, or was last charged
	got   int64 // when it got its vCPU (for the slice)
	last  int   // the vCPU it last ran on, -1 if none
	seq   uint64

	fresh bool  // not yet run: its first Acquire neither gets sleeper credit nor kicks
	vcpu  *VCPU // held
	spare *VCPU // borrowed to spin on

	// SpareHeld is true while the task holds a spare: the carrier spins only as long
	// (crossing.Thread.SpinWhile); a waiter can take the spare back at any moment.
	SpareHeld atomic.Bool
	// InTenant is set by the kernel while the task's thread runs tenant code (between resuming
	// it and seeing its next trap). Only such a holder may be switched by Overdue: its registers
	// can be taken from its stub thread without a carrier's help.
	InTenant atomic.Bool
	queued   *VCPU // the run queue it waits in
	// parked: it waits in queued with no carrier reading grant; give calls OnRun instead.
	parked bool
	inRun  int  // OnRun calls for it that are due or under way
	ringed bool // in a ring: it holds or waits for a vCPU as the ring's runners decide
	// woken: another task placed it (Wake) while its carrier sleeps; a give calls OnGrant.
	woken  bool
	grant  grantBox
	exited bool
}

// Switch is a hand-over decided by Overdue: From (a holder running tenant code) is now parked
// and queued; To (a parked task) now holds V. The kernel carries it out: it stops From's stub
// thread, parks From's registers and runs To's there. OnRun is not called for To. From counts
// as parked at once, so it may be given a vCPU (OnRun) before the kernel has stopped it: the
// kernel's OnRun must wait for, or take over, a switch still under way. If From's thread traps
// before it is stopped, its carrier calls Acquire (From holds no vCPU any more), and the kernel
// must not stop a later run of From's thread in the switch's name.
type Switch struct {
	From, To *Task
	V        *VCPU
}

// New makes a kernelet with n vCPUs.
func New(n int) (*Kernelet, error) {
	if n < 1 {
		return nil, fmt.Errorf("kernelet: %d vCPUs", n)
	}
	k := &Kernelet{n: n, epoch: time.Now(), sliceDue: int64(Slice)}
	k.runDone = sync.NewCond(&k.mu)
	for i := 0; i < n; i++ {
		k.vcpus = append(k.vcpus, &VCPU{ID: i})
	}
	return k, nil
}

// OnWait sets a function called whenever a task has to wait for a vCPU (after it is queued):
// the caller's cue to start its time-slice ticker. Set it before use.
func (k *Kernelet) OnWait(f func()) { k.onWait = f }

// OnKick sets the function that makes a holder give way at once (a waking task of higher rank
// waits for its vCPU, or its spare is wanted): it must make the holder's task call Preempted
// soon. It may be called for a task that has meanwhile let go; it must not call into the
// kernelet. Set it before use.
func (k *Kernelet) OnKick(f func(*Task)) { k.kick = f }

// OnRun sets the function called (without the kernelet's lock, after the state change) when a
// parked task has been given vCPU v: the kernel resumes the parked registers on v. It may call
// into the kernelet. It is called once per such grant, by whichever caller unlocks the kernelet
// next, unless the task lets go of v before the call is taken (Release, Exit, giving way).
//
// It may race the task's own carrier calling Acquire (its thread trapped after all): the kernel
// must let only one of the two resume the parked context (its shared memory's park state
// decides). Acquire waits until the task's OnRun calls under way have returned, so a call never
// comes after the task has run on and let go of v; OnRun must therefore never wait for the
// task's own carrier. It may still come for a task that another goroutine made Exit meanwhile.
// Set it before use; if it is nil, parked tasks are never made.
func (k *Kernelet) OnRun(f func(t *Task, v *VCPU)) { k.onRun = f }

// LookEvery tells the kernelet that Overdue is called every d: a holder whose slice ends before
// the next call is due at this one, at most half a slice early. A ticker that looks once a
// slice so ends slices a slice apart, where without it they would run up to two. Call it
// before use.
func (k *Kernelet) LookEvery(d time.Duration) { k.sliceDue = int64(Slice - min(d, Slice/2)) }

// OnKin sets the function that says whether handing a vCPU from task a to task b is cheap for
// the host (the kernel: two threads of one process, whose stub thread switches registers
// itself; between processes one host thread goes to sleep and another wakes). At a slice's end
// a holder in tenant code then hands its vCPU to its best parked kin rather than to a better
// waiter, as long as the kin is at most kinGrace behind it: fairness among tasks is kept over
// one slice more. Two busy processes on 2 vCPUs so settle with one process on each vCPU, and
// Linux sees two threads that keep running instead of a sleep and a wake-up on each vCPU every
// slice, which cost a sibling cgroup of equal weight its share (50 busy threads in two
// processes beside one, 11 interleaved pairs of 10 s runs: switches between processes 228-509
// a run before, 6-54 after; the sibling's share 0.948 on average before, 0.968 after, higher
// in 9 pairs). It is called under the kernelet's lock and must not call into the kernelet. Set
// it before use.
func (k *Kernelet) OnKin(f func(a, b *Task) bool) { k.kin = f }

func (k *Kernelet) now() int64 {
	if k.clock != nil {
		return k.clock()
	}
	return int64(time.Since(k.epoch))
}

// N is the number of vCPUs.
func (k *Kernelet) N() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n
}

// NewTask makes a task with Linux's defaults (SCHED_OTHER, nice 0, every vCPU); its virtual
// runtime starts a little behind the others'.
func (k *Kernelet) NewTask(owner any) *Task {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.updateMin()
	k.tasks++
	return &Task{k: k, Owner: owner, last: -1, vr: k.minVr + newTaskDebit, fresh: true}
}

// Fork makes a task that inherits t's policy, priorities and affinity, as a child thread or
// process does on Linux; it starts behind its parent.
func (t *Task) Fork(owner any) *Task {
	c := t.k.NewTask(owner)
	t.k.mu.Lock()
	c.policy, c.nice, c.rtprio, c.affinity = t.policy, t.nice, t.rtprio, t.affinity.clone()
	c.vr = max(c.vr, t.curVr(t.k.now())+newTaskDebit)
	t.k.mu.Unlock()
	return c
}

// Resize changes the number of vCPUs (the pod's CPU limit changed): new ones serve waiting tasks
// at once; when shrinking, free vCPUs go first and held ones as their tasks give them back.
func (k *Kernelet) Resize(n int) error {
	if n < 1 {
		return fmt.Errorf("kernelet: %d vCPUs", n)
	}
	k.lockTaking()
	var kicks []*Task
	k.n = n
	for i := range k.vcpus {
		k.vcpus[i].retiring = i >= n
	}
	for len(k.vcpus) < n {
		k.vcpus = append(k.vcpus, &VCPU{ID: len(k.vcpus)})
	}
	// Tasks waiting for a retiring vCPU, or pinned only to such, find another place.
	var moved []*Task
	for _, v := range k.vcpus {
		for _, t := range v.queue {
			if v.retiring || !t.allowed(v) {
				moved = append(moved, t)
			}
		}
	}
	for _, t := range moved {
		k.dequeue(t)
		kicks = append(kicks, k.place(t)...)
	}
	for i := len(k.vcpus) - 1; i >= n && k.vcpus[i].free(); i-- {
		k.vcpus = k.vcpus[:i]
	}
	for _, v := range k.vcpus {
		if v.free() && !v.retiring {
			k.dispatch(v)
		}
	}
	// Holders of vCPUs that go, or of vCPUs they may no longer use, move on their next trap.
	for _, v := range k.vcpus {
		if v.holder != nil && (v.retiring || !v.holder.allowed(v)) {
			kicks = append(kicks, v.holder)
		}
	}
	k.unlock(kicks)
	return nil
}

func (v *VCPU) free() bool { return v.holder == nil && !v.lent && !v.ring && !v.taken }

// Acquire blocks until the task holds a vCPU and returns it. The task goes to a vCPU it may
// use: a free one (its last one first), else the queue of the vCPU whose holder is the weakest,
// kicking that holder if the task should run before it at once.
//
// A parked task whose thread trapped after all (a system call raced the park) calls Acquire
// too: it gets the vCPU it was given while parked at once, else it keeps its place in its run
// queue (no sleeper credit: it was preempted, not asleep) and waits as any waiter does.
func (t *Task) Acquire() *VCPU { return t.acquire(nil) }

// AcquireOrPark is Acquire for a task whose registers may wait parked before it first runs (a
// new thread's): if the new task has to wait, park is called under the kernelet's lock (it must
// only flip shared memory) and, if it parked the registers, the task waits parked (OnRun resumes
// it) and AcquireOrPark returns nil at once.
func (t *Task) AcquireOrPark(park func() bool) *VCPU { return t.acquire(park) }

func (t *Task) acquire(park func() bool) *VCPU {
	k := t.k
	k.mu.Lock()
	if t.woken {
		// Placed by its waker: it holds a vCPU by now, or waits in a run queue for a give,
		// which from now on posts on the grant box.
		t.woken = false
		if v := t.vcpu; v != nil {
			k.mu.Unlock()
			return v
		}
		if t.queued != nil {
			k.mu.Unlock()
			return t.waitGrant()
		}
	}
	if len(k.delegated) != 0 {
		switch v, queued, parked, handled := k.ringAcquire(t, park); {
		case !handled:
		case v != nil:
			k.unlock(nil)
			return v
		case parked:
			k.unlock(nil)
			if k.onWait != nil {
				k.onWait()
			}
			return nil
		case queued:
			k.unlock(nil)
			if k.onWait != nil {
				k.onWait() // the ticker too, should the runner's trap not come
			}
			return t.waitGrant()
		}
	}
	for t.vcpu != nil && t.inRun > 0 {
		// Given while parked: let the OnRun call due or under way find the context taken, so
		// that none can come after this carrier has run on and let go of the vCPU.
		if runs := k.takeRuns(); runs != nil {
			k.mu.Unlock()
			k.callRuns(runs)
			k.mu.Lock()
			continue
		}
		k.runDone.Wait()
	}
	if t.vcpu != nil {
		v := t.vcpu
		k.mu.Unlock()
		return v
	}
	if t.parked {
		t.parked = false // from now on give posts on grant, which this carrier reads
		if t.queued != nil {
			k.mu.Unlock()
			if k.onWait != nil {
				k.onWait()
			}
			return t.waitGrant()
		}
	}
	k.comeBack(t)
	fresh := t.fresh
	kicks := k.place(t)
	t.fresh = false
	v := t.vcpu
	if v == nil && fresh && park != nil && k.onRun != nil && park() {
		t.parked = true // queued by place: a give from now on calls OnRun
		k.unlock(kicks)
		if k.onWait != nil {
			k.onWait()
		}
		return nil
	}
	k.unlock(kicks)
	if v != nil {
		return t.grant.take() // posted by place (give): no wait
	}
	if k.onWait != nil {
		k.onWait()
	}
	return t.waitGrant()
}

// waitGrant waits for a vCPU posted by give, calling BeforeWait first.
func (t *Task) waitGrant() *VCPU {
	if f := t.BeforeWait; f != nil {
		t.BeforeWait = nil
		f()
	}
	return t.grant.take()
}

// comeBack readies t, about to be placed after a sleep in the kernel (or its first run), for the
// run queues: a sleeper comes back a little behind the others, not with all the credit it
// saved; a new task keeps the debit it was made with (k.mu held).
func (k *Kernelet) comeBack(t *Task) {
	k.updateMin()
	if !t.fresh && t.policy.class() != 0 {
		t.vr = max(t.vr, k.minVr-sleeperCredit)
	}
}

// place gives t a free vCPU it may use, or queues it; it returns the holders to kick (k.mu held).
func (k *Kernelet) place(t *Task) []*Task {
	var best *VCPU
	for _, v := range k.vcpus {
		if v.retiring || !t.allowed(v) || !v.free() {
			continue
		}
		if best == nil || v.ID == t.last {
			best = v
		}
	}
	if best != nil {
		k.give(best, t)
		return nil
	}
	// No free vCPU: wait where the holder is weakest (the last vCPU on a tie), or where a spare
	// is lent (its borrower returns it when kicked).
	var victim *VCPU
	for _, v := range k.vcpus {
		if v.retiring || !t.allowed(v) {
			continue
		}
		if v.lent {
			victim = v
			break
		}
		if victim == nil || victim.holder != nil && v.holder != nil && k.weaker(v.holder, victim.holder, v.ID == t.last) {
			victim = v
		}
	}
	if victim == nil {
		// Only retiring vCPUs are allowed (affinity and shrinking): take any live one.
		for _, v := range k.vcpus {
			if !v.retiring {
				victim = v
				break
			}
		}
	}
	if victim.lent && victim.borrower != nil {
		// A spare is only lent while nobody needs it: take it back now. Its borrower stops
		// spinning (its stub at once, its carrier as it sees SpareHeld), no trap needed.
		b := victim.borrower
		b.setSpare(nil)
		victim.lent, victim.borrower = false, nil
		if b.OnGiveWay != nil {
			b.OnGiveWay()
		}
		k.give(victim, t)
		return nil
	}
	k.enqueue(victim, t)
	switch {
	case victim.holder != nil && k.preempts(t, victim.holder):
		if t.fresh && t.policy.class() == victim.holder.policy.class() {
			return nil // a new task waits its turn among its equals
		}
		return []*Task{victim.holder}
	}
	return nil
}

// weaker reports whether holder a is a better victim than b (tie goes to a when tieToA).
func (k *Kernelet) weaker(a, b *Task, tieToA bool) bool {
	now := k.now()
	ca, cb := a.policy.class(), b.policy.class()
	if ca != cb {
		return ca > cb
	}
	switch {
	case ca == 0 && a.rtprio != b.rtprio:
		return a.rtprio < b.rtprio
	case ca != 0:
		va, vb := a.curVr(now), b.curVr(now)
		if va != vb {
			return va > vb
		}
	}
	return tieToA
}

// preempts reports whether waking task w should make holder h give way at once (k.mu held).
func (k *Kernelet) preempts(w, h *Task) bool {
	return k.shouldYieldTo(h, w, k.now(), wakeupGranularity, int64(Slice))
}

// curVr is the virtual runtime including the current run (k.mu held).
func (t *Task) curVr(now int64) int64 {
	if t.vcpu == nil {
		return t.vr
	}
	return t.vr + (now-t.since)*nice0Weight/t.weight()
}

func (t *Task) weight() int64 {
	if t.policy == Idle {
		return 3 // as Linux weighs SCHED_IDLE among the fair tasks
	}
	return Weight(t.nice)
}

// charge adds the run since the last charge to the task's virtual runtime, but puts it no more
// than maxLead (weighted) ahead of the least of its waiting equals, or of where it was (k.mu
// held).
func (t *Task) charge(now int64) {
	if t.vcpu != nil && !t.policy.RealTime() {
		w, ran := t.weight(), now-t.since
		vr := t.vr + ran*nice0Weight/w
		// A stretch no longer than maxLead cannot lead by more, so only a longer one (rare: most
		// end within a slice, as at every blocking call) walks the run queues.
		if ran > maxLead {
			if least, _, ok := t.k.queuedVrs(t.policy.class()); ok {
				vr = min(vr, max(t.vr, least)+maxLead*nice0Weight/w)
			}
		}
		t.vr = vr
	}
	t.since = now
}

// updateMin raises the virtual-runtime floor to the least of the ordinary tasks that hold or
// wait for a vCPU (k.mu held).
func (k *Kernelet) updateMin() {
	now := k.now()
	m, found := int64(math.MaxInt64), false
	for _, v := range k.vcpus {
		if h := v.holder; h != nil && h.policy.class() == 1 {
			m, found = min(m, h.curVr(now)), true
		}
		for _, t := range v.queue {
			if t.policy.class() == 1 {
				m, found = min(m, t.vr), true
			}
		}
	}
	if found && m > k.minVr {
		k.minVr = m
	}
}

func (k *Kernelet) enqueue(v *VCPU, t *Task) {
	k.seq++
	t.seq = k.seq
	t.queued = v
	v.queue = append(v.queue, t)
	k.addWaiting(1)
}

// addWaiting changes the count of tasks in run queues (k.mu held).
func (k *Kernelet) addWaiting(d int) { k.waiting.Add(int32(d)) }

func (k *Kernelet) dequeue(t *Task) {
	v := t.queued
	if v == nil {
		return
	}
	for i, x := range v.queue {
		if x == t {
			v.queue = append(v.queue[:i], v.queue[i+1:]...)
			break
		}
	}
	t.queued = nil
	k.addWaiting(-1)
}

// setSpare records the spare t holds (k.mu held).
func (t *Task) setSpare(v *VCPU) {
	t.spare = v
	t.SpareHeld.Store(v != nil)
}

// give hands free vCPU v to t and tells it: a parked task through OnRun after the lock is
// released, any other through its grant box, which its carrier reads (k.mu held). Only a task
// that is not parked gets a post, so grant never holds a vCPU nobody waits for.
func (k *Kernelet) give(v *VCPU, t *Task) {
	wasParked := t.parked
	k.assign(v, t)
	if wasParked {
		t.inRun++
		k.runs = append(k.runs, run{t, v})
		k.runsPending.Store(true)
		return
	}
	if t.woken {
		if t.OnGrant != nil && k.holdWakes {
			k.wakes = append(k.wakes, t.OnGrant)
		} else if t.OnGrant != nil {
			t.OnGrant()
		}
		return
	}
	if k.holdWakes {
		if t.grant.v.CompareAndSwap(nil, v) {
			k.wakes = append(k.wakes, t.grant.p.Wake)
		}
		return
	}
	t.grant.post(v)
}

// Wake is called by another task for t, whose carrier sleeps in the kernel without a vCPU and
// whose event has come (a futex wake): t is placed as its own Acquire would place it, and Wake
// reports whether it got a vCPU at once, so that its carrier is to be woken now. Otherwise the
// carrier is woken when t is given one (OnGrant): a carrier that would only run to find every
// vCPU taken and queue itself stays asleep, and Linux sees no more of the pod's threads
// runnable than it has vCPUs. Whatever wakes the carrier, it calls Acquire as usual after.
func (t *Task) Wake() (now bool) {
	k := t.k
	k.mu.Lock()
	if t.OnGrant == nil || t.vcpu != nil || t.queued != nil || t.parked || t.ringed || t.woken ||
		t.exited || t.fresh || t.inRun != 0 {
		k.mu.Unlock()
		return true // not asleep without a vCPU: its carrier sees to it
	}
	t.woken = true
	if len(k.delegated) != 0 {
		switch v, queued, _, handled := k.ringAcquire(t, nil); {
		case handled && queued:
			k.unlock(nil)
			if k.onWait != nil {
				k.onWait()
			}
			return false
		case handled:
			if v == nil {
				t.woken = false // neither placed nor queued: its own Acquire sees to it
			}
			k.unlock(nil)
			return true
		}
	}
	k.comeBack(t)
	kicks := k.place(t)
	now = t.vcpu != nil
	k.unlock(kicks)
	if !now && k.onWait != nil {
		k.onWait()
	}
	return now
}

// assign makes t the holder of free vCPU v without telling it (k.mu held). A parked task is
// parked no more: it runs again as a preempted task, with no sleeper credit.
func (k *Kernelet) assign(v *VCPU, t *Task) {
	k.dequeue(t)
	now := k.now()
	v.holder, v.taken = t, false
	t.vcpu = v
	t.since, t.got = now, now
	t.last = v.ID
	t.parked = false
}

// dropRuns forgets the OnRun calls still due for t, which is letting go of its vCPU: the call
// would name a vCPU it no longer holds (k.mu held).
func (k *Kernelet) dropRuns(t *Task) {
	if t.inRun == 0 {
		return
	}
	k.runs = slices.DeleteFunc(k.runs, func(r run) bool {
		if r.t == t {
			t.inRun--
			return true
		}
		return false
	})
	if t.inRun == 0 {
		k.runDone.Broadcast()
	}
}

// takeRuns returns the OnRun calls due and forgets them (k.mu held).
func (k *Kernelet) takeRuns() []run {
	if len(k.runs) == 0 {
		return nil
	}
	r := k.runs
	k.runs = nil
	k.runsPending.Store(false)
	return r
}

// unlock releases k.mu, then calls OnRun for the parked tasks given a vCPU meanwhile and kicks
// ts: neither hook may run under the lock.
func (k *Kernelet) unlock(ts []*Task) {
	runs := k.takeRuns()
	wakes := k.wakes
	k.wakes, k.holdWakes = nil, false
	k.mu.Unlock()
	for _, wake := range wakes {
		wake()
	}
	k.callRuns(runs)
	k.doKicks(ts)
}

// callRuns makes the OnRun calls taken by takeRuns (k.mu not held), then counts them done.
func (k *Kernelet) callRuns(runs []run) {
	if len(runs) == 0 {
		return
	}
	if k.onRun != nil {
		for _, r := range runs {
			k.onRun(r.t, r.v)
		}
	}
	k.mu.Lock()
	for _, r := range runs {
		r.t.inRun--
	}
	k.runDone.Broadcast()
	k.mu.Unlock()
}

// before reports whether a should run before b (k.mu held).
func before(a, b *Task) bool {
	ca, cb := a.policy.class(), b.policy.class()
	if ca != cb {
		return ca < cb
	}
	if ca == 0 && a.rtprio != b.rtprio {
		return a.rtprio > b.rtprio
	}
	if ca != 0 && a.vr != b.vr {
		return a.vr < b.vr
	}
	return a.seq < b.seq
}

// best finds the best waiting task that may run on v: from v's own queue, unless another queue
// has one of a better class (stealing) (k.mu held).
func (k *Kernelet) best(v *VCPU) *Task {
	var own, other *Task
	for _, t := range v.queue {
		if t.allowed(v) && (own == nil || before(t, own)) {
			own = t
		}
	}
	for _, u := range k.vcpus {
		if u == v {
			continue
		}
		for _, t := range u.queue {
			if t.allowed(v) && (other == nil || before(t, other)) {
				other = t
			}
		}
	}
	switch {
	case own == nil:
		return other
	case other == nil:
		return own
	case other.policy.class() != own.policy.class():
		if other.policy.class() < own.policy.class() {
			return other
		}
	case own.policy.class() == 0:
		if other.rtprio > own.rtprio {
			return other
		}
	case other.vr+wakeupGranularity < own.vr:
		// Far behind in its share: take it rather than let queues drift apart.
		return other
	}
	return own
}

// bestKin returns the best parked kin of h that may run on v and is at most kinGrace behind w
// (in virtual runtime, w's class), or w (k.mu held). Only a parked one can take over h's stub
// thread at a slice's end without a host thread waking.
func (k *Kernelet) bestKin(v *VCPU, h, w *Task) *Task {
	if w.policy.class() == 0 || h.policy.class() != w.policy.class() {
		return w // real-time order is strict
	}
	best := w
	for _, u := range k.vcpus {
		for _, t := range u.queue {
			if !t.parked || t.policy.class() != w.policy.class() || t.vr > w.vr+kinGrace || !t.allowed(v) || !k.kin(h, t) {
				continue
			}
			if best == w || before(t, best) {
				best = t
			}
		}
	}
	return best
}

// dispatch gives free vCPU v to the best task that waits for it, if any (k.mu held).
func (k *Kernelet) dispatch(v *VCPU) {
	if t := k.best(v); t != nil {
		k.give(v, t)
	} else if len(k.delegated) != 0 {
		k.ringRefill(v)
	}
}

// release lets go of v (k.mu held): it serves the next task, or goes if it is retiring.
func (k *Kernelet) release(v *VCPU) []*Task {
	// A vCPU taken from a ring is let go of by the member that trapped for it: whoever took it
	// is served as any waiter is, or got another vCPU meanwhile (then nobody takes it any more,
	// and marked taken it would never be free again).
	v.holder, v.lent, v.borrower, v.taken = nil, false, nil, false
	if !v.retiring {
		k.dispatch(v)
		return nil
	}
	var kicks []*Task
	queue := v.queue
	v.queue = nil
	for _, t := range queue {
		t.queued = nil
		k.addWaiting(-1)
		kicks = append(kicks, k.place(t)...)
	}
	for i := len(k.vcpus) - 1; i >= k.n && k.vcpus[i].free(); i-- {
		k.vcpus = k.vcpus[:i]
	}
	return kicks
}

// Release gives the task's vCPU back (before it blocks or ends): the best waiting task gets it.
// A parked task that calls it (its thread trapped and now blocks) leaves its run queue too.
func (t *Task) Release() {
	k := t.k
	k.lockMember(t)
	k.holdWakes = true // until unlock
	kicks := t.releaseLocked()
	k.unlock(kicks)
}

func (t *Task) releaseLocked() []*Task {
	var kicks []*Task
	if t.parked {
		t.k.dequeue(t)
		t.parked = false
	}
	if s := t.spare; s != nil {
		t.setSpare(nil)
		kicks = append(kicks, t.k.release(s)...)
	}
	v := t.vcpu
	if v == nil {
		return kicks
	}
	if t.OnGiveWay != nil {
		t.OnGiveWay()
	}
	t.charge(t.k.now())
	t.vcpu = nil
	t.k.dropRuns(t)
	return append(kicks, t.k.release(v)...)
}

// Exit ends the task: it lets go of its vCPUs and leaves any run queue (parked or not).
func (t *Task) Exit() {
	k := t.k
	k.lockMember(t)
	kicks := t.releaseLocked()
	k.dequeue(t)
	if !t.exited {
		t.exited = true
		k.tasks--
	}
	k.unlock(kicks)
}

// Yield is sched_yield: if a task of the same or a better rank waits for this vCPU, the task
// goes behind it (behind its equals) and waits for a vCPU again. It reports whether it gave way.
func (t *Task) Yield() bool {
	return t.giveWay(yieldRule(t), true)
}

// yieldRule is whom a yielding t gives way to: a waiter of a better class, an equal, or, among
// real-time tasks, one of at least its priority.
func yieldRule(t *Task) func(w *Task, now int64) bool {
	return func(w *Task, now int64) bool {
		cw, ct := w.policy.class(), t.policy.class()
		switch {
		case cw != ct:
			return cw < ct
		case cw == 0:
			return w.rtprio >= t.rtprio
		}
		return true
	}
}

// Preempted is called when the task trapped on a kick or a time-slice signal: it gives way if
// it should (a better task waits for its vCPU, an equal one waits and it has run its slice, or
// it may no longer run on this vCPU). It reports whether it gave way.
func (t *Task) Preempted() bool {
	return t.giveWay(func(w *Task, now int64) bool {
		return t.k.shouldYieldTo(t, w, now, wakeupGranularity, t.k.sliceDue)
	}, false)
}

// PreemptedPark is Preempted for a task whose trap was a preemption in tenant code: if the task
// should give way (the same rule as Preempted), it calls park under the kernelet's lock (park
// only flips shared memory; it must not call into the kernelet), leaves its vCPU to the best
// waiter as Preempted does, queues itself parked and returns true without waiting: its carrier
// is free, and OnRun resumes the task when it is given a vCPU (possibly before PreemptedPark
// returns, when a vCPU is free for it after all). If it need not give way it returns false and
// keeps its vCPU; park is not called. Without an OnRun hook it cannot park: it gives way as
// Preempted does, waiting, and returns false (the caller holds a vCPU again and resumes the task
// as usual).
func (t *Task) PreemptedPark(park func()) bool {
	k := t.k
	if k.onRun == nil {
		t.Preempted()
		return false
	}
	return t.givePark(func(w *Task, now int64) bool {
		return k.shouldYieldTo(t, w, now, wakeupGranularity, k.sliceDue)
	}, false, park)
}

// YieldPark is Yield for a task whose registers can wait parked in the stub (a sched_yield that
// trapped from tenant code), as PreemptedPark is for a preemption: if a task Yield would give way
// to waits, it calls park under the kernelet's lock, goes behind its equals, parked, and returns
// true; its carrier is free. A parked yielder is what lets the kernelet hand equals of one process
// to a ring, where their yields are turns the stub takes without the sandbox. Without an OnRun
// hook it yields as Yield does and returns false.
func (t *Task) YieldPark(park func()) bool {
	if t.k.onRun == nil {
		t.Yield()
		return false
	}
	return t.givePark(yieldRule(t), true, park)
}

// givePark is the body of PreemptedPark and YieldPark.
func (t *Task) givePark(yieldTo func(w *Task, now int64) bool, behindEquals bool, park func()) bool {
	k := t.k
	k.lockMember(t)
	v, w, now, mustMove, ok := t.wayFor(yieldTo)
	if !ok {
		k.mu.Unlock()
		return false
	}
	park()
	k.holdWakes = true // until unlock
	kicks := t.leave(v, w, now, mustMove, behindEquals, true)
	k.ringPark(t)
	waits := t.vcpu == nil
	k.unlock(kicks)
	if waits && k.onWait != nil {
		k.onWait()
	}
	return true
}

// shouldYieldTo reports whether holder h should give its vCPU to waiting task w: w is of a
// better class or rt priority; or an equal waits and h has held its vCPU for slice (RR, ordinary,
// idle); or an ordinary w is behind h's virtual runtime by more than gran (k.mu held).
func (k *Kernelet) shouldYieldTo(h, w *Task, now, gran, slice int64) bool {
	cw, ch := w.policy.class(), h.policy.class()
	if cw != ch {
		return cw < ch
	}
	ran := now - h.got
	switch {
	case cw == 0 && w.rtprio != h.rtprio:
		return w.rtprio > h.rtprio
	case cw == 0:
		return h.policy == RR && ran >= slice
	case cw == 1:
		vr := h.curVr(now)
		return w.vr+gran < vr || ran >= slice && w.vr <= vr
	}
	return ran >= slice
}

// giveWay hands the task's vCPU to the best waiting task that may run on it if yieldTo says so,
// queues the task, and waits for a vCPU again (k.mu taken here).
func (t *Task) giveWay(yieldTo func(w *Task, now int64) bool, behindEquals bool) bool {
	k := t.k
	k.lockMember(t)
	v, w, now, mustMove, ok := t.wayFor(yieldTo)
	if !ok {
		k.mu.Unlock()
		return false
	}
	k.holdWakes = true // until unlock
	kicks := t.leave(v, w, now, mustMove, behindEquals, false)
	got := t.vcpu
	k.unlock(kicks)
	if got == nil && k.onWait != nil {
		k.onWait()
	}
	t.grant.take() // posted by give, now or when a vCPU comes free
	return true
}

// wayFor decides whether the task gives its vCPU v up: it must move (v retires, or the task may
// no longer run on it), or yieldTo says so of w, the best waiter for v. ok is false if the task
// holds no vCPU or keeps it (k.mu held).
func (t *Task) wayFor(yieldTo func(w *Task, now int64) bool) (v *VCPU, w *Task, now int64, mustMove, ok bool) {
	if v = t.vcpu; v == nil {
		return nil, nil, 0, false, false
	}
	now = t.k.now()
	mustMove = v.retiring || v.taken || !t.allowed(v)
	w = t.k.best(v)
	return v, w, now, mustMove, mustMove || w != nil && yieldTo(w, now)
}

// leave is the state change of giving way: t lets go of v and of its spare, v goes to w (or to
// the best waiter, if w took the spare), and t is queued (parked if parked is set) or, if it
// must move, placed anew; it returns the holders to kick (k.mu held).
func (t *Task) leave(v *VCPU, w *Task, now int64, mustMove, behindEquals, parked bool) []*Task {
	k := t.k
	if t.OnGiveWay != nil {
		t.OnGiveWay()
	}
	var kicks []*Task
	if s := t.spare; s != nil {
		t.setSpare(nil)
		kicks = append(kicks, k.release(s)...)
	}
	t.charge(now)
	t.vcpu = nil
	k.dropRuns(t)
	if behindEquals && w != nil && t.policy.class() != 0 && w.policy.class() == t.policy.class() {
		// Behind its equals: after every ordinary task now waiting.
		if _, most, ok := k.queuedVrs(t.policy.class()); ok {
			t.vr = max(t.vr, most+1)
		}
	}
	v.holder = nil
	t.parked = parked // before it is queued: a give from here on must not post on grant
	if mustMove {
		kicks = append(kicks, k.release(v)...)
		kicks = append(kicks, k.place(t)...)
	} else {
		k.enqueue(v, t) // behind its equals: the newest in the queue order
		if w != nil && w.vcpu == nil && w.queued != nil {
			k.give(v, w)
		} else {
			k.dispatch(v) // w took the spare this task returned above
		}
	}
	return kicks
}

// queuedVrs is the least and the greatest virtual runtime of the tasks of the class that wait for
// a vCPU, and whether any does (k.mu held).
func (k *Kernelet) queuedVrs(class int) (least, most int64, ok bool) {
	least, most = math.MaxInt64, math.MinInt64
	for _, v := range k.vcpus {
		for _, t := range v.queue {
			if t.policy.class() == class {
				least, most, ok = min(least, t.vr), max(most, t.vr), true
			}
		}
	}
	return least, most, ok
}

// Overdue finds the holders that should give way now, and reports whether any task waits at
// all (the ticker stops when none does). A holder running tenant code (InTenant) whose successor
// is a parked task is handed over here and returned in switches, which the kernel carries out;
// the other holders are returned in due, and the kernel kicks them. A holder that holds a spare
// is always due (giving way returns the spare, which may change its successor). A holder whose
// successor was itself switched out by this call is left to the next call: that task's
// registers are not parked until the kernel has carried out its switch.
// A slice ends early by what LookEvery allows.
func (k *Kernelet) Overdue() (due []*Task, switches []Switch, waiting bool) {
	k.mu.Lock()
	now := k.now()
	for _, v := range k.vcpus {
		h := v.holder
		if h == nil {
			k.askAgain(v, now)
			continue
		}
		if v.retiring || !h.allowed(v) {
			due = append(due, h)
			continue
		}
		w := k.best(v)
		if w != nil && k.kin != nil && !k.kin(h, w) {
			w = k.bestKin(v, h, w)
		}
		if w == nil || !k.shouldYieldTo(h, w, now, int64(Slice), k.sliceDue) {
			continue
		}
		if slices.ContainsFunc(switches, func(s Switch) bool { return s.From == w }) {
			continue
		}
		if !w.parked || k.onRun == nil || h.spare != nil || !h.InTenant.Load() {
			due = append(due, h)
			continue
		}
		if h.OnGiveWay != nil {
			h.OnGiveWay()
		}
		h.charge(now) // as in Preempted
		h.vcpu, v.holder = nil, nil
		k.dropRuns(h)
		h.parked = true
		k.enqueue(v, h)
		k.assign(v, w) // the Switch tells the kernel: no OnRun
		switches = append(switches, Switch{From: h, To: w, V: v})
	}
	waiting = k.waiting.Load() > 0
	k.unlock(nil)
	return due, switches, waiting
}

// doKicks kicks ts (k.mu not held). It first makes the OnRun calls still due: the methods that
// release k.mu themselves (SetPolicy, SetNice, SetAffinity) leave them behind.
func (k *Kernelet) doKicks(ts []*Task) {
	if k.runsPending.Load() {
		k.mu.Lock()
		runs := k.takeRuns()
		k.mu.Unlock()
		k.callRuns(runs)
	}
	if k.kick == nil {
		return
	}
	for _, t := range ts {
		k.kick(t)
	}
}

// BorrowSpare lends the task a free vCPU to spin on, if one is free and no task waits; it
// returns whether the task holds a spare (it may already have one). A spare is returned with
// ReturnSpare, or at once when the task lets go of its own vCPU.
func (t *Task) BorrowSpare() bool {
	k := t.k
	k.mu.Lock() // a member holds no vCPU and no spare: a ring stays
	defer k.mu.Unlock()
	if t.spare != nil {
		return true
	}
	if k.waiting.Load() > 0 || t.vcpu == nil {
		return false
	}
	for _, v := range k.vcpus {
		if v.free() && !v.retiring {
			v.lent, v.borrower = true, t
			t.setSpare(v)
			return true
		}
	}
	return false
}

// SpinSpare is the carrier's check before each round trip, under one lock: it returns a spare
// that a waiting task wants (or that is retiring), borrows one if borrow is set and a vCPU is
// free and unwanted, and reports whether the task holds a spare now.
func (t *Task) SpinSpare(borrow bool) bool {
	k := t.k
	k.mu.Lock() // a member holds no vCPU and no spare: a ring stays
	var kicks []*Task
	if s := t.spare; s != nil && (k.waiting.Load() > 0 || s.retiring) {
		t.setSpare(nil)
		kicks = k.release(s)
	}
	if t.spare == nil && borrow && k.waiting.Load() == 0 && t.vcpu != nil {
		for _, v := range k.vcpus {
			if v.free() && !v.retiring {
				v.lent, v.borrower = true, t
				t.setSpare(v)
				break
			}
		}
	}
	has := t.spare != nil
	k.unlock(kicks)
	return has
}

// SpareWanted reports whether a task waits, so that a borrowed spare must be returned.
func (t *Task) SpareWanted() bool {
	k := t.k
	k.mu.Lock()
	defer k.mu.Unlock()
	return t.spare != nil && (k.waiting.Load() > 0 || t.spare.retiring)
}

// ReturnSpare gives a borrowed spare back.
func (t *Task) ReturnSpare() {
	k := t.k
	k.mu.Lock() // a member holds no vCPU and no spare: a ring stays
	var kicks []*Task
	if s := t.spare; s != nil {
		t.setSpare(nil)
		kicks = k.release(s)
	}
	k.unlock(kicks)
}

// HasSpare reports whether the task holds a spare.
func (t *Task) HasSpare() bool {
	t.k.mu.Lock()
	defer t.k.mu.Unlock()
	return t.spare != nil
}

// TryAcquire lends a free vCPU to a caller that is not a task (the crossing's timing at start),
// if one is free and nobody waits; give it back with Release.
func (k *Kernelet) TryAcquire() *VCPU {
	k.lockTaking()
	defer k.mu.Unlock()
	if k.waiting.Load() > 0 {
		return nil
	}
	for _, v := range k.vcpus {
		if v.free() && !v.retiring {
			v.lent = true
			return v
		}
	}
	return nil
}

// Release gives back a vCPU lent by TryAcquire.
func (k *Kernelet) Release(v *VCPU) {
	k.lockTaking()
	kicks := k.release(v)
	k.unlock(kicks)
}

// Waiting reports whether some task waits for a vCPU.
func (k *Kernelet) Waiting() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.waiting.Load() > 0
}

// Idle is the number of free vCPUs.
func (k *Kernelet) Idle() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, v := range k.vcpus {
		if v.free() && !v.retiring {
			n++
		}
	}
	return n
}

// Crowded reports, without the lock, whether more tasks want the vCPUs than there are: some wait
// for one, or take turns in a ring. A hint: it may be stale by the time it is used.
func (k *Kernelet) Crowded() bool { return k.waiting.Load() > 0 || k.ringOpen.Load() }

// Stats is a snapshot of the kernelet. Waiting counts parked tasks too; Parked counts only them.
type Stats struct {
	VCPUs, Held, Lent, Waiting, Tasks, Parked int
}

// Stats returns how many vCPUs are held, lent as spares, and how many tasks wait (and of them,
// how many wait parked).
func (k *Kernelet) Stats() Stats {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := Stats{VCPUs: k.n, Waiting: int(k.waiting.Load()), Tasks: k.tasks}
	for _, v := range k.vcpus {
		if v.holder != nil || v.ring {
			s.Held++
		}
		if v.lent {
			s.Lent++
		}
		for _, t := range v.queue {
			if t.parked {
				s.Parked++
			}
		}
	}
	return s
}

// Parked reports whether the task waits parked (it has not been given a vCPU since it parked,
// and its carrier has not called Acquire).
func (t *Task) Parked() bool {
	t.k.mu.Lock()
	defer t.k.mu.Unlock()
	return t.parked
}

// grantBox hands a vCPU to the carrier that waits for it. The carrier sleeps on a host futex of
// its own (park.Parker): a Go channel would make the runtime hand a P to the carrier's locked
// thread, which costs tens of µs more on a paravirtualised host, on every hand-over of a vCPU.
type grantBox struct {
	v atomic.Pointer[VCPU]
	p park.Parker
}

// post leaves v for the carrier and wakes it; a vCPU already waiting there stays (k.mu held:
// give posts only to a task that waits, once).
func (g *grantBox) post(v *VCPU) {
	if g.v.CompareAndSwap(nil, v) {
		g.p.Wake()
	}
}

// take waits for a posted vCPU and takes it.
func (g *grantBox) take() (v *VCPU) {
	g.p.Until(func() bool { v = g.v.Swap(nil); return v != nil })
	return v
}
