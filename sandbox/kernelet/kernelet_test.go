package kernelet

import (
	"math/rand"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newK(t *testing.T, n int) *Kernelet {
	t.Helper()
	k, err := New(n)
	require.NoError(t, err)
	return k
}

// clockedK is newK with a clock the test moves.
func clockedK(t *testing.T, n int) (*Kernelet, *atomic.Int64) {
	t.Helper()
	k := newK(t, n)
	now := new(atomic.Int64)
	k.clock = now.Load
	return k, now
}

// exitAll ends the tasks and checks that the kernelet holds nothing but its vCPUs then.
func exitAll(t *testing.T, k *Kernelet, ts ...*Task) {
	t.Helper()
	for _, x := range ts {
		x.Exit()
	}
	require.Equal(t, Stats{VCPUs: k.N()}, k.Stats())
}

// within receives from ch, failing if nothing comes in two seconds.
func within(t *testing.T, ch chan *VCPU) *VCPU {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(2 * time.Second):
		t.Fatal("no vCPU came in time (Acquire blocked)")
		return nil
	}
}

// waitFor spins until cond holds (the other goroutines queue themselves), failing after a while.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "condition never held")
		runtime.Gosched()
	}
}

func waiting(k *Kernelet) func() bool {
	n := k.Stats().Waiting
	return func() bool { return k.Stats().Waiting > n }
}

// acquireAsync starts t's Acquire in a goroutine once the kernelet shows it queued; the channel
// gets the vCPU when it is granted.
func acquireAsync(t *testing.T, k *Kernelet, task *Task) chan *VCPU {
	t.Helper()
	more := waiting(k)
	got := make(chan *VCPU, 1)
	go func() { got <- task.Acquire() }()
	waitFor(t, more)
	return got
}

func TestNeverMoreHoldersThanVCPUs(t *testing.T) {
	k := newK(t, 2)
	var holders, most atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		task := k.NewTask(i)
		if i%5 == 0 {
			task.SetNice(i%20, false)
		}
		if i%7 == 0 {
			task.SetPolicy(RR, 1+i%3, false)
		}
		if i%11 == 0 {
			task.SetAffinity(CPUSetOf(i%2), false)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(i)))
			task.Acquire()
			for j := 0; j < 200; j++ {
				n := holders.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				runtime.Gosched()
				holders.Add(-1)
				switch r.Intn(4) {
				case 0:
					task.Release()
					task.Acquire()
				case 1:
					task.Yield()
				case 2:
					task.Preempted()
				case 3:
					if task.SpinSpare(true) {
						runtime.Gosched()
						switch r.Intn(3) {
						case 0:
							task.ReturnSpare()
						case 1:
							task.Yield() // gives the spare back too when it gives way
						case 2:
							task.Preempted()
						}
					}
				}
			}
			task.Exit()
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, most.Load(), int32(2))
	require.GreaterOrEqual(t, most.Load(), int32(1))
	require.Equal(t, Stats{VCPUs: 2}, k.Stats())
	require.Equal(t, 2, k.Idle())
}

// A freed vCPU goes to real-time tasks by priority, then ordinary ones by least virtual
// runtime, then idle ones.
func TestOrder(t *testing.T) {
	k := newK(t, 1)
	h := k.NewTask("holder")
	h.Acquire()
	var order []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	add := func(name string, setup func(*Task)) {
		task := k.NewTask(name)
		setup(task)
		got := acquireAsync(t, k, task)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-got
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			task.Exit()
		}()
	}
	add("idle", func(x *Task) { x.SetPolicy(Idle, 0, false) })
	add("other-late", func(x *Task) { x.vr = k.minVr + int64(time.Second) })
	add("other-early", func(x *Task) {})
	add("fifo10", func(x *Task) { x.SetPolicy(FIFO, 10, false) })
	add("rr50", func(x *Task) { x.SetPolicy(RR, 50, false) })
	add("fifo10-second", func(x *Task) { x.SetPolicy(FIFO, 10, false) })
	h.Exit()
	wg.Wait()
	require.Equal(t, []string{"rr50", "fifo10", "fifo10-second", "other-early", "other-late", "idle"}, order)
}

