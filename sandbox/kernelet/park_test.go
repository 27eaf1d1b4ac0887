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

// runCall is one OnRun call as the hook saw it.
type runCall struct {
	t      *Task
	v      *VCPU
	locked bool  // the kernelet's lock was held during the call
	stats  Stats // k.Stats() from inside the hook
}

// runLog records the OnRun calls of k.
type runLog struct {
	mu    sync.Mutex
	calls []runCall
}

func logRuns(k *Kernelet) *runLog {
	l := &runLog{}
	k.OnRun(func(t *Task, v *VCPU) {
		c := runCall{t: t, v: v}
		// Only the caller's goroutine runs here in these tests, so a failed TryLock means the
		// hook was called under the lock (k.Stats() would then deadlock: skip it).
		if k.mu.TryLock() {
			k.mu.Unlock()
			c.stats = k.Stats()
		} else {
			c.locked = true
		}
		l.mu.Lock()
		l.calls = append(l.calls, c)
		l.mu.Unlock()
	})
	return l
}

func (l *runLog) get() []runCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]runCall(nil), l.calls...)
}

// acquireNow calls Acquire and fails if it does not return promptly.
func acquireNow(t *testing.T, task *Task) *VCPU {
	t.Helper()
	got := make(chan *VCPU, 1)
	go func() { got <- task.Acquire() }()
	return within(t, got)
}

// parkBehind makes p (holding a vCPU) park behind a waiting w after a slice: it returns the vCPU,
// which w now holds.
func parkBehind(t *testing.T, k *Kernelet, now *atomic.Int64, p, w *Task) *VCPU {
	t.Helper()
	gotW := acquireAsync(t, k, w)
	now.Add(int64(Slice))
	parks := 0
	require.True(t, p.PreemptedPark(func() { parks++ }))
	require.Equal(t, 1, parks)
	v := <-gotW
	require.True(t, p.Parked())
	return v
}

// A task preempted in tenant code parks: its vCPU goes to the waiter and it returns at once;
// when the vCPU comes free, OnRun (outside the lock) resumes it, and no grant is left behind.
func TestPreemptedPark(t *testing.T) {
	k, now := clockedK(t, 1)
	runs := logRuns(k)
	a, b := k.NewTask("a"), k.NewTask("b")
	var gaveWay atomic.Int32
	a.OnGiveWay = func() { gaveWay.Add(1) }
	v := a.Acquire()
	gotB := acquireAsync(t, k, b)

	parks := 0
	park := func() {
		require.False(t, k.mu.TryLock(), "park runs under the kernelet's lock")
		parks++
	}
	require.False(t, a.PreemptedPark(park), "an equal that has not waited a slice gets nothing")
	require.Zero(t, parks)
	require.Zero(t, gaveWay.Load())

	now.Add(int64(Slice))
	k.mu.Lock()
	vr := a.vr
	k.mu.Unlock()
	require.True(t, a.PreemptedPark(park))
	require.Equal(t, 1, parks)
	require.Equal(t, int32(1), gaveWay.Load(), "OnGiveWay, as in every give-way")
	require.Same(t, v, <-gotB)
	require.True(t, a.Parked())
	k.mu.Lock()
	require.Nil(t, a.vcpu)
	require.Same(t, b, v.holder)
	require.Equal(t, vr+int64(Slice), a.vr, "charged for its slice, as Preempted charges")
	k.mu.Unlock()
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Waiting: 1, Parked: 1, Tasks: 2}, k.Stats())
	require.Empty(t, runs.get())

	now.Add(int64(time.Millisecond))
	b.Release()
	calls := runs.get()
	require.Len(t, calls, 1)
	require.Same(t, a, calls[0].t)
	require.Same(t, v, calls[0].v)
	require.False(t, calls[0].locked, "OnRun is called without the lock")
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Tasks: 2}, calls[0].stats, "after the state change")
	require.False(t, a.Parked())
	k.mu.Lock()
	require.Same(t, v, a.vcpu)
	require.Same(t, a, v.holder)
	require.Equal(t, vr+int64(Slice), a.vr, "a preempted task gets no sleeper credit")
	require.Nil(t, a.grant.v.Load(), "nothing posted for a parked task")
	k.mu.Unlock()

	// Its thread traps after all: Acquire returns the vCPU it was given, at once.
	require.Same(t, v, acquireNow(t, a))
	require.Len(t, runs.get(), 1)
	a.Exit()
	b.Exit()
	require.Equal(t, Stats{VCPUs: 1}, k.Stats())
	require.Len(t, runs.get(), 1)
}

