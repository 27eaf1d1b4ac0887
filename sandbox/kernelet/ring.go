package kernelet

import (
	"slices"
	"time"
)

// A ring hands vCPUs and waiting tasks to the stub of one process while they are all equals of
// that process: its runners then take turns among the tasks on their own timers, and no sandbox
// thread wakes for a slice. Several processes of equals each get a ring of their own, over the
// vCPUs their tasks held, when their tasks are spread alike over those (balanced): two busy
// processes that the kin rule settled one on each vCPU take their slices with no ticker.
//
// A ring's vCPUs are "attached": their runners take turns, and the kernelet does not know which
// member runs where. Its members are the tasks on those runners or parked in the stub's ring. A
// member that traps leaves the ring with its runner's vCPU (Acquire), and joins it again when it
// goes back to tenant code as an equal (JoinRing); a task that parks while a ring is open joins
// it parked. A vCPU let go of goes to a waiting task, else back to its ring (home) with a parked
// member (Grow); a task that wakes and finds no vCPU free takes one from its process's ring
// (Shrink: the runner's member traps and gives it way). Anything else (a task that is no equal, a
// change of priority, affinity or vCPUs, the process's end, a ring that would get more than its
// share or leave a vCPU idle while another's members wait) takes all the rings back (endRing).

// RingStats tells how the rings went: how often one was opened and taken back, and how long
// they were open in all (a ring still open counts up to now).
type RingStats struct {
	Opened, Closed int
	Open           time.Duration
	// AskedAgain counts the vCPUs taken from a ring whose runner's member had not trapped
	// askAgainAfter after it was asked to (Shrink), and was asked again.
	AskedAgain int
}

// RingStats returns the rings' statistics so far.
func (k *Kernelet) RingStats() RingStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.rings
	for _, r := range k.delegated {
		s.Open += time.Duration(k.now() - r.start)
	}
	return s
}

// RingOps carries a ring's changes out in the stub. Every method is called under the kernelet's
// lock, and must only flip shared memory or signal a runner.
type RingOps interface {
	// Close ends the turns and returns, for each of vcpus, the member its runner holds now (nil:
	// none).
	Close(vcpus []*VCPU) []*Task
	// Detach takes the runner that holds t's context out of the turns and returns its vCPU (nil:
	// t's context is on no runner of the ring).
	Detach(t *Task) *VCPU
	// Attach puts the runner that holds t's context, with t's vCPU v, among the turns.
	Attach(t *Task, v *VCPU) bool
	// Park puts t's parked context among the turns.
	Park(t *Task) bool
	// Grow runs the next parked member on an idle runner with v, among the turns, and returns
	// it (nil: no member waits).
	Grow(v *VCPU) *Task
	// Shrink takes v's runner out of the turns and makes the member it runs trap, so that its
	// carrier gives v up.
	Shrink(v *VCPU)
}

// ring is the state of a delegation (k.mu guards it).
type ring struct {
	ops     RingOps
	same    func(a, b *Task) bool
	proto   *Task          // a member at the start: the members are its equals
	vcpus   []*VCPU        // attached
	members map[*Task]bool // on an attached runner, or parked in the stub's ring
	start   int64
	vr      int64 // the members' virtual runtime at the start
}

// equalOf reports whether t may take turns with first: an ordinary task of the same weight that
// may run on every vCPU and has no OnRun call or spare under way (k.mu held).
func (k *Kernelet) equalOf(first, t *Task, same func(a, b *Task) bool) bool {
	if t.policy != Other && t.policy != Batch || t.weight() != first.weight() || t.inRun != 0 ||
		t.spare != nil || t.exited || !same(first, t) {
		return false
	}
	for _, v := range k.vcpus {
		if !t.allowed(v) {
			return false
		}
	}
	return true
}

