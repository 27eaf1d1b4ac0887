package kernelet

import (
	"slices"
	"time"
)

// A ring hands vCPUs and waiting tasks to the stub of one process while they are all equals of
// that process: its runners then take turns among the tasks on their own timers, and no sandbox
// thread wakes for a slice.
//
// The ring's vCPUs are "attached": their runners take turns, and the kernelet does not know which
// member runs where. Its members are the tasks on those runners or parked in the stub's ring. A
// member that traps leaves the ring with its runner's vCPU (Acquire), and joins it again when it
// goes back to tenant code as an equal (JoinRing); a task that parks while a ring is open joins
// it parked. A vCPU let go of goes to a waiting task, else back to the ring with a parked member
// (Grow); a task that wakes and finds no vCPU free takes one from the ring (Shrink: the runner's
// member traps and gives it way). Anything else (a task that is no equal, a change of priority,
// affinity or vCPUs, the process's end) takes the whole ring back (endRing).

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
	if k.ring != nil {
		s.Open += time.Duration(k.now() - k.ring.start)
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

// Delegate gives the vCPUs and the waiting tasks to a ring if every vCPU is held by a task running
// tenant code and every waiting task is parked, all equals of one group (same says whether two
// tasks belong to one). open is called under the kernelet's lock with the holders, the vCPUs they
// hold (in the same order) and the waiting tasks (in the order they would run); it must only flip
// shared memory, and
// returns the ring's operations, or false if the ring cannot be had. Delegate reports whether the
// ring was opened; then no task waits any more as far as Overdue is concerned.
func (k *Kernelet) Delegate(same func(a, b *Task) bool, open func(held []*Task, vcpus []*VCPU, parked []*Task) (RingOps, bool)) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ring != nil || k.onRun == nil || len(k.runs) != 0 || k.waiting == 0 {
		return false
	}
	var held, parked []*Task
	var vcpus []*VCPU
	for _, v := range k.vcpus {
		h := v.holder
		if v.retiring || v.lent || h == nil || !h.InTenant.Load() ||
			len(held) > 0 && !k.equalOf(held[0], h, same) || !k.equalOf(h, h, same) {
			return false
		}
		held = append(held, h)
		vcpus = append(vcpus, v)
		for _, t := range v.queue {
			if !t.parked || !k.equalOf(h, t, same) {
				return false
			}
			parked = append(parked, t)
		}
	}
	if len(parked) != k.waiting {
		return false
	}
	slices.SortFunc(parked, func(a, b *Task) int { // the order they would run in
		switch {
		case before(a, b):
			return -1
		case before(b, a):
			return 1
		}
		return 0
	})
	ops, ok := open(held, vcpus, parked)
	if !ok {
		return false
	}
	now := k.now()
	r := &ring{ops: ops, same: same, proto: held[0], members: map[*Task]bool{}, start: now, vr: held[0].vr}
	for _, h := range held {
		h.charge(now)
		v := h.vcpu
		v.holder, v.ring, h.vcpu = nil, true, nil
		r.vcpus = append(r.vcpus, v)
		r.members[h] = true
		h.ringed = true
	}
	for _, t := range parked {
		k.dequeue(t)
		r.members[t] = true
		t.ringed = true
		r.vr = min(r.vr, t.vr)
	}
	k.ring = r
	k.ringOpen.Store(true)
	k.rings.Opened++
	return true
}

// ringAcquire serves Acquire while a ring is open (k.mu held). A member that trapped leaves the
// ring with its runner's vCPU (returned in v). A task that finds no free vCPU takes one from the
// ring if it is an equal: it is queued on it (queued), or, new and able to (park), joins the ring
// parked (parked). handled is false when the caller is to go on as without a ring: a vCPU is
// free, or the ring gives none, or was taken back (the task is no equal).
func (k *Kernelet) ringAcquire(t *Task, park func() bool) (v *VCPU, queued, parked, handled bool) {
	r := k.ring
	if t.ringed {
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
	if !k.equalOf(r.proto, t, r.same) {
		k.endRing()
		return nil, false, false, false
	}
	if t.fresh && park != nil && park() {
		t.fresh = false
		t.parked = true
		if r.ops.Park(t) {
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
	if r := k.ring; r != nil && v.taken && v.holder == nil && now-v.takenAt >= int64(askAgainAfter) {
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
	r, v := k.ring, t.vcpu
	if r == nil || t.ringed || v == nil || v.taken || v.retiring || k.waiting > 0 ||
		!k.equalOf(r.proto, t, r.same) || !r.ops.Attach(t, v) {
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
	r := k.ring
	if r == nil || !t.parked || t.queued == nil || !k.equalOf(r.proto, t, r.same) {
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
	r := k.ring
	if r == nil || v.retiring || !v.free() {
		return
	}
	if g := r.ops.Grow(v); g != nil {
		v.ring = true
		r.vcpus = append(r.vcpus, v)
	}
}

// endRing takes a ring's vCPUs and tasks back (k.mu held): each attached vCPU goes to the task
// its runner holds now, the other members wait parked, behind in the order of their virtual
// runtimes as before the ring (they all ran alike meanwhile). The ticker is started again after
// the lock is released, as tasks wait.
func (k *Kernelet) endRing() {
	r := k.ring
	if r == nil {
		return
	}
	k.ring = nil
	k.ringOpen.Store(false)
	now := k.now()
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
	for _, v := range k.vcpus {
		if v.taken && v.holder == nil {
			v.taken = false // its member ended before it could give it up
		}
		if v.free() {
			k.dispatch(v)
		}
	}
	if k.waiting > 0 && k.onWait != nil {
		go k.onWait() // the ticker; it takes locks of its own
	}
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
// none: the ring stays. Should the task be a member (its context still in the ring), the ring is
// taken back, as the kernelet cannot tell where it runs.
func (k *Kernelet) lockMember(t *Task) {
	k.mu.Lock()
	if t.ringed && k.ring != nil {
		k.endRing()
	}
}

// lockTaking locks the kernelet for a call that changes what a ring was opened for (priorities,
// affinity, vCPUs), taking the ring back first.
func (k *Kernelet) lockTaking() {
	k.mu.Lock()
	if k.ring != nil {
		k.endRing()
	}
}