// A yield parks as a preemption does, but by Yield's rule: an equal that waits gets the vCPU at
// once (no slice need have passed), and the yielder goes behind every waiting equal.
func TestYieldPark(t *testing.T) {
	k, now := clockedK(t, 1)
	runs := logRuns(k)
	a, b, c := k.NewTask("a"), k.NewTask("b"), k.NewTask("c")
	parks := 0
	park := func() {
		require.False(t, k.mu.TryLock(), "park runs under the kernelet's lock")
		parks++
	}
	v := a.Acquire()
	require.False(t, a.YieldPark(park), "nobody waits: the yielder keeps its vCPU")
	require.Zero(t, parks)

	gotB := acquireAsync(t, k, b)
	gotC := acquireAsync(t, k, c)
	now.Add(int64(time.Microsecond)) // far less than a slice
	require.True(t, a.YieldPark(park))
	require.Equal(t, 1, parks)
	var first, second *Task
	select {
	case <-gotB:
		first, second = b, c
	case <-gotC:
		first, second = c, b
	case <-time.After(5 * time.Second):
		t.Fatal("no waiter got the vCPU")
	}
	require.True(t, a.Parked())
	k.mu.Lock()
	require.Same(t, first, v.holder)
	require.Greater(t, a.vr, second.vr, "behind every waiting equal")
	k.mu.Unlock()

	// The other waiter runs before the yielder, whose OnRun comes only after it.
	first.Release()
	if second == b {
		<-gotB
	} else {
		<-gotC
	}
	require.Empty(t, runs.get())
	second.Release()
	calls := runs.get()
	require.Len(t, calls, 1)
	require.Same(t, a, calls[0].t)
	require.Same(t, v, acquireNow(t, a))
	a.Exit()
	b.Exit()
	c.Exit()
	require.Equal(t, Stats{VCPUs: 1}, k.Stats())

	// Without an OnRun hook it yields as Yield does, waiting, and reports false.
	k = newK(t, 1)
	a, b = k.NewTask("a"), k.NewTask("b")
	v = a.Acquire()
	gotB = acquireAsync(t, k, b)
	waitFor(t, func() bool { return k.Stats().Waiting == 1 })
	done := make(chan bool)
	go func() { done <- a.YieldPark(park) }()
	require.Same(t, v, <-gotB)
	b.Release()
	require.False(t, <-done)
	require.Equal(t, 1, parks, "no hook: nothing parked")
	a.Exit()
	b.Exit()
}

// With nobody to give way to, PreemptedPark keeps the vCPU and parks nothing; without an OnRun
// hook it never parks but gives way as Preempted does.
func TestPreemptedParkKeeps(t *testing.T) {
	k, now := clockedK(t, 1)
	runs := logRuns(k)
	a := k.NewTask("a")
	v := a.Acquire()
	now.Add(10 * int64(Slice))
	parks := 0
	require.False(t, a.PreemptedPark(func() { parks++ }))
	require.Zero(t, parks)
	require.False(t, a.Parked())
	require.Same(t, v, acquireNow(t, a), "it still holds its vCPU")
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Tasks: 1}, k.Stats())
	a.Exit()
	require.Empty(t, runs.get())

	k = newK(t, 1)
	k.clock = now.Load
	a, b := k.NewTask("a"), k.NewTask("b")
	v = a.Acquire()
	gotB := acquireAsync(t, k, b)
	now.Add(int64(Slice))
	done := make(chan bool)
	go func() { done <- a.PreemptedPark(func() { parks++ }) }()
	require.Same(t, v, <-gotB)
	waitFor(t, func() bool { return k.Stats().Waiting == 1 })
	require.False(t, a.Parked(), "no hook: it waits as a normal waiter")
	b.Release()
	require.False(t, <-done, "it holds its vCPU again, as if it had not given way")
	require.Zero(t, parks)
	k.mu.Lock()
	require.Same(t, v, a.vcpu)
	k.mu.Unlock()
	a.Exit()
	b.Exit()
}

