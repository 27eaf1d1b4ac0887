package kernelet

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func sameGroup(a, b *Task) bool { return a.Owner.(string)[0] == b.Owner.(string)[0] }

// stubRing plays the stub's side of a ring: which member each attached vCPU's runner holds, and
// the members parked in the stub's ring. rotate is what the runners' timers do.
type stubRing struct {
	on     map[*VCPU]*Task
	queue  []*Task
	shrunk []*VCPU
	closed int
}

func newStubRing(held, parked []*Task) *stubRing {
	s := &stubRing{on: map[*VCPU]*Task{}, queue: append([]*Task(nil), parked...)}
	for _, h := range held {
		s.on[h.vcpu] = h
	}
	return s
}

func (s *stubRing) Close(vcpus []*VCPU) []*Task {
	s.closed++
	out := make([]*Task, len(vcpus))
	for i, v := range vcpus {
		out[i] = s.on[v]
	}
	s.on, s.queue = map[*VCPU]*Task{}, nil
	return out
}

func (s *stubRing) Detach(t *Task) *VCPU {
	for v, x := range s.on {
		if x == t {
			delete(s.on, v)
			return v
		}
	}
	return nil
}

func (s *stubRing) Attach(t *Task, v *VCPU) bool { s.on[v] = t; return true }

func (s *stubRing) Park(t *Task) bool { s.queue = append(s.queue, t); return true }

func (s *stubRing) Grow(v *VCPU) *Task {
	if len(s.queue) == 0 {
		return nil
	}
	g := s.queue[0]
	s.queue = s.queue[1:]
	s.on[v] = g
	return g
}

func (s *stubRing) Shrink(v *VCPU) { s.shrunk = append(s.shrunk, v) }

// rotate is one slice of v's runner: its member goes to the queue's tail, the head comes.
func (s *stubRing) rotate(v *VCPU) {
	if len(s.queue) == 0 || s.on[v] == nil {
		return
	}
	cur := s.on[v]
	s.on[v], s.queue = s.queue[0], append(s.queue[1:], cur)
}

// allParkedButOne runs the tasks on the only vCPU, a slice each, until all have run and all but
// the holder wait parked; it returns the vCPU and the holder, in tenant code.
func allParkedButOne(t *testing.T, k *Kernelet, now interface{ Add(int64) int64 }, tasks ...*Task) (*VCPU, *Task) {
	t.Helper()
	v := tasks[0].Acquire()
	for _, x := range tasks[1:] {
		acquireAsync(t, k, x)
	}
	holder := func() *Task {
		k.mu.Lock()
		defer k.mu.Unlock()
		return v.holder
	}
	for i := 0; ; i++ {
		require.Less(t, i, 10*len(tasks), "the tasks do not all come to park")
		h := holder()
		done := true
		for _, x := range tasks {
			done = done && (x == h || x.Parked())
		}
		if done && i >= len(tasks) {
			h.InTenant.Store(true)
			return v, h
		}
		now.Add(int64(Slice))
		require.True(t, h.PreemptedPark(func() {}))
		waitFor(t, func() bool { return holder() != nil && holder() != h })
	}
}

// threeRing is a kernelet of one vCPU whose three equal tasks a ring of a stubRing holds.
type threeRing struct {
	k      *Kernelet
	now    *atomic.Int64
	tasks  []*Task
	v      *VCPU
	s      *stubRing
	holder *Task   // on the ring's runner
	parked []*Task // in the stub's ring, in the order they would run
}

// ringOfThree runs three tasks on the only vCPU until two wait parked (allParkedButOne), then
// hands them to a ring.
func ringOfThree(t *testing.T) *threeRing {
	t.Helper()
	k, now := clockedK(t, 1)
	logRuns(k)
	r := &threeRing{k: k, now: now, tasks: []*Task{k.NewTask("a1"), k.NewTask("a2"), k.NewTask("a3")}}
	r.v, r.holder = allParkedButOne(t, k, now, r.tasks...)
	require.True(t, k.Delegate(sameGroup, func(held []*Task, _ []*VCPU, p []*Task) (RingOps, bool) {
		r.s, r.parked = newStubRing(held, p), p
		return r.s, true
	}))
	return r
}

