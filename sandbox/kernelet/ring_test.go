package kernelet

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func sameGroup(a, b *Task) bool { return a.Owner.(string)[0] == b.Owner.(string)[0] }

// With every vCPU held by a task in tenant code and only parked equals of its group waiting, the
// kernelet hands them to a ring: nothing waits for the ticker any more. The first call that
// changes anything takes the ring back: each vCPU goes to the task its runner holds by then, and
// the others wait parked again.
func TestDelegateAndTakeBack(t *testing.T) {
	k, now := clockedK(t, 1)
	runs := logRuns(k)
	a, b, c := k.NewTask("a1"), k.NewTask("a2"), k.NewTask("a3")
	a.Acquire()
	v := parkBehind(t, k, now, a, b)
	now.Add(int64(Slice))
	require.True(t, b.PreemptedPark(func() {}))
	require.Len(t, runs.get(), 1, "a was run again (OnRun)")
	require.Same(t, a, runs.get()[0].t)
	// c waits for its first vCPU: it is no parked context, so no ring yet.
	gotC := acquireAsync(t, k, c)
	a.InTenant.Store(true)
	opened := 0
	open := func(held, parked []*Task) (func() []*Task, bool) {
		opened++
		return nil, false
	}
	require.False(t, k.Delegate(sameGroup, open))
	require.Zero(t, opened, "a task that never ran waits")

	// c runs and parks; b and c wait parked, a runs tenant code.
	now.Add(int64(Slice))
	require.True(t, a.PreemptedPark(func() {}))
	require.Same(t, v, <-gotC)
	now.Add(int64(Slice))
	require.True(t, c.PreemptedPark(func() {}))
	require.Len(t, runs.get(), 2)
	require.Same(t, b, runs.get()[1].t, "b is behind a, c behind b")
	b.InTenant.Store(true)

	var heldGot, parkedGot []*Task
	holder := a // what the runner holds when the ring is taken back
	closed := 0
	require.True(t, k.Delegate(sameGroup, func(held, parked []*Task) (func() []*Task, bool) {
		heldGot, parkedGot = held, parked
		return func() []*Task { closed++; return []*Task{holder} }, true
	}))
	require.Equal(t, []*Task{b}, heldGot)
	require.Equal(t, []*Task{c, a}, parkedGot, "in the order they would run")
	_, _, waiting := k.Overdue()
	require.False(t, waiting, "the ring's tasks wait for no ticker")
	require.False(t, k.Delegate(sameGroup, open), "one ring at a time")

	// a trapped (its runner took it from the ring): its carrier's Acquire takes the ring back and
	// finds a holding the vCPU.
	now.Add(3 * int64(Slice))
	require.Same(t, v, acquireNow(t, a))
	require.Equal(t, 1, closed)
	require.Equal(t, Stats{VCPUs: 1, Held: 1, Waiting: 2, Parked: 2, Tasks: 3}, k.Stats())
	require.True(t, b.Parked())
	require.True(t, c.Parked())
	k.mu.Lock()
	require.Nil(t, k.ring)
	require.Same(t, a, v.holder)
	for _, x := range []*Task{a, b, c} {
		require.False(t, x.ringed)
		require.GreaterOrEqual(t, x.vr, int64(Slice), "each ran a share of the ring's time")
	}
	k.mu.Unlock()

	exitAll(t, k, a, b, c)
}

// Tasks of another group, or of another weight, are not equals: no ring.
func TestDelegateOnlyEquals(t *testing.T) {
	k, now := clockedK(t, 1)
	logRuns(k)
	a, b := k.NewTask("a1"), k.NewTask("b1")
	a.Acquire()
	parkBehind(t, k, now, a, b)
	b.InTenant.Store(true)
	open := func(held, parked []*Task) (func() []*Task, bool) {
		return func() []*Task { return nil }, true
	}
	require.False(t, k.Delegate(sameGroup, open), "two processes")
	require.True(t, k.Delegate(func(x, y *Task) bool { return true }, open))
	b.Exit() // takes the ring back: its runner holds nobody the kernelet knows
	a.Exit()
	require.Equal(t, Stats{VCPUs: 1}, k.Stats())

	c, d := k.NewTask("c1"), k.NewTask("c2")
	c.Acquire()
	d.SetNice(5, false)
	parkBehind(t, k, now, c, d)
	d.InTenant.Store(true)
	require.False(t, k.Delegate(sameGroup, open), "nice 5 and nice 0")
	c.Exit()
	d.Exit()
}