// Overdue hands a holder running tenant code over to a parked successor itself (a Switch, no
// OnRun); a holder not in tenant code is only due.
func TestOverdueSwitch(t *testing.T) {
	k, now := clockedK(t, 1)
	runs := logRuns(k)
	p, a := k.NewTask("p"), k.NewTask("a")
	var aGaveWay atomic.Int32
	a.OnGiveWay = func() { aGaveWay.Add(1) }
	p.Acquire()
	v := parkBehind(t, k, now, p, a)

	now.Add(int64(Slice))
	due, sw, waiting := k.Overdue()
	require.Equal(t, []*Task{a}, due, "not in tenant code: the kernel kicks it")
	require.Empty(t, sw)
	require.True(t, waiting)
	require.True(t, p.Parked())

	a.InTenant.Store(true)
	due, sw, waiting = k.Overdue()
	require.Empty(t, due)
	require.Equal(t, []Switch{{From: a, To: p, V: v}}, sw)
	require.True(t, waiting)
	require.True(t, a.Parked())
	require.False(t, p.Parked())
	require.Equal(t, int32(1), aGaveWay.Load())
	k.mu.Lock()
	require.Same(t, p, v.holder)
	require.Same(t, v, p.vcpu)
	require.Nil(t, a.vcpu)
	require.Same(t, v, a.queued)
	require.Nil(t, p.grant.v.Load())
	require.Nil(t, a.grant.v.Load())
	k.mu.Unlock()
	require.Empty(t, runs.get(), "the Switch carries the hand-over: no OnRun")
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Waiting: 1, Parked: 1, Tasks: 2}, k.Stats())

	due, sw, _ = k.Overdue()
	require.Empty(t, due, "p has not run its slice")
	require.Empty(t, sw)

	p.Exit()
	calls := runs.get()
	require.Len(t, calls, 1)
	require.Same(t, a, calls[0].t)
	require.Same(t, v, calls[0].v)
	a.Exit()
	require.Equal(t, Stats{VCPUs: 1}, k.Stats())
}

// A task switched out by Overdue is not switched in elsewhere by the same call (its registers
// are not parked until the kernel has carried out the first switch): the next call does it.
func TestOverdueSwitchNotChained(t *testing.T) {
	k, now := clockedK(t, 2)
	logRuns(k)
	p, h0, h1 := k.NewTask("p"), k.NewTask("h0"), k.NewTask("h1")
	require.True(t, p.SetAffinity(CPUSetOf(0), false))
	require.Equal(t, 0, p.Acquire().ID)
	v1 := h1.Acquire()
	require.Equal(t, 1, v1.ID)
	v0 := parkBehind(t, k, now, p, h0)
	require.Equal(t, 0, v0.ID)
	h0.InTenant.Store(true)
	h1.InTenant.Store(true)

	now.Add(int64(Slice))
	due, sw, _ := k.Overdue()
	require.Empty(t, due)
	require.Equal(t, []Switch{{From: h0, To: p, V: v0}}, sw)
	k.mu.Lock()
	require.Same(t, h1, v1.holder, "h1's successor would be h0, just switched out")
	k.mu.Unlock()

	due, sw, _ = k.Overdue()
	require.Empty(t, due)
	require.Equal(t, []Switch{{From: h1, To: h0, V: v1}}, sw)
	exitAll(t, k, p, h0, h1)
}

// A parked task whose thread traps before it is given a vCPU waits on its grant as any waiter;
// it keeps its place, gets the vCPU when the holder lets go, and no OnRun comes.
func TestParkedAcquireFirst(t *testing.T) {
	k, now := clockedK(t, 1)
	runs := logRuns(k)
	p, a := k.NewTask("p"), k.NewTask("a")
	p.Acquire()
	v := parkBehind(t, k, now, p, a)

	got := make(chan *VCPU, 1)
	go func() { got <- p.Acquire() }()
	waitFor(t, func() bool { return !p.Parked() })
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Waiting: 1, Tasks: 2}, k.Stats(), "still in its queue")
	select {
	case <-got:
		t.Fatal("Acquire returned a vCPU the task does not hold")
	case <-time.After(20 * time.Millisecond):
	}
	a.Release()
	require.Same(t, v, <-got)
	require.Empty(t, runs.get())

	// Nothing stale is left in p's grant: its next wait gets only what it is given.
	p.Release()
	require.Same(t, v, a.Acquire())
	gotP := acquireAsync(t, k, p)
	select {
	case <-gotP:
		t.Fatal("Acquire returned a vCPU the task does not hold")
	case <-time.After(20 * time.Millisecond):
	}
	a.Release()
	require.Same(t, v, <-gotP)
	p.Exit()
	a.Exit()
	require.Empty(t, runs.get())
}