// With every vCPU held by a task in tenant code and only parked equals of its group waiting, the
// kernelet hands them to a ring: nothing waits for the ticker any more. A change of priority
// takes the ring back: each vCPU goes to the member its runner holds by then, and the others wait
// parked again, each charged a share of the ring's time.
func TestDelegateAndTakeBack(t *testing.T) {
	k, now := clockedK(t, 1)
	logRuns(k)
	a, b, c := k.NewTask("a1"), k.NewTask("a2"), k.NewTask("a3")
	// c waits for its first vCPU: it is no parked context, so no ring yet.
	a.Acquire()
	gotC := acquireAsync(t, k, c)
	a.InTenant.Store(true)
	opened := 0
	refuse := func(held []*Task, _ []*VCPU, parked []*Task) (RingOps, bool) { opened++; return nil, false }
	require.False(t, k.Delegate(sameGroup, refuse))
	require.Zero(t, opened, "a task that never ran waits")
	now.Add(int64(Slice))
	require.True(t, a.PreemptedPark(func() {}))
	<-gotC
	exitAll(t, k, a, b, c)

	k, now = clockedK(t, 1)
	logRuns(k)
	a, b, c = k.NewTask("a1"), k.NewTask("a2"), k.NewTask("a3")
	v, h := allParkedButOne(t, k, now, a, b, c)
	var s *stubRing
	var heldGot, parkedGot []*Task
	require.True(t, k.Delegate(sameGroup, func(held []*Task, _ []*VCPU, parked []*Task) (RingOps, bool) {
		heldGot, parkedGot = held, parked
		s = newStubRing(held, parked)
		return s, true
	}))
	require.Equal(t, []*Task{h}, heldGot)
	require.Len(t, parkedGot, 2)
	require.True(t, before(parkedGot[0], parkedGot[1]), "in the order they would run")
	_, _, waiting := k.Overdue()
	require.False(t, waiting, "the ring's tasks wait for no ticker")
	require.False(t, k.Delegate(sameGroup, refuse), "one ring at a time")
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Tasks: 3}, k.Stats())

	s.rotate(v) // the first parked runs, h waits in the stub's ring
	next := parkedGot[0]
	now.Add(3 * int64(Slice))
	require.Equal(t, RingStats{Opened: 1, Open: 3 * Slice}, k.RingStats(), "open so far")
	next.SetNice(0, false) // no change in value, but a call that may change ranks: the ring goes
	require.Equal(t, 1, s.closed)
	now.Add(int64(Slice))
	require.Equal(t, RingStats{Opened: 1, Closed: 1, Open: 3 * Slice}, k.RingStats())
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Waiting: 2, Parked: 2, Tasks: 3}, k.Stats())
	require.True(t, h.Parked())
	require.True(t, parkedGot[1].Parked())
	k.mu.Lock()
	require.Empty(t, k.delegated)
	require.Same(t, next, v.holder)
	require.False(t, v.ring)
	for _, x := range []*Task{a, b, c} {
		require.False(t, x.ringed)
		require.GreaterOrEqual(t, x.vr, int64(Slice), "each ran a share of the ring's time")
	}
	k.mu.Unlock()
	exitAll(t, k, a, b, c)
}