// A vCPU that comes free with nothing queued for it takes a task queued on another; a task
// never runs on a vCPU outside its affinity.
func TestStealingAndAffinity(t *testing.T) {
	k := newK(t, 2)
	h0, h1 := k.NewTask("h0"), k.NewTask("h1")
	require.Equal(t, 0, h0.Acquire().ID)
	require.Equal(t, 1, h1.Acquire().ID)
	w := k.NewTask("w")
	got := acquireAsync(t, k, w)
	k.mu.Lock()
	queuedOn := w.queued.ID
	k.mu.Unlock()
	other := h0
	if queuedOn == 0 {
		other = h1
	}
	other.Release()
	v := <-got
	require.NotEqual(t, queuedOn, v.ID, "stolen by the other vCPU")
	w.Exit()
	other.Acquire()

	// Pinned to vCPU 1: a free vCPU 0 does not serve it.
	require.False(t, w.SetAffinity(CPUSetOf(5, 7), false), "a mask without any of the sandbox's vCPUs")
	require.True(t, w.SetAffinity(CPUSetOf(1, 9), false))
	require.Equal(t, CPUSetOf(1), w.Affinity())
	got = acquireAsync(t, k, w)
	h0.Release()
	select {
	case v := <-got:
		t.Fatalf("pinned task ran on vCPU %d", v.ID)
	case <-time.After(20 * time.Millisecond):
	}
	require.Equal(t, 1, k.Idle())
	h1.Release()
	require.Equal(t, 1, (<-got).ID)
	require.True(t, w.SetAffinity(CPUSetOf(0, 1), false))
	require.Equal(t, CPUSetOf(0, 1), w.Affinity())
}

// A waking task of a higher rank kicks the holder of its vCPU; the kicked holder gives way in
// Preempted. A waking equal does not kick.
func TestKick(t *testing.T) {
	k := newK(t, 1)
	kicked := make(chan *Task, 10)
	k.OnKick(func(x *Task) { kicked <- x })
	h := k.NewTask("holder")
	h.Acquire()

	eq := k.NewTask("equal")
	gotEq := acquireAsync(t, k, eq)
	require.Empty(t, kicked, "an equal waits for the slice's end")
	require.False(t, h.Preempted(), "an equal that has not waited a slice gets nothing")

	rt := k.NewTask("rt")
	rt.SetPolicy(FIFO, 1, false)
	gotRT := acquireAsync(t, k, rt)
	require.Equal(t, h, <-kicked)
	done := make(chan bool)
	go func() { done <- h.Preempted() }()
	<-gotRT
	// The FIFO task runs until it lets go: nothing slices it, not even after its slice.
	k.mu.Lock()
	rt.got -= int64(10 * Slice)
	k.mu.Unlock()
	due, _, wait := k.Overdue()
	require.Empty(t, due)
	require.True(t, wait)
	rt.Exit()
	require.True(t, <-done, "the holder, ahead of the new task (which starts behind), runs again")
	h.Release()
	v := <-gotEq
	require.Equal(t, 0, v.ID)
	eq.Exit()

	// An idle-policy holder gives way to an ordinary task at once.
	h.SetPolicy(Idle, 0, true)
	h.Acquire()
	o := k.NewTask("other")
	gotO := acquireAsync(t, k, o)
	require.Equal(t, h, <-kicked)
	go func() { done <- h.Preempted() }()
	<-gotO
	o.Exit()
	require.True(t, <-done)
	h.Exit()
}

// The time slice: a holder is overdue when an equal has waited a slice; an RR holder among equal
// RR tasks too; a FIFO holder never by an equal.
func TestOverdue(t *testing.T) {
	k, now := clockedK(t, 1)
	h := k.NewTask("h")
	h.Acquire()
	due, _, wait := k.Overdue()
	require.Empty(t, due)
	require.False(t, wait)
	w := k.NewTask("w")
	gotW := acquireAsync(t, k, w)
	due, _, wait = k.Overdue()
	require.Empty(t, due)
	require.True(t, wait)
	now.Add(int64(Slice))
	due, _, _ = k.Overdue()
	require.Equal(t, []*Task{h}, due)
	done := make(chan bool)
	go func() { done <- h.Preempted() }()
	<-gotW
	now.Add(int64(Slice) / 2)
	due, _, _ = k.Overdue()
	require.Empty(t, due, "the new holder has not run its slice")
	w.Exit()
	require.True(t, <-done)

	for _, c := range []struct {
		p   Policy
		due bool
	}{{RR, true}, {FIFO, false}} {
		h.SetPolicy(c.p, 5, true)
		w.SetPolicy(c.p, 5, false)
		gotW = acquireAsync(t, k, w)
		now.Add(2 * int64(Slice))
		due, _, _ = k.Overdue()
		require.Equal(t, c.due, len(due) == 1, "%v", c.p)
		if c.due {
			go func() { done <- h.Preempted() }()
			<-gotW
			w.Release()
			require.True(t, <-done)
		} else {
			require.False(t, h.Preempted())
			h.Release()
			<-gotW
			w.Release()
			h.Acquire()
		}
	}
}