// A parked task that exits (or releases, as a trapped thread about to block does) leaves its run
// queue; the vCPU then goes to nobody.
func TestParkedLeaves(t *testing.T) {
	k, now := clockedK(t, 1)
	runs := logRuns(k)
	p, q, a := k.NewTask("p"), k.NewTask("q"), k.NewTask("a")
	p.Acquire()
	parkBehind(t, k, now, p, q)
	q.InTenant.Store(true)
	now.Add(int64(Slice))
	_, sw, _ := k.Overdue()
	require.Len(t, sw, 1, "p takes over from q")
	gotA := acquireAsync(t, k, a)
	p.Release()
	v := <-gotA // a, new and so ahead of q in virtual runtime
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Waiting: 1, Parked: 1, Tasks: 3}, k.Stats())
	require.True(t, q.Parked())

	q.Exit()
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Tasks: 2}, k.Stats())
	require.False(t, q.Parked())
	a.Release()
	require.Equal(t, 1, k.Idle())
	require.Empty(t, runs.get())

	// Release by a parked task (its thread trapped and is about to block): it leaves its queue,
	// and comes back later as any sleeper does.
	require.Same(t, v, p.Acquire())
	parkBehind(t, k, now, p, a)
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Waiting: 1, Parked: 1, Tasks: 2}, k.Stats())
	p.Release()
	require.False(t, p.Parked())
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Tasks: 2}, k.Stats())
	a.Release()
	require.Equal(t, 1, k.Idle())
	require.Same(t, v, acquireNow(t, p))
	require.Empty(t, runs.get())
	p.Exit()
	a.Exit()
	require.Equal(t, Stats{VCPUs: 1}, k.Stats())
}

// Parking, OnRun, raced traps, yields and releases churn on two vCPUs: never more holders than
// vCPUs, a task resumed by OnRun always holds the vCPU it was given, and no resume is lost or
// doubled.
func TestParkUnderLoad(t *testing.T) {
	k := newK(t, 2)
	var now atomic.Int64
	k.clock = func() int64 { return now.Add(int64(50 * time.Microsecond)) }
	type ptask struct {
		kt     *Task
		ctx    atomic.Bool // its registers are parked
		resume chan *VCPU
	}
	var bad atomic.Int32
	k.OnRun(func(x *Task, v *VCPU) {
		pt := x.Owner.(*ptask)
		if !pt.ctx.CompareAndSwap(true, false) {
			return // its own thread trapped and took the context
		}
		select {
		case pt.resume <- v:
		default:
			bad.Add(1) // a second resume
		}
	})
	var holders, most atomic.Int32
	hold := func() {
		n := holders.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		runtime.Gosched()
		holders.Add(-1)
	}
	stop := make(chan struct{})
	var ticker sync.WaitGroup
	ticker.Add(1)
	go func() {
		defer ticker.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, sw, _ := k.Overdue()
			if len(sw) != 0 {
				bad.Add(1) // nobody is in tenant code
			}
			runtime.Gosched()
		}
	}()
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		pt := &ptask{resume: make(chan *VCPU, 1)}
		pt.kt = k.NewTask(pt)
		if i%4 == 0 {
			pt.kt.SetNice(5, false)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(i)))
			kt := pt.kt
			kt.Acquire()
			for j := 0; j < 300; j++ {
				hold()
				switch r.Intn(6) {
				case 0:
					kt.Release()
					kt.Acquire()
				case 1:
					kt.Yield()
				case 2:
					kt.Preempted()
				default:
					if !kt.PreemptedPark(func() { pt.ctx.Store(true) }) {
						continue
					}
					if r.Intn(3) == 0 && pt.ctx.CompareAndSwap(true, false) {
						kt.Acquire() // its thread trapped after all
						continue
					}
					v := <-pt.resume
					k.mu.Lock()
					if kt.vcpu != v || v.holder != kt {
						bad.Add(1)
					}
					k.mu.Unlock()
				}
			}
			kt.Exit()
		}()
	}
	wg.Wait()
	close(stop)
	ticker.Wait()
	require.Zero(t, bad.Load())
	require.LessOrEqual(t, most.Load(), int32(2))
	require.Equal(t, Stats{VCPUs: 2}, k.Stats())
	require.Equal(t, 2, k.Idle())
}