// A member that traps leaves the ring with its runner's vCPU, and the ring goes on (here with no
// vCPU: its members wait). Going back to tenant code it joins again; blocking, it gives the vCPU
// back to the ring with the next parked member.
func TestMemberLeavesAndJoins(t *testing.T) {
	k, now := clockedK(t, 1)
	logRuns(k)
	x, y, z := k.NewTask("a1"), k.NewTask("a2"), k.NewTask("a3")
	v, a := allParkedButOne(t, k, now, x, y, z)
	var s *stubRing
	var b, c *Task
	require.True(t, k.Delegate(sameGroup, func(held []*Task, _ []*VCPU, parked []*Task) (RingOps, bool) {
		s = newStubRing(held, parked)
		b, c = parked[0], parked[1]
		return s, true
	}))
	s.rotate(v) // b runs

	require.Same(t, v, acquireNow(t, b), "b trapped: it holds its runner's vCPU")
	require.Zero(t, s.closed, "the ring stays")
	k.mu.Lock()
	require.Len(t, k.delegated, 1)
	require.Same(t, b, v.holder)
	require.False(t, b.ringed)
	require.Empty(t, k.delegated[0].vcpus)
	k.mu.Unlock()

	b.JoinRing() // back to tenant code
	require.Same(t, b, s.on[v])
	k.mu.Lock()
	require.True(t, b.ringed)
	require.Equal(t, []*VCPU{v}, k.delegated[0].vcpus)
	k.mu.Unlock()

	s.rotate(v) // c runs; it traps and blocks: the vCPU goes to the next member, a
	require.Same(t, v, acquireNow(t, c))
	c.Release()
	require.Same(t, a, s.on[v])
	require.Equal(t, []*Task{b}, s.queue)
	require.Zero(t, s.closed)
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Tasks: 3}, k.Stats())

	// c wakes: no vCPU is free, so it takes the ring's: the runner's member is made to trap,
	// and gives the vCPU up at that trap.
	got := acquireAsync(t, k, c)
	waitFor(t, func() bool { return len(s.shrunk) == 1 })
	require.Equal(t, []*VCPU{v}, s.shrunk)
	require.Same(t, v, acquireNow(t, a), "a trapped for the shrink: it holds v for now")
	parks := 0
	require.True(t, a.PreemptedPark(func() { parks++ }), "a must give v up")
	require.Equal(t, 1, parks)
	require.Same(t, v, within(t, got))
	require.Equal(t, []*Task{b, a}, s.queue, "a waits in the stub's ring")
	k.mu.Lock()
	require.True(t, a.ringed)
	require.Same(t, c, v.holder)
	k.mu.Unlock()
	require.Zero(t, s.closed)
	exitAll(t, k, x, y, z)
	require.Equal(t, 1, s.closed, "a member's exit takes the ring back")
}

// A member that leaves the ring (it traps) is charged its share of the ring's time so far, as the
// ring's end would charge it: with its virtual runtime from before the ring it was ahead of every
// task outside the ring, and a thread woken from a sleep waited for it.
func TestMemberLeavesWithItsShare(t *testing.T) {
	r := ringOfThree(t)
	k, now, v, s, b := r.k, r.now, r.v, r.s, r.parked[0]
	k.mu.Lock()
	start := k.delegated[0].vr
	k.mu.Unlock()
	s.rotate(v) // b runs
	now.Add(6 * int64(Slice))
	require.Same(t, v, acquireNow(t, b), "b trapped: it holds its runner's vCPU")
	k.mu.Lock()
	got := b.vr
	k.mu.Unlock()
	require.GreaterOrEqual(t, got, start+2*int64(Slice), "a third of the ring's 6 slices")
	exitAll(t, k, r.tasks...)
}

// Tasks of another group, or of another weight, are not equals: no ring, and a task that is no
// equal takes the ring back when it wants a vCPU.
func TestDelegateOnlyEquals(t *testing.T) {
	k, now := clockedK(t, 1)
	logRuns(k)
	a, b := k.NewTask("a1"), k.NewTask("b1")
	a.Acquire()
	parkBehind(t, k, now, a, b)
	b.InTenant.Store(true)
	var s *stubRing
	open := func(held []*Task, _ []*VCPU, parked []*Task) (RingOps, bool) {
		s = newStubRing(held, parked)
		return s, true
	}
	require.False(t, k.Delegate(sameGroup, open), "two processes")
	require.True(t, k.Delegate(func(x, y *Task) bool { return true }, open))
	exitAll(t, k, a, b)

	c, d := k.NewTask("c1"), k.NewTask("c2")
	c.Acquire()
	d.SetNice(5, false)
	parkBehind(t, k, now, c, d)
	d.InTenant.Store(true)
	require.False(t, k.Delegate(sameGroup, open), "nice 5 and nice 0")
	exitAll(t, k, c, d)

	e, f, g, x := k.NewTask("e1"), k.NewTask("e2"), k.NewTask("e3"), k.NewTask("x1")
	v, h := allParkedButOne(t, k, now, e, f, g)
	require.True(t, k.Delegate(sameGroup, open))
	got := acquireAsync(t, k, x)
	require.Equal(t, 1, s.closed)
	require.Empty(t, s.shrunk, "x is of another process: the ring goes, none of its vCPUs is taken")
	h.Release() // h held v when the ring went
	require.Same(t, v, within(t, got))
	exitAll(t, k, e, f, g, x)
}