// LookEvery: a holder whose slice ends before Overdue's next call is due at this one, but no
// earlier than half a slice in, whatever the caller says; kicked so, it gives way in Preempted.
func TestLookEvery(t *testing.T) {
	for _, c := range []struct {
		ran, ahead time.Duration
		due        bool
	}{
		{Slice / 2, Slice, true},
		{Slice/2 - 1, Slice, false},
		{Slice / 3, Slice / 2, false},
		{Slice - Slice/4, Slice / 4, true},
		{Slice - Slice/4 - 1, Slice / 4, false},
		{Slice / 4, 10 * Slice, false},
		{Slice - 1, 0, false},
	} {
		k, now := clockedK(t, 1)
		k.LookEvery(c.ahead)
		h, w := k.NewTask("h"), k.NewTask("w")
		h.Acquire()
		gotW := acquireAsync(t, k, w)
		// w is as far behind h as the slice's end alone lets it take over, not by the
		// granularity of a wake-up.
		k.mu.Lock()
		w.vr = h.vr + int64(c.ran) - int64(time.Millisecond)
		k.mu.Unlock()
		now.Add(int64(c.ran))
		due, _, _ := k.Overdue()
		require.Equal(t, c.due, len(due) == 1, "ran %v, ahead %v", c.ran, c.ahead)
		if c.due {
			gave := make(chan bool, 1)
			go func() { gave <- h.Preempted() }()
			within(t, gotW)
			w.Exit()
			require.True(t, <-gave, "ran %v, ahead %v: kicked, it kept its vCPU", c.ran, c.ahead)
			h.Exit()
			continue
		}
		h.Exit()
		<-gotW
		w.Exit()
	}
}

// A stretch on a vCPU far longer than a slice (its end came late) puts the task at most maxLead
// ahead of an equal that waited: that one runs, and then the late one again, not every other
// equal first for as long as the stretch was. A task that ran on because every waiter was ahead
// of it is charged in full, and a nice 19 task's lead is weighted as its runtime is.
func TestLongStretchLeadsWaitersByAtMostMaxLead(t *testing.T) {
	k, now := clockedK(t, 1)
	vr := func(x *Task) int64 {
		k.mu.Lock()
		defer k.mu.Unlock()
		return x.vr
	}
	late := k.NewTask("late")
	late.Acquire()
	w := k.NewTask("waiter")
	gotW := acquireAsync(t, k, w)
	waitFor(t, func() bool { return k.Stats().Waiting == 1 })
	now.Add(10 * int64(Slice)) // ten slices before the ticker saw it
	done := make(chan bool)
	go func() { done <- late.Preempted() }()
	<-gotW
	require.Equal(t, vr(w)+maxLead, vr(late))

	// The waiter is now far behind: it runs on, charged in full, until it is ahead.
	start := vr(w)
	now.Add(maxLead + int64(Slice))
	k.mu.Lock()
	w.charge(k.now())
	k.mu.Unlock()
	require.Equal(t, start+maxLead+int64(Slice), vr(w))
	w.Exit()
	require.True(t, <-done)

	// nice 19: a late stretch leads by maxLead at its weight (~68 times as much virtual time).
	w = k.NewTask("waiter")
	gotW = acquireAsync(t, k, w)
	waitFor(t, func() bool { return k.Stats().Waiting == 1 })
	late.SetNice(19, false)
	k.mu.Lock()
	late.vr = w.vr
	k.mu.Unlock()
	now.Add(10 * int64(Slice))
	go func() { done <- late.Preempted() }()
	<-gotW
	require.Equal(t, vr(w)+maxLead*nice0Weight/Weight(19), vr(late))
	w.Exit()
	require.True(t, <-done)
	late.Exit()
}

// Nice: an ordinary holder far ahead in virtual runtime (a nice 19 task runs its share ~68 times
// faster) is kicked by a nice 0 task that wakes.
func TestNiceWeights(t *testing.T) {
	require.Equal(t, int64(1024), Weight(0))
	require.InDelta(t, 15, Weight(19), 1)
	require.InDelta(t, 1024*1.25, Weight(-1), 1)
	require.Equal(t, Weight(-20), Weight(-40))

	k, now := clockedK(t, 1)
	kicked := make(chan *Task, 4)
	k.OnKick(func(x *Task) { kicked <- x })
	hi := k.NewTask("nice0")
	hi.Acquire() // it has run (a new task would wait its turn), and now sleeps
	hi.Release()
	low := k.NewTask("nice19")
	low.SetNice(19, false)
	low.Acquire()
	now.Add(int64(time.Millisecond)) // 1 ms at nice 19 is ~68 ms of virtual runtime
	got := acquireAsync(t, k, hi)
	require.Equal(t, low, <-kicked)
	go low.Preempted()
	<-got
	hi.Exit()
	low.Exit()
}