// Delegate gives the vCPUs and the waiting tasks to rings if every vCPU is held by a task running
// tenant code and every waiting task is parked, all equals, and each group (same says whether two
// tasks belong to one) with waiting tasks holds a vCPU: a ring for each group, over the vCPUs its
// tasks hold, with its parked tasks. The groups' tasks must be spread alike over their vCPUs
// (balanced), as a ring's members share only its own vCPUs. open is called under the kernelet's
// lock, once a group, with the holders, the vCPUs they hold (in the same order) and the waiting
// tasks (in the order they would run); it must only flip shared memory, and returns the ring's
// operations, or false if the ring cannot be had. Delegate reports whether the rings were opened
// (all or none); then no task waits any more as far as Overdue is concerned.
func (k *Kernelet) Delegate(same func(a, b *Task) bool, open func(held []*Task, vcpus []*VCPU, parked []*Task) (RingOps, bool)) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.delegated) != 0 || k.onRun == nil || len(k.runs) != 0 || k.waiting.Load() == 0 {
		return false
	}
	type group struct {
		held, parked []*Task
		vcpus        []*VCPU
	}
	var groups []*group
	groupOf := func(t *Task) *group {
		for _, g := range groups {
			if same(g.held[0], t) {
				return g
			}
		}
		return nil
	}
	var first *Task
	for _, v := range k.vcpus {
		h := v.holder
		if v.retiring || v.lent || h == nil || !h.InTenant.Load() {
			return false
		}
		if first == nil {
			first = h
		}
		if !k.equalOf(first, h, anyGroup) { // the first too: it may be no ordinary task
			return false
		}
		g := groupOf(h)
		if g == nil {
			g = &group{}
			groups = append(groups, g)
		}
		g.held = append(g.held, h)
		g.vcpus = append(g.vcpus, v)
	}
	parked := 0
	for _, v := range k.vcpus {
		for _, t := range v.queue {
			g := groupOf(t)
			if !t.parked || g == nil || !k.equalOf(g.held[0], t, anyGroup) { // same: groupOf
				return false
			}
			g.parked = append(g.parked, t)
			parked++
		}
	}
	if parked != int(k.waiting.Load()) || !balanced(len(groups), func(i int) (int, int) {
		return len(groups[i].held) + len(groups[i].parked), len(groups[i].vcpus)
	}) {
		return false
	}
	now := k.now()
	for _, g := range groups {
		slices.SortFunc(g.parked, func(a, b *Task) int { // the order they would run in
			switch {
			case before(a, b):
				return -1
			case before(b, a):
				return 1
			}
			return 0
		})
		ops, ok := open(g.held, g.vcpus, g.parked)
		if !ok {
			k.endRing() // those opened already
			return false
		}
		r := &ring{ops: ops, same: same, proto: g.held[0], members: map[*Task]bool{}, start: now, vr: g.held[0].vr}
		for _, h := range g.held {
			h.charge(now)
			v := h.vcpu
			v.holder, v.ring, v.home, h.vcpu = nil, true, r, nil
			r.vcpus = append(r.vcpus, v)
			r.members[h] = true
			h.ringed = true
		}
		for _, t := range g.parked {
			k.dequeue(t)
			r.members[t] = true
			t.ringed = true
			r.vr = min(r.vr, t.vr)
		}
		k.delegated = append(k.delegated, r)
		k.ringOpen.Store(true)
		k.rings.Opened++
	}
	return true
}

// anyGroup puts all tasks in one group: equalOf then compares only weights, policies and
// affinities.
func anyGroup(a, b *Task) bool { return true }

// balanced reports whether n rings, ring i with members(i) tasks over vcpus(i) vCPUs, give each
// task about the same share of a vCPU: within ringSpread of each other. A ring of one group
// always is.
func balanced(n int, of func(i int) (members, vcpus int)) bool {
	lo, hi := 0.0, 0.0
	for i := 0; i < n; i++ {
		m, c := of(i)
		if c == 0 {
			return false
		}
		share := float64(c) / float64(max(m, 1))
		if i == 0 || share < lo {
			lo = share
		}
		if i == 0 || share > hi {
			hi = share
		}
	}
	return hi <= lo*(1+ringSpread)
}

// ringSpread is how much more of a vCPU a task of one ring may get than a task of another: rings
// are opened only within it, and a member that joins one beyond it takes the rings back. Two
// processes of 25 busy threads each on 2 vCPUs share exactly; of 25 and 24, by 4%.
const ringSpread = 0.05