// A member that was to give its vCPU up for a waking task ends instead (its process is killed):
// the vCPU still goes to the waiter.
func TestShrunkMemberEnds(t *testing.T) {
	r := ringOfThree(t)
	k, v, s, a, c := r.k, r.v, r.s, r.holder, r.parked[1]
	// c, parked in the stub's ring, was kicked (a signal): it wants a vCPU, and takes the ring's.
	got := acquireAsync(t, k, c)
	require.Equal(t, []*VCPU{v}, s.shrunk)
	a.Exit() // a, on v's runner, is killed before it traps
	require.Same(t, v, within(t, got))
	exitAll(t, k, r.tasks...)
}

// A task that took a vCPU from the ring gets another one first (its member trapped and
// blocked): when the member on the vCPU it took traps, that vCPU serves the ring again. It used
// to stay marked as being taken, held by nobody and given to no one, until the ring was taken
// back: the pod ran on a vCPU fewer meanwhile (a quarter of its CPU time lost beside 50 busy
// threads and a contended lock).
func TestTakenVCPUServesTheRingWhenItsTakerGotAnother(t *testing.T) {
	k, now := clockedK(t, 2)
	logRuns(k)
	x, y, z, w := k.NewTask("a1"), k.NewTask("a2"), k.NewTask("a3"), k.NewTask("a4")
	x.Acquire()
	y.Acquire()
	x.InTenant.Store(true)
	y.InTenant.Store(true)
	parkBehind(t, k, now, x, z)
	z.InTenant.Store(true)
	var s *stubRing
	require.True(t, k.Delegate(sameGroup, func(held []*Task, _ []*VCPU, parked []*Task) (RingOps, bool) {
		s = newStubRing(held, parked)
		return s, true
	}))
	require.Equal(t, []*Task{x}, s.queue)

	// w wakes and takes a vCPU of the ring; before that vCPU's member traps, the member on the
	// other one traps and blocks, and w gets its vCPU.
	got := acquireAsync(t, k, w)
	require.Len(t, s.shrunk, 1)
	taken := s.shrunk[0]
	other := k.vcpus[0]
	if other == taken {
		other = k.vcpus[1]
	}
	blocker, shrunk := s.on[other], s.on[taken]
	require.Same(t, other, acquireNow(t, blocker))
	blocker.Release()
	require.Same(t, other, within(t, got))

	// The shrunk member traps at last and gives its vCPU up: to the ring, with x.
	require.Same(t, taken, acquireNow(t, shrunk))
	require.True(t, shrunk.PreemptedPark(func() {}))
	k.mu.Lock()
	require.False(t, taken.taken, "nobody takes it any more")
	require.True(t, taken.ring, "it went back to the ring")
	k.mu.Unlock()
	require.Same(t, x, s.on[taken], "the ring's parked member runs on it")
	require.Equal(t, []*Task{shrunk}, s.queue, "the shrunk member waits in the stub's ring")
	exitAll(t, k, x, y, z, w)
}

