package kernelet

import "slices"

// A ring hands the vCPUs and the waiting tasks to the stub of one process while they are all
// equals of that process: its runners then take turns among the tasks on their own timers, and
// no sandbox thread wakes for a slice. The kernelet keeps the tasks' places meanwhile (ringed),
// and takes them back (endRing) at the first call that changes anything: a task's trap
// (Acquire), a task waking elsewhere, an exit, a change of priority, affinity or vCPUs.

// ring is the state of a delegation (k.mu guards it).
type ring struct {
	vcpus   []*VCPU
	members []*Task
	close   func() []*Task
	start   int64
	vr      int64 // the members' virtual runtime at the start
}

// equalOf reports whether t may take turns with first: an ordinary task of the same weight that
// may run on every vCPU and has no OnRun call or spare under way (k.mu held).
func (k *Kernelet) equalOf(first, t *Task, same func(a, b *Task) bool) bool {
	if t.policy != Other && t.policy != Batch || t.weight() != first.weight() || t.inRun != 0 ||
		t.spare != nil || !same(first, t) {
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
// tasks belong to one). open is called under the kernelet's lock with the holders (in vCPU order)
// and the waiting tasks (in the order they would run); it must only flip shared memory, and
// returns false if the ring cannot be had, or the function that closes it: that returns, for each
// holder's place, the task that holds the vCPU now (nil: none). Delegate reports whether the ring
// was opened; then no task waits any more as far as Overdue is concerned.
func (k *Kernelet) Delegate(same func(a, b *Task) bool, open func(held, parked []*Task) (func() []*Task, bool)) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ring != nil || k.onRun == nil || len(k.runs) != 0 || k.waiting == 0 {
		return false
	}
	var held, parked []*Task
	for _, v := range k.vcpus {
		h := v.holder
		if v.retiring || v.lent || h == nil || !h.InTenant.Load() ||
			len(held) > 0 && !k.equalOf(held[0], h, same) || !k.equalOf(h, h, same) {
			return false
		}
		held = append(held, h)
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
	close, ok := open(held, parked)
	if !ok {
		return false
	}
	now := k.now()
	r := &ring{close: close, start: now}
	for _, h := range held {
		h.charge(now)
		r.vcpus = append(r.vcpus, h.vcpu)
		r.members = append(r.members, h)
	}
	r.vr = held[0].vr
	for _, t := range parked {
		k.dequeue(t)
		r.members = append(r.members, t)
		r.vr = min(r.vr, t.vr)
	}
	for _, t := range r.members {
		t.ringed = true
	}
	k.ring = r
	return true
}

// endRing takes a ring's vCPUs and tasks back (k.mu held): each vCPU goes to the task its runner
// holds now, the other members wait parked, behind in the order of their virtual runtimes as
// before the ring (they all ran alike meanwhile). The ticker is started again after the lock is
// released, as tasks wait.
func (k *Kernelet) endRing() {
	r := k.ring
	if r == nil {
		return
	}
	k.ring = nil
	now := k.now()
	got := r.close()
	// Equals taking turns ran alike: each got its share of the ring's vCPU time.
	share := (now - r.start) * int64(len(r.vcpus)) / int64(len(r.members))
	holds := map[*Task]bool{}
	for i, v := range r.vcpus {
		v.holder = nil
		if i < len(got) && got[i] != nil && got[i].ringed && !holds[got[i]] {
			t := got[i]
			holds[t] = true
			v.holder, t.vcpu = t, v
			t.since, t.got, t.last = now, now, v.ID
			t.parked = false
		}
	}
	for i, t := range r.members {
		t.ringed = false
		if t.exited {
			if t.vcpu != nil {
				t.vcpu.holder = nil
				t.vcpu = nil
			}
			continue
		}
		t.vr = max(t.vr, r.vr+share*nice0Weight/t.weight()+int64(i))
		if holds[t] {
			continue
		}
		t.vcpu = nil
		t.parked = true
		v := r.vcpus[0]
		if t.last >= 0 && t.last < len(k.vcpus) && k.vcpus[t.last] != nil {
			v = k.vcpus[t.last]
		}
		k.enqueue(v, t)
	}
	for _, v := range r.vcpus {
		if v.free() {
			k.dispatch(v)
		}
	}
	if k.waiting > 0 && k.onWait != nil {
		go k.onWait() // the ticker; it takes locks of its own
	}
}

// lockTaking locks the kernelet for a call that changes its state, taking a ring back first.
func (k *Kernelet) lockTaking() {
	k.mu.Lock()
	if k.ring != nil {
		k.endRing()
	}
}