// ringAcquire serves Acquire while rings are open (k.mu held). A member that trapped leaves its
// ring with its runner's vCPU (returned in v). A task that finds no free vCPU takes one from the
// ring of its process if it is an equal: it is queued on it (queued), or, new and able to (park),
// joins that ring parked (parked). handled is false when the caller is to go on as without a
// ring: a vCPU is free, or the ring gives none, or the rings were taken back (the task is no
// equal of any, or would tip its ring beyond ringSpread).
func (k *Kernelet) ringAcquire(t *Task, park func() bool) (v *VCPU, queued, parked, handled bool) {
	if r := k.ringOf(t); t.ringed && r != nil {
		// It ran its share of the ring's time as the others did. A member that left with its
		// virtual runtime from before the ring was ahead of every task outside it and, queued
		// again, of every member: beside a sibling cgroup, the lock row's contenders (they trap
		// and leave at each lock) left the sibling 0.964-0.993 of its share (mean 0.980, six
		// interleaved runs), and 0.992-1.003 (mean 1.000) charged so.
		t.vr = max(t.vr, r.memberVr(k.now()))
		t.ringed = false
		delete(r.members, t)
		if v := r.ops.Detach(t); v != nil {
			r.vcpus = slices.DeleteFunc(r.vcpus, func(x *VCPU) bool { return x == v })
			v.ring = false
			now := k.now()
			v.holder, t.vcpu = t, v
			t.since, t.got, t.last = now, now, v.ID
			t.parked = false
			return v, false, false, true
		}
		t.parked = false // trapped while parked in the stub's ring: it wants a vCPU afresh
	}
	if t.vcpu != nil || t.queued != nil {
		return nil, false, false, false
	}
	for _, v := range k.vcpus {
		if !v.retiring && t.allowed(v) && v.free() {
			return nil, false, false, false
		}
	}
	r := k.groupRing(t)
	if r == nil {
		k.endRing()
		return nil, false, false, false
	}
	if t.fresh && park != nil && park() {
		t.fresh = false
		t.parked = true
		if k.joinBalanced(r, 0) && r.ops.Park(t) {
			t.ringed = true
			r.members[t] = true
			return nil, false, true, true
		}
		k.endRing() // the ring would not take it: it waits parked as without one
		k.updateMin()
		k.place(t)
		return nil, false, true, true
	}
	if len(r.vcpus) == 0 {
		return nil, false, false, false // every vCPU is out of the ring: wait for one of them
	}
	v = r.vcpus[len(r.vcpus)-1]
	r.vcpus = r.vcpus[:len(r.vcpus)-1]
	v.ring, v.taken, v.takenAt = false, true, k.now()
	r.ops.Shrink(v)
	k.comeBack(t)
	t.fresh = false
	k.enqueue(v, t)
	return nil, true, false, true
}

// askAgain asks the ring's runner for taken vCPU v once more if its member has not trapped for it
// within askAgainAfter (k.mu held; Overdue, on the ticker, which runs while the taker waits).
// The one signal a Shrink sends is all that hands v over: were it lost, the taker would wait
// until the ring was taken back for another reason, which beside busy members may be their end.
func (k *Kernelet) askAgain(v *VCPU, now int64) {
	if r := v.home; len(k.delegated) != 0 && r != nil && v.taken && v.holder == nil && now-v.takenAt >= int64(askAgainAfter) {
		v.takenAt = now
		k.rings.AskedAgain++
		r.ops.Shrink(v)
	}
}

// askAgainAfter is how long a vCPU taken from a ring may wait for its member's trap. Beside a busy
// sibling cgroup the trap took more than a slice 1-4 times in a run of sched-fair's lock row, and
// never without the sibling: most likely the kicked runner, or the carrier its trap wakes, waited
// for a host CPU, and a second signal so soon was for nothing. A signal truly lost costs this long.
const askAgainAfter = 10 * Slice