// A task that takes a vCPU from the ring waits for the member on that vCPU's runner to trap. The
// one signal the Shrink sent may not make it trap (here it never comes): the ticker asks the
// runner again once askAgainAfter has gone by, and the member's trap then hands the vCPU over.
func TestTakenVCPUIsAskedForAgain(t *testing.T) {
	k, now := clockedK(t, 1)
	logRuns(k)
	x, y, z, w := k.NewTask("a1"), k.NewTask("a2"), k.NewTask("a3"), k.NewTask("a4")
	v, a := allParkedButOne(t, k, now, x, y, z)
	var s *stubRing
	require.True(t, k.Delegate(sameGroup, func(held []*Task, _ []*VCPU, parked []*Task) (RingOps, bool) {
		s = newStubRing(held, parked)
		return s, true
	}))
	got := acquireAsync(t, k, w)
	waitFor(t, func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		return len(s.shrunk) == 1
	})
	_, _, waiting := k.Overdue()
	require.True(t, waiting, "w waits: the ticker runs")
	k.mu.Lock()
	require.Len(t, s.shrunk, 1, "at once nobody is asked again")
	k.mu.Unlock()

	now.Add(int64(askAgainAfter) - 1)
	k.Overdue()
	k.mu.Lock()
	require.Len(t, s.shrunk, 1, "a member's trap may come late")
	k.mu.Unlock()
	now.Add(1)
	k.Overdue()
	k.mu.Lock()
	require.Equal(t, []*VCPU{v, v}, s.shrunk, "askAgainAfter later, v's runner is asked again")
	require.Equal(t, 1, k.rings.AskedAgain)
	k.mu.Unlock()

	require.Same(t, v, acquireNow(t, a), "a traps at last")
	require.True(t, a.PreemptedPark(func() {}))
	require.Same(t, v, within(t, got))
	now.Add(int64(askAgainAfter))
	k.Overdue()
	require.Len(t, s.shrunk, 2, "nobody is asked for a vCPU held")
	exitAll(t, k, x, y, z, w)
}

// twoGroups holds two vCPUs, one by a task of each group in tenant code, and one more task of
// each group parked behind them.
func twoGroups(t *testing.T, k *Kernelet, now *atomic.Int64, a1, a2, b1, b2 *Task) {
	t.Helper()
	a1.Acquire()
	b1.Acquire()
	gotA, gotB := acquireAsync(t, k, a2), acquireAsync(t, k, b2)
	now.Add(int64(Slice))
	require.True(t, a1.PreemptedPark(func() {}))
	require.True(t, b1.PreemptedPark(func() {}))
	<-gotA
	<-gotB
	require.True(t, a1.Parked())
	require.True(t, b1.Parked())
	a2.InTenant.Store(true)
	b2.InTenant.Store(true)
}

