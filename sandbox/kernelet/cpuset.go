package kernelet

import "math/bits"

// CPUSet is a set of vCPU IDs, as a bit mask in 64-bit words (Linux's cpu_set_t layout on
// x86-64). A nil set means every vCPU.
type CPUSet []uint64

// CPUSetOf makes a set of the given vCPU IDs.
func CPUSetOf(ids ...int) CPUSet {
	var s CPUSet
	for _, id := range ids {
		s = s.With(id)
	}
	return s
}

// With returns the set with id added.
func (s CPUSet) With(id int) CPUSet {
	if id < 0 {
		return s
	}
	for len(s) <= id/64 {
		s = append(s, 0)
	}
	s[id/64] |= 1 << (id % 64)
	return s
}

// Has reports whether id is in the set; a nil set has every id.
func (s CPUSet) Has(id int) bool {
	if s == nil {
		return true
	}
	return id >= 0 && id/64 < len(s) && s[id/64]&(1<<(id%64)) != 0
}

// Count is the number of ids in a non-nil set.
func (s CPUSet) Count() int {
	n := 0
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return n
}

func (s CPUSet) clone() CPUSet {
	if s == nil {
		return nil
	}
	return append(CPUSet{}, s...)
}

// allowed reports whether t may run on v. A task pinned only to vCPUs the sandbox no longer has
// may run anywhere, as Linux does when a cpuset shrinks under a task (k.mu held).
func (t *Task) allowed(v *VCPU) bool {
	if t.affinity.Has(v.ID) {
		return true
	}
	for i := 0; i < t.k.n; i++ {
		if t.affinity.Has(i) {
			return false
		}
	}
	return true
}

// Affinity returns the vCPUs the task may run on, among the sandbox's.
func (t *Task) Affinity() CPUSet {
	k := t.k
	k.mu.Lock()
	defer k.mu.Unlock()
	var s CPUSet
	for i := 0; i < k.n; i++ {
		if t.affinity.Has(i) {
			s = s.With(i)
		}
	}
	if s == nil {
		for i := 0; i < k.n; i++ {
			s = s.With(i)
		}
	}
	return s
}

// SetAffinity limits the task to the vCPUs of s that the sandbox has; it reports false (and
// changes nothing) when s holds none of them. A task that holds a vCPU outside the set moves
// when it next calls Preempted (it is kicked unless it is the caller, who should call
// Preempted itself).
func (t *Task) SetAffinity(s CPUSet, self bool) bool {
	k := t.k
	k.lockTaking()
	var set CPUSet
	for i := 0; i < k.n; i++ {
		if s.Has(i) {
			set = set.With(i)
		}
	}
	if set == nil {
		k.mu.Unlock()
		return false
	}
	if set.Count() == k.n {
		set = nil // every vCPU, including ones added later
	}
	t.affinity = set
	kicks := k.reconsider(t, self)
	k.mu.Unlock()
	k.doKicks(kicks)
	return true
}

// reconsider re-places a waiting task whose rank or affinity changed, and returns the holders to
// kick: t itself when it holds a vCPU it should leave (unless self), or the holder t now beats
// (k.mu held).
func (k *Kernelet) reconsider(t *Task, self bool) []*Task {
	if t.queued != nil {
		k.dequeue(t)
		return k.place(t)
	}
	v := t.vcpu
	if v == nil || self {
		return nil
	}
	if !t.allowed(v) {
		return []*Task{t}
	}
	if w := k.best(v); w != nil && k.shouldYieldTo(t, w, k.now(), wakeupGranularity, int64(Slice)) {
		return []*Task{t}
	}
	return nil
}

// Policy returns the task's policy and rt priority.
func (t *Task) Policy() (Policy, int) {
	t.k.mu.Lock()
	defer t.k.mu.Unlock()
	return t.policy, t.rtprio
}

// SetPolicy sets the policy and rt priority (1..99 for FIFO and RR, 0 for the others; the
// caller checks). Batch is kept as given (sched_getscheduler shows it) and scheduled as Other. self says the caller is the task itself (it should call Preempted after).
func (t *Task) SetPolicy(p Policy, rtprio int, self bool) {
	k := t.k
	k.lockTaking()
	t.charge(k.now())
	t.policy, t.rtprio = p, rtprio
	kicks := k.reconsider(t, self)
	k.mu.Unlock()
	k.doKicks(kicks)
}

// Nice returns the task's nice value.
func (t *Task) Nice() int {
	t.k.mu.Lock()
	defer t.k.mu.Unlock()
	return t.nice
}

// SetNice sets the nice value, clamped to -20..19.
func (t *Task) SetNice(nice int, self bool) {
	k := t.k
	k.lockTaking()
	t.charge(k.now())
	t.nice = min(max(nice, -20), 19)
	kicks := k.reconsider(t, self)
	k.mu.Unlock()
	k.doKicks(kicks)
}