// Yield gives the vCPU to a waiting equal and queues the caller behind it; with nobody waiting it
// returns at once.
func TestYield(t *testing.T) {
	k := newK(t, 1)
	a, b := k.NewTask("a"), k.NewTask("b")
	a.Acquire()
	require.False(t, a.Yield())
	gotB := acquireAsync(t, k, b)
	done := make(chan bool)
	go func() { done <- a.Yield() }()
	<-gotB
	waitFor(t, func() bool { return k.Stats().Waiting == 1 })
	b.Release()
	require.True(t, <-done)
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Tasks: 2}, k.Stats())
}

// A spare is lent only when nobody waits: a task that comes to want it takes it back at once,
// and its borrower is told to stop spinning (OnGiveWay) without a kick.
func TestSpare(t *testing.T) {
	k := newK(t, 2)
	kicked := make(chan *Task, 4)
	k.OnKick(func(x *Task) { kicked <- x })
	a := k.NewTask("a")
	var stopped atomic.Bool
	a.OnGiveWay = func() { stopped.Store(true) }
	a.Acquire()
	require.True(t, a.BorrowSpare())
	require.True(t, a.SpareHeld.Load())
	require.False(t, a.SpareWanted())
	require.Equal(t, 0, k.Idle())
	b := k.NewTask("b")
	vb := b.Acquire()
	require.NotNil(t, vb, "b got the spare back from a at once")
	require.False(t, a.SpareHeld.Load())
	require.False(t, a.HasSpare())
	require.True(t, stopped.Load(), "a's spinning was stopped")
	require.Empty(t, kicked)
	a.ReturnSpare() // nothing left to return: harmless
	require.False(t, a.BorrowSpare(), "no free vCPU")
	require.Nil(t, k.TryAcquire())
	b.Exit()
	v := k.TryAcquire()
	require.NotNil(t, v)
	k.Release(v)
	a.Exit()
	require.Equal(t, 2, k.Idle())
}