// Two processes' equal tasks, each holding one of two vCPUs with the rest of its process parked
// behind, go to two rings, one a process: nothing waits for the ticker any more, and a ring's
// vCPU serves only its own members. Spread unalike (three tasks on one vCPU against one on the
// other), they stay with the kernelet.
func TestDelegateRingPerGroup(t *testing.T) {
	k, now := clockedK(t, 2)
	logRuns(k)
	a1, a2, b1, b2 := k.NewTask("a1"), k.NewTask("a2"), k.NewTask("b1"), k.NewTask("b2")
	twoGroups(t, k, now, a1, a2, b1, b2)
	type opened struct {
		held, parked []*Task
		vcpus        []*VCPU
		s            *stubRing
	}
	var rings []opened
	open := func(held []*Task, vcpus []*VCPU, parked []*Task) (RingOps, bool) {
		s := newStubRing(held, parked)
		rings = append(rings, opened{held, parked, vcpus, s})
		return s, true
	}
	require.True(t, k.Delegate(sameGroup, open))
	require.Len(t, rings, 2, "a ring a process")
	for _, r := range rings {
		require.Len(t, r.held, 1)
		require.Len(t, r.vcpus, 1)
		require.Len(t, r.parked, 1)
		require.True(t, sameGroup(r.held[0], r.parked[0]), "a ring holds one process's tasks: %v %v", r.held[0].Owner, r.parked[0].Owner)
	}
	require.NotSame(t, rings[0].vcpus[0], rings[1].vcpus[0])
	_, _, waiting := k.Overdue()
	require.False(t, waiting, "the rings' tasks wait for no ticker")
	require.Equal(t, Stats{VCPUs: 2, Held: 2, Tasks: 4}, k.Stats())
	require.Equal(t, 2, k.RingStats().Opened)

	// A member that traps and blocks gives its vCPU back to its own ring, with its parked member.
	r := rings[0]
	m := r.held[0]
	require.Same(t, r.vcpus[0], m.Acquire(), "a member that traps leaves with its runner's vCPU")
	m.Release()
	require.Equal(t, r.parked[0], r.s.on[r.vcpus[0]], "the vCPU went back to the ring with its parked member")
	require.Empty(t, rings[1].s.shrunk)

	// A change of priority takes both rings back.
	a1.SetNice(0, false)
	require.Equal(t, 1, rings[0].s.closed)
	require.Equal(t, 1, rings[1].s.closed)
	require.Equal(t, RingStats{Opened: 2, Closed: 2}, k.RingStats())
	m.Exit()
	for _, x := range []*Task{a1, a2, b1, b2} {
		if x != m {
			x.Exit()
		}
	}
	require.Equal(t, Stats{VCPUs: 2}, k.Stats())

	k, now = clockedK(t, 2)
	logRuns(k)
	a1, a2, b1, b2 = k.NewTask("a1"), k.NewTask("a2"), k.NewTask("b1"), k.NewTask("b2")
	a3, a4 := k.NewTask("a3"), k.NewTask("a4")
	twoGroups(t, k, now, a1, a2, b1, b2)
	for _, x := range []*Task{a3, a4} {
		got := acquireAsync(t, k, x)
		now.Add(int64(Slice))
		var h *Task
		k.mu.Lock()
		for _, v := range k.vcpus {
			if v.holder != nil && sameGroup(v.holder, x) {
				h = v.holder
			}
		}
		k.mu.Unlock()
		require.NotNil(t, h)
		require.True(t, h.PreemptedPark(func() {}))
		<-got
		x.InTenant.Store(true)
	}
	rings = nil
	require.False(t, k.Delegate(sameGroup, open), "a's four tasks on one vCPU against b's two on the other")
	require.Empty(t, rings)
	exitAll(t, k, a1, a2, a3, a4, b1, b2)
}

// A vCPU let go of whose ring has no parked member left does not idle while another ring's
// members wait for their turns: the rings are taken back, and it serves them.
func TestRingVCPUDoesNotIdleBesideAnotherRing(t *testing.T) {
	k, now := clockedK(t, 2)
	runs := logRuns(k)
	a1, a2, b1, b2 := k.NewTask("a1"), k.NewTask("a2"), k.NewTask("b1"), k.NewTask("b2")
	twoGroups(t, k, now, a1, a2, b1, b2)
	stubs := map[*Task]*stubRing{}
	open := func(held []*Task, vcpus []*VCPU, parked []*Task) (RingOps, bool) {
		s := newStubRing(held, parked)
		stubs[held[0]] = s
		return s, true
	}
	require.True(t, k.Delegate(sameGroup, open))
	var m *Task
	var s *stubRing
	for h, x := range stubs {
		if h.Owner.(string)[0] == 'a' {
			m, s = h, x
		}
	}
	require.NotNil(t, m)
	v := m.Acquire()
	// Its stub finds no parked context to run (as when the tenant wrote over the ring).
	s.queue = nil
	before := len(runs.get())
	m.Release()
	require.Equal(t, 2, k.RingStats().Closed, "both rings are taken back")
	k.mu.Lock()
	holder := v.holder
	k.mu.Unlock()
	require.NotNil(t, holder, "the vCPU serves a waiting task")
	require.Greater(t, len(runs.get()), before, "a parked task was resumed on it")
	exitAll(t, k, a1, a2, b1, b2)
}

// twoGroupsAndA3 is twoGroups on a clocked kernelet of two vCPUs, with a third task of a's, a3,
// made and not yet run.
func twoGroupsAndA3(t *testing.T) (k *Kernelet, now *atomic.Int64, a1, a2, a3, b1, b2 *Task) {
	t.Helper()
	k, now = clockedK(t, 2)
	logRuns(k)
	a1, a2, b1, b2 = k.NewTask("a1"), k.NewTask("a2"), k.NewTask("b1"), k.NewTask("b2")
	a3 = k.NewTask("a3")
	twoGroups(t, k, now, a1, a2, b1, b2)
	return k, now, a1, a2, a3, b1, b2
}