// A new task that must wait parks (AcquireOrPark returns nil at once) and is run by OnRun when a
// vCPU comes free; one that finds a free vCPU takes it and parks nothing. Only a new task parks.
func TestNewTaskWaitsParked(t *testing.T) {
	k, _ := clockedK(t, 1)
	runs := logRuns(k)
	a, b := k.NewTask("a"), k.NewTask("b")
	parks := 0
	park := func() bool { parks++; return true }
	v := acquireNow(t, a)
	require.Same(t, v, a.AcquireOrPark(park), "a holds its vCPU: no park")
	require.Zero(t, parks)

	require.Nil(t, b.AcquireOrPark(park))
	require.Equal(t, 1, parks)
	require.True(t, b.Parked())
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Waiting: 1, Parked: 1, Tasks: 2}, k.Stats())

	a.Release()
	calls := runs.get()
	require.Len(t, calls, 1)
	require.Same(t, b, calls[0].t)
	require.Same(t, v, calls[0].v)
	require.False(t, b.Parked())

	b.Release()
	require.Same(t, v, acquireNow(t, a))
	got := make(chan *VCPU, 1)
	go func() { got <- b.AcquireOrPark(park) }()
	waitFor(t, func() bool { return k.Stats().Waiting == 1 })
	require.Equal(t, 1, parks, "b has run before: it waits as any waiter")
	a.Release()
	require.Same(t, v, <-got)
	exitAll(t, k, a, b)
}

// At a slice's end a holder hands its vCPU to its best kin (OnKin: a thread of its own process)
// rather than to a better waiter, while the kin is at most kinGrace behind that waiter; further
// behind, the better waiter gets it. Real-time order is not bent.
func TestOverdueSwitchPrefersKin(t *testing.T) {
	for _, tc := range []struct {
		name   string
		behind int64 // how far the kin's virtual runtime is behind the better waiter's
		policy Policy
		want   string
	}{
		{"kin within the grace", kinGrace / 2, Other, "a2"},
		{"kin just within", kinGrace, Other, "a2"},
		{"kin beyond the grace", kinGrace + 1, Other, "b1"},
		{"real time: strict order", kinGrace / 2, RR, "b1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, now := clockedK(t, 1)
			logRuns(k)
			k.OnKin(func(x, y *Task) bool { return x.Owner.(string)[0] == y.Owner.(string)[0] })
			a1, b1, a2 := k.NewTask("a1"), k.NewTask("b1"), k.NewTask("a2")
			a2.Acquire()
			parkBehind(t, k, now, a2, b1)
			v := parkBehind(t, k, now, b1, a1) // a1 holds; a2 and b1 wait parked
			const x = int64(time.Second)
			k.mu.Lock()
			b1.vr, a2.vr, a1.vr = x, x+tc.behind, x+2*kinGrace
			if tc.policy.RealTime() {
				for _, t := range []*Task{a1, b1, a2} {
					t.policy, t.rtprio = tc.policy, 1
				}
				b1.seq, a2.seq = 1, 2 // b1 first among equals
			}
			k.mu.Unlock()

			now.Add(int64(Slice))
			a1.InTenant.Store(true)
			due, sw, _ := k.Overdue()
			require.Empty(t, due)
			require.Len(t, sw, 1)
			require.Same(t, a1, sw[0].From)
			require.Same(t, v, sw[0].V)
			require.Equal(t, tc.want, sw[0].To.Owner)
			exitAll(t, k, a1, b1, a2)
		})
	}
}