func TestResizeWithWaiters(t *testing.T) {
	k := newK(t, 1)
	h := k.NewTask("h")
	h.Acquire()
	var gots []chan *VCPU
	var ws []*Task
	for i := 0; i < 3; i++ {
		w := k.NewTask(i)
		ws = append(ws, w)
		gots = append(gots, acquireAsync(t, k, w))
	}
	require.NoError(t, k.Resize(3))
	require.Equal(t, 3, k.N())
	ids := map[int]bool{0: true}
	var served []int
	for i, got := range gots {
		select {
		case v := <-got:
			ids[v.ID] = true
			served = append(served, i)
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.Len(t, served, 2, "the two new vCPUs served two waiters at once")
	require.Len(t, ids, 3)

	// Shrink to one while three are held and one waits: the held ones beyond go when released,
	// and the waiter never gets a vCPU that went.
	require.NoError(t, k.Resize(1))
	require.Equal(t, 1, k.N())
	for _, i := range served {
		ws[i].Release()
	}
	require.Equal(t, 1, k.Stats().Held)
	h.Release()
	for i, got := range gots {
		if i != served[0] && i != served[1] {
			require.Equal(t, 0, (<-got).ID)
			ws[i].Release()
		}
	}
	require.Equal(t, 1, k.Idle())
	require.NotNil(t, k.TryAcquire())
	require.Nil(t, k.TryAcquire())
	require.Error(t, k.Resize(0))
	_, err := New(0)
	require.Error(t, err)
}

// Resizing while tasks churn never lets more tasks hold vCPUs than there are.
func TestResizeUnderLoad(t *testing.T) {
	k := newK(t, 2)
	var holders, over atomic.Int32
	var limit atomic.Int32
	limit.Store(4)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := 0; i < 20; i++ {
		task := k.NewTask(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					task.Exit()
					return
				default:
				}
				task.Acquire()
				if n := holders.Add(1); n > limit.Load() {
					over.Add(1)
				}
				runtime.Gosched()
				holders.Add(-1)
				task.Release()
			}
		}()
	}
	for _, n := range []int{4, 1, 3, 2, 4} {
		if int32(n) > limit.Load() {
			// Growing: the new vCPUs serve waiters at once, so the limit goes up first.
			limit.Store(int32(n))
			require.NoError(t, k.Resize(n))
		} else {
			// Shrinking: the old, larger count holds until the retiring vCPUs are released
			// (Held <= n is not enough: a retiring vCPU may be held while a live one is free).
			require.NoError(t, k.Resize(n))
			waitFor(t, func() bool {
				k.mu.Lock()
				defer k.mu.Unlock()
				return len(k.vcpus) <= n
			})
			limit.Store(int32(n))
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	require.Zero(t, over.Load())
	require.Equal(t, 4, k.Idle())
}

// A task that gives way while it holds a spare: the spare and its own vCPU go to two different
// tasks (the waiter must not end up holding both).
func TestGiveWayWithSpare(t *testing.T) {
	k := newK(t, 3)
	a, b, c := k.NewTask("a"), k.NewTask("b"), k.NewTask("c")
	b.Acquire() // b has run: it is no newcomer when it comes back
	b.Release()
	c.Acquire()
	a.Acquire()
	require.True(t, a.SpinSpare(true))
	require.Equal(t, 0, k.Idle())
	yielded := make(chan bool)
	go func() { yielded <- a.Yield() }()
	select {
	case <-yielded:
	case <-time.After(2 * time.Second):
		t.Fatal("the yielding task never got a vCPU back")
	}
	vb := b.Acquire() // the spare a gave back with its own vCPU
	require.Equal(t, Stats{VCPUs: 3, Held: 3, Tasks: 3}, k.Stats())
	k.mu.Lock()
	require.NotNil(t, a.vcpu)
	require.NotEqual(t, a.vcpu.ID, vb.ID)
	require.Same(t, b, vb.holder)
	require.Nil(t, a.spare)
	k.mu.Unlock()
	a.Exit()
	b.Exit()
	c.Exit()
	require.Equal(t, 3, k.Idle())
}

// A task woken by another (Wake) while its carrier sleeps is placed at once: with a vCPU free it
// gets it and its carrier is to be woken now; with none, it waits in a run queue and its
// carrier is woken (OnGrant) only when it is given one. Either way its own Acquire then returns
// that vCPU without waiting.
func TestWakeOfASleeperWakesItsCarrierWithAVCPU(t *testing.T) {
	k, now := clockedK(t, 1)
	a, b := k.NewTask("a"), k.NewTask("b")
	var grants atomic.Int32
	b.OnGrant = func() { grants.Add(1) }
	v := b.Acquire()
	b.Release() // b sleeps in the kernel

	require.True(t, b.Wake(), "a free vCPU: its carrier wakes now")
	require.Same(t, v, acquireNow(t, b))
	b.Release()

	require.Same(t, v, a.Acquire())
	now.Add(int64(Slice))
	g0 := grants.Load()
	require.False(t, b.Wake(), "every vCPU held: the carrier sleeps on")
	require.Equal(t, g0, grants.Load())
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Waiting: 1, Tasks: 2}, k.Stats())
	a.Release()
	require.Equal(t, g0+1, grants.Load(), "given the vCPU, its carrier is woken")
	require.Same(t, v, acquireNow(t, b))

	// A carrier woken before its vCPU came (a signal) waits for it as any waiter does.
	b.Release()
	require.Same(t, v, a.Acquire())
	now.Add(int64(Slice))
	require.False(t, b.Wake())
	got := make(chan *VCPU, 1)
	go func() { got <- b.Acquire() }()
	waitFor(t, func() bool { // its Acquire has taken over from the waker
		k.mu.Lock()
		defer k.mu.Unlock()
		return !b.woken
	})
	a.Release()
	require.Same(t, v, within(t, got))
	require.Equal(t, g0+1, grants.Load(), "no OnGrant once its carrier asked itself")
	exitAll(t, k, a, b)
}

// BeforeWait is called once, just before a task's carrier would sleep for a vCPU, and not when
// the task gets one at once: a creator holding the only vCPU waits on it for its new task.
func TestBeforeWaitOnlyWhenTheTaskMustWait(t *testing.T) {
	k := newK(t, 1)
	a, b := k.NewTask("a"), k.NewTask("b")
	calls := 0
	a.BeforeWait = func() { calls++ }
	require.NotNil(t, a.Acquire())
	require.Equal(t, 0, calls, "a got the free vCPU at once")
	a.BeforeWait = nil

	told := make(chan struct{})
	b.BeforeWait = func() { close(told) }
	got := make(chan *VCPU, 1)
	go func() { got <- b.Acquire() }()
	select {
	case <-told: // b's carrier is about to sleep, while a still holds the vCPU
	case <-time.After(2 * time.Second):
		t.Fatal("b waits for the vCPU but never said so")
	}
	require.Nil(t, b.BeforeWait, "called once, then cleared")
	a.Release()
	require.NotNil(t, within(t, got))
	exitAll(t, k, a, b)
}