// A task that got another ring's vCPU (it took one from its own ring, and the other ring's member
// let go of its vCPU first) does not join its own ring with it, which would leave the other ring
// short: going back to tenant code it takes all the rings back.
func TestForeignVCPUTakesTheRingsBack(t *testing.T) {
	k, _, a1, a2, a3, b1, b2 := twoGroupsAndA3(t)
	stubs := map[byte]*stubRing{}
	holders := map[byte]*Task{}
	open := func(held []*Task, vcpus []*VCPU, parked []*Task) (RingOps, bool) {
		s := newStubRing(held, parked)
		g := held[0].Owner.(string)[0]
		stubs[g], holders[g] = s, held[0]
		return s, true
	}
	require.True(t, k.Delegate(sameGroup, open))
	got := acquireAsync(t, k, a3) // takes a's vCPU: a's member on it is asked to trap
	require.Len(t, stubs['a'].shrunk, 1)
	vA := stubs['a'].shrunk[0]
	mb := holders['b']
	vB := mb.Acquire() // b's member traps first, and lets its vCPU go
	mb.Release()
	require.Same(t, vB, within(t, got), "a3 got b's vCPU")
	require.Zero(t, k.RingStats().Closed)
	a3.InTenant.Store(true)
	a3.JoinRing()
	require.Equal(t, 2, k.RingStats().Closed, "a3 with b's vCPU takes the rings back")
	ma := holders['a']
	require.Same(t, vA, ma.Acquire(), "a's member traps at last, with its runner's vCPU")
	ma.Release()
	exitAll(t, k, a1, a2, a3, b1, b2)
}

// A task that parks while the rings are open, into a ring that would then be short (here one
// with no vCPU left: its only runner's member trapped and holds it), takes the rings back rather
// than wait in it for vCPUs the rings keep.
func TestParkBeyondTheSpreadTakesTheRingsBack(t *testing.T) {
	k, now, a1, a2, a3, b1, b2 := twoGroupsAndA3(t)
	require.True(t, k.Delegate(sameGroup, func(held []*Task, _ []*VCPU, parked []*Task) (RingOps, bool) {
		return newStubRing(held, parked), true
	}))
	vA := a2.Acquire() // a2 held a's vCPU; it traps and keeps it, outside the ring
	got := acquireAsync(t, k, a3)
	require.Zero(t, k.RingStats().Closed, "a3 waits for a vCPU; a's ring has none to give")
	now.Add(int64(Slice))
	require.True(t, a2.PreemptedPark(func() {}))
	require.Equal(t, 2, k.RingStats().Closed, "a2 parked into a ring of no vCPU: the rings are taken back")
	require.Same(t, vA, within(t, got), "a3 runs on the vCPU a2 gave way with")
	require.True(t, a2.Parked())
	k.mu.Lock()
	queued := a2.queued != nil
	k.mu.Unlock()
	require.True(t, queued, "a2 waits in a run queue, as without a ring")
	exitAll(t, k, a1, a2, a3, b1, b2)
}

// Crowded, read without the lock, says whether more tasks want the vCPUs than there are: a task
// waits for one, or equals take turns in a ring (where none waits in a run queue).
func TestCrowded(t *testing.T) {
	k := newK(t, 1)
	a, b := k.NewTask("a"), k.NewTask("b")
	require.False(t, k.Crowded())
	a.Acquire()
	require.False(t, k.Crowded(), "one task on the one vCPU")
	got := acquireAsync(t, k, b)
	require.True(t, k.Crowded(), "b waits")
	a.Release()
	within(t, got)
	require.False(t, k.Crowded(), "b has the vCPU, a wants none")
	exitAll(t, k, a, b)

	r := ringOfThree(t)
	require.Zero(t, r.k.Stats().Waiting, "the ring's members wait in no run queue")
	require.True(t, r.k.Crowded(), "three tasks take turns on one vCPU")
	exitAll(t, r.k, r.tasks...)
	require.False(t, r.k.Crowded())
}