// JoinRing puts the task, about to run tenant code on its vCPU, back among the turns of the open
// ring it is an equal of, unless a task waits for a vCPU: its runner takes turns again, and the
// kernelet forgets which vCPU it holds until it traps.
func (t *Task) JoinRing() {
	k := t.k
	if !k.ringOpen.Load() {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r, v := k.groupRing(t), t.vcpu
	if r == nil || t.ringed || v == nil || v.taken || v.retiring || k.waiting.Load() > 0 {
		return
	}
	if v.home != r || !k.joinBalanced(r, 1) {
		// Another ring's vCPU would leave that ring short (or this one is full enough): take them
		// all back, to be handed out afresh.
		k.endRing()
		return
	}
	if !r.ops.Attach(t, v) {
		return
	}
	t.charge(k.now())
	v.holder, v.ring, t.vcpu = nil, true, nil
	r.vcpus = append(r.vcpus, v)
	r.members[t] = true
	t.ringed = true
}

// ringPark puts a task that has just parked (and been queued) into the open ring it is an equal
// of, instead of the run queue (k.mu held).
func (k *Kernelet) ringPark(t *Task) {
	if len(k.delegated) == 0 || !t.parked || t.queued == nil {
		return
	}
	r := k.groupRing(t)
	if r == nil || !k.joinBalanced(r, 0) {
		k.endRing() // it would wait for vCPUs the rings keep, perhaps for as long as they are open
		return
	}
	q := t.queued
	k.dequeue(t)
	if !r.ops.Park(t) {
		k.enqueue(q, t)
		return
	}
	t.ringed = true
	r.members[t] = true
}

// ringRefill gives free vCPU v back to the open ring, with a parked member (k.mu held).
func (k *Kernelet) ringRefill(v *VCPU) {
	r := v.home
	if len(k.delegated) == 0 || r == nil || v.retiring || !v.free() {
		return
	}
	if g := r.ops.Grow(v); g != nil {
		v.ring = true
		r.vcpus = append(r.vcpus, v)
		return
	}
	for _, x := range k.delegated {
		if len(x.members) > len(x.vcpus) {
			k.endRing() // v would idle while another ring's members wait: all are handed out afresh
			return
		}
	}
}

// endRing takes every ring's vCPUs and tasks back (k.mu held): each attached vCPU goes to the task
// its runner holds now, the other members wait parked, behind in the order of their virtual
// runtimes as before the ring (they all ran alike meanwhile). The ticker is started again after
// the lock is released, as tasks wait.
func (k *Kernelet) endRing() {
	if len(k.delegated) == 0 {
		return
	}
	rings := k.delegated
	k.delegated = nil
	k.ringOpen.Store(false)
	now := k.now()
	for _, r := range rings {
		k.closeRing(r, now)
	}
	for _, v := range k.vcpus {
		v.home = nil
		if v.taken && v.holder == nil {
			v.taken = false // its member ended before it could give it up
		}
		if v.free() {
			k.dispatch(v)
		}
	}
	if k.waiting.Load() > 0 && k.onWait != nil {
		go k.onWait() // the ticker; it takes locks of its own
	}
}

// closeRing is endRing's part for one ring r: its vCPUs and members go back to the kernelet.
func (k *Kernelet) closeRing(r *ring, now int64) {
	k.rings.Closed++
	k.rings.Open += time.Duration(now - r.start)
	got := r.ops.Close(r.vcpus)
	members := make([]*Task, 0, len(r.members))
	for t := range r.members {
		members = append(members, t)
	}
	slices.SortFunc(members, func(a, b *Task) int { return compareSeq(a, b) })
	memberVr := r.memberVr(now)
	holds := map[*Task]bool{}
	for i, v := range r.vcpus {
		v.ring = false
		if i < len(got) && got[i] != nil && r.members[got[i]] && !holds[got[i]] && !got[i].exited {
			t := got[i]
			holds[t] = true
			v.holder, t.vcpu = t, v
			t.since, t.got, t.last = now, now, v.ID
			t.parked = false
		}
	}
	for i, t := range members {
		t.ringed = false
		if t.exited {
			continue
		}
		t.vr = max(t.vr, memberVr+int64(i))
		if holds[t] {
			continue
		}
		t.vcpu = nil
		t.parked = true
		v := k.vcpus[0]
		if t.last >= 0 && t.last < len(k.vcpus) {
			v = k.vcpus[t.last]
		}
		k.enqueue(v, t)
	}
}

// ringOf is the open ring t is a member of, or nil (k.mu held).
func (k *Kernelet) ringOf(t *Task) *ring {
	for _, r := range k.delegated {
		if r.members[t] {
			return r
		}
	}
	return nil
}

// groupRing is the open ring whose members t is an equal of, or nil (k.mu held).
func (k *Kernelet) groupRing(t *Task) *ring {
	for _, r := range k.delegated {
		if k.equalOf(r.proto, t, r.same) {
			return r
		}
	}
	return nil
}

// joinBalanced reports whether r may take one member more, with dVCPUs vCPUs more, and stay
// balanced with the other open rings (k.mu held).
func (k *Kernelet) joinBalanced(r *ring, dVCPUs int) bool {
	if len(k.delegated) == 1 {
		return true
	}
	return balanced(len(k.delegated), func(i int) (int, int) {
		x := k.delegated[i]
		if x == r {
			return len(x.members) + 1, len(x.vcpus) + dVCPUs
		}
		return len(x.members), len(x.vcpus)
	})
}

// memberVr is a member's virtual runtime now: equals taking turns ran alike, each its share of
// the ring's vCPU time since the start (k.mu held; members are equals, of one weight).
func (r *ring) memberVr(now int64) int64 {
	if len(r.members) == 0 {
		return r.vr
	}
	share := (now - r.start) * int64(len(r.vcpus)) / int64(len(r.members))
	return r.vr + share*nice0Weight/r.proto.weight()
}

func compareSeq(a, b *Task) int {
	switch {
	case a.seq < b.seq:
		return -1
	case a.seq > b.seq:
		return 1
	}
	return 0
}

// lockMember locks the kernelet for a call of a task that holds a vCPU outside any ring, or
// none: the rings stay. Should the task be a member (its context still in a ring), the rings are
// taken back, as the kernelet cannot tell where it runs.
func (k *Kernelet) lockMember(t *Task) {
	k.mu.Lock()
	if t.ringed && len(k.delegated) != 0 {
		k.endRing()
	}
}

// lockTaking locks the kernelet for a call that changes what a ring was opened for (priorities,
// affinity, vCPUs), taking the rings back first.
func (k *Kernelet) lockTaking() {
	k.mu.Lock()
	if len(k.delegated) != 0 {
		k.endRing()
	}
}
