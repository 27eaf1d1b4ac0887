package kernel

import (
	"encoding/binary"
	"time"

	"github.com/endovisor/endo/sandbox/kernelet"
	"golang.org/x/sys/unix"
)

// The scheduling system calls. Policies, priorities and affinities act only inside the pod: the
// kernelet orders the pod's tasks over the pod's vCPUs, and the host sees none of it. So there is
// no capability check (the tenant is root in its pod), and a SCHED_FIFO tenant cannot starve
// anything outside the sandbox.

// Linux's constants the x/sys package does not export for these calls.
const (
	schedResetOnFork = 0x40000000
	schedDeadline    = 6
	prioProcess      = 0
	prioPgrp         = 1
	prioUser         = 2
	maxRTPrio        = 99
	// maxAffinityBytes bounds how much of a tenant's affinity mask is read (8192 vCPUs).
	maxAffinityBytes = 1024
)

// sched_yield: the task goes behind the tasks of its rank that wait for its vCPU.
func sysSchedYield(t *Task, a sysargs) (uint64, error) {
	if t.pendingSignal() || t.fast && (t.resumeFlags != 0 || t.esc != nil) {
		// A signal is to be delivered; or a patched call's return needs its full state first.
		if t.kt.Yield() {
			t.spare = false
		}
		return 0, nil
	}
	// The yielder waits parked, as a preempted task does (task.go): its carrier sleeps, and
	// equals of one process that yield to each other can be handed to a ring, whose runners
	// then take the yields as turns without the sandbox (the stub's rotate). From a patched
	// call it waits in the call (crossing's Park): the other process's carrier resumes it.
	t.th.Regs.Rax = 0
	if t.giveWayParked(t.kt.YieldPark) {
		// Hand them to a ring now rather than at the preemption ticker's next look, which a
		// busy host makes late (weight.go).
		t.p.k.sched.Delegate(sameStub, openRing)
	}
	return 0, nil
}

// schedTarget finds the task a scheduling call names: 0 is the caller; else a thread id, which
// for a process's first thread is its pid.
func schedTarget(t *Task, id int) (*Task, error) {
	if id < 0 {
		return nil, unix.EINVAL
	}
	if id == 0 || id == t.tid {
		return t, nil
	}
	if p := t.p.k.lookup(id); p != nil {
		if x := p.schedTask(id); x != nil {
			return x, nil
		}
	}
	for _, p := range t.p.k.processes() {
		if x := p.schedTask(id); x != nil {
			return x, nil
		}
	}
	return nil, unix.ESRCH
}

// schedTask finds a task of the process that has its place in the kernelet (run sets kt under
// p.mu, once).
func (p *Process) schedTask(tid int) *Task {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.tasks {
		if t.tid == tid && t.kt != nil {
			return t
		}
	}
	return nil
}

// processes lists the kernel's live processes.
func (k *Kernel) processes() []*Process {
	k.mu.Lock()
	defer k.mu.Unlock()
	ps := make([]*Process, 0, len(k.procs))
	for _, p := range k.procs {
		ps = append(ps, p)
	}
	return ps
}

// liveTasks lists a process's tasks that have a place in the kernelet.
func (p *Process) liveTasks() []*Task {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ts []*Task
	for _, t := range p.tasks {
		if t.kt != nil {
			ts = append(ts, t)
		}
	}
	return ts
}

// affinityBytes is the size of the kernel's CPU mask for n vCPUs, in whole 64-bit words, as
// Linux sizes it by its CPU count.
func affinityBytes(n int) int { return (n + 63) / 64 * 8 }

// sched_getaffinity shows the vCPUs the task may use among the sandbox's, so nproc and runtimes
// size themselves to N. It returns the mask's size, as the raw call does.
func sysSchedGetaffinity(t *Task, a sysargs) (uint64, error) {
	x, err := schedTarget(t, int(int32(a[0])))
	if err != nil {
		return 0, err
	}
	size := affinityBytes(t.p.k.sched.N())
	if a[1] < uint64(size) || a[1]%8 != 0 {
		return 0, unix.EINVAL
	}
	set := x.kt.Affinity()
	b := make([]byte, size)
	for i := range size / 8 {
		if i < len(set) {
			binary.LittleEndian.PutUint64(b[8*i:], set[i])
		}
	}
	if err := t.p.k.svc.CopyOut(t.p.as, a[2], b); err != nil {
		return 0, err
	}
	return uint64(size), nil
}

// sched_setaffinity limits a task to some of the pod's vCPUs; a mask with none of them is
// EINVAL. The caller moves at once if it may no longer use its vCPU.
func sysSchedSetaffinity(t *Task, a sysargs) (uint64, error) {
	x, err := schedTarget(t, int(int32(a[0])))
	if err != nil {
		return 0, err
	}
	n := min(a[1], maxAffinityBytes)
	b := make([]byte, (n+7)/8*8)
	if err := t.p.k.svc.CopyIn(t.p.as, b[:n], a[2]); err != nil {
		return 0, err
	}
	var set kernelet.CPUSet
	for i := 0; i < len(b); i += 8 {
		set = append(set, binary.LittleEndian.Uint64(b[i:]))
	}
	if set == nil {
		set = kernelet.CPUSet{} // an empty mask, not "every vCPU"
	}
	if !x.kt.SetAffinity(set, x == t) {
		return 0, unix.EINVAL
	}
	if x == t {
		t.yield() // off a vCPU it may no longer use
	}
	return 0, nil
}

// priorityTargets lists the tasks that getpriority and setpriority name.
func priorityTargets(t *Task, which, who int) ([]*Task, error) {
	switch which {
	case prioProcess:
		x, err := schedTarget(t, who)
		if err != nil {
			return nil, err
		}
		return []*Task{x}, nil
	case prioPgrp:
		k := t.p.k
		k.mu.Lock()
		pgid := who
		if pgid == 0 {
			pgid = t.p.pgid
		}
		var ps []*Process
		for _, p := range k.procs {
			if p.pgid == pgid {
				ps = append(ps, p)
			}
		}
		k.mu.Unlock()
		var ts []*Task
		for _, p := range ps {
			ts = append(ts, p.liveTasks()...)
		}
		if len(ts) == 0 {
			return nil, unix.ESRCH
		}
		return ts, nil
	case prioUser:
		// Every tenant process runs as uid 0.
		if who != 0 {
			return nil, unix.ESRCH
		}
		var ts []*Task
		for _, p := range t.p.k.processes() {
			ts = append(ts, p.liveTasks()...)
		}
		return ts, nil
	}
	return nil, unix.EINVAL
}

// getpriority returns 20-nice (1..40) of the target with the highest priority, as the raw call
// does (the C library turns it back into a nice value).
func sysGetpriority(t *Task, a sysargs) (uint64, error) {
	ts, err := priorityTargets(t, int(int32(a[0])), int(int32(a[1])))
	if err != nil {
		return 0, err
	}
	best := 19
	for _, x := range ts {
		best = min(best, x.kt.Nice())
	}
	return uint64(20 - best), nil
}

// setpriority sets the nice value (clamped to -20..19) of the targets.
func sysSetpriority(t *Task, a sysargs) (uint64, error) {
	ts, err := priorityTargets(t, int(int32(a[0])), int(int32(a[1])))
	if err != nil {
		return 0, err
	}
	nice := min(max(int(int32(a[2])), -20), 19)
	self := false
	for _, x := range ts {
		x.kt.SetNice(nice, x == t)
		self = self || x == t
	}
	if self {
		t.yield() // a task that lowered itself gives way to the ones it no longer outranks
	}
	return 0, nil
}

// readSchedParam reads a struct sched_param (one int: the rt priority).
func (t *Task) readSchedParam(addr uint64) (int, error) {
	var b [4]byte
	if err := t.p.k.svc.CopyIn(t.p.as, b[:], addr); err != nil {
		return 0, err
	}
	return int(int32(binary.LittleEndian.Uint32(b[:]))), nil
}

// checkPolicy validates a policy and rt priority as Linux does: 1..99 for FIFO and RR, 0 for
// the others; SCHED_DEADLINE and unknown policies are EINVAL.
func checkPolicy(policy, prio int) (kernelet.Policy, error) {
	p := kernelet.Policy(policy)
	if policy == schedDeadline || !p.Valid() {
		return 0, unix.EINVAL
	}
	if p.RealTime() != (prio >= 1 && prio <= maxRTPrio) {
		return 0, unix.EINVAL
	}
	return p, nil
}

func sysSchedSetscheduler(t *Task, a sysargs) (uint64, error) {
	return t.setPolicy(int(int32(a[0])), a[2], func(*Task) int { return int(int32(a[1])) &^ schedResetOnFork })
}

// setPolicy is sched_setscheduler and sched_setparam: policy gives the policy to set on the
// target (the caller's, or the target's own).
func (t *Task) setPolicy(pid int, paramAddr uint64, policy func(x *Task) int) (uint64, error) {
	x, err := schedTarget(t, pid)
	if err != nil {
		return 0, err
	}
	prio, err := t.readSchedParam(paramAddr)
	if err != nil {
		return 0, err
	}
	p, err := checkPolicy(policy(x), prio)
	if err != nil {
		return 0, err
	}
	x.kt.SetPolicy(p, prio, x == t)
	if x == t {
		t.yield()
	}
	return 0, nil
}

func sysSchedGetscheduler(t *Task, a sysargs) (uint64, error) {
	x, err := schedTarget(t, int(int32(a[0])))
	if err != nil {
		return 0, err
	}
	p, _ := x.kt.Policy()
	return uint64(p), nil
}

func sysSchedSetparam(t *Task, a sysargs) (uint64, error) {
	return t.setPolicy(int(int32(a[0])), a[1], func(x *Task) int {
		cur, _ := x.kt.Policy()
		return int(cur)
	})
}

func sysSchedGetparam(t *Task, a sysargs) (uint64, error) {
	x, err := schedTarget(t, int(int32(a[0])))
	if err != nil {
		return 0, err
	}
	_, prio := x.kt.Policy()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], uint32(prio))
	return 0, t.p.k.svc.CopyOut(t.p.as, a[1], b[:])
}

func sysSchedGetPriorityMax(t *Task, a sysargs) (uint64, error) {
	p := kernelet.Policy(int32(a[0]))
	switch {
	case !p.Valid():
		return 0, unix.EINVAL
	case p.RealTime():
		return maxRTPrio, nil
	}
	return 0, nil
}

func sysSchedGetPriorityMin(t *Task, a sysargs) (uint64, error) {
	p := kernelet.Policy(int32(a[0]))
	switch {
	case !p.Valid():
		return 0, unix.EINVAL
	case p.RealTime():
		return 1, nil
	}
	return 0, nil
}

// sched_rr_get_interval reports the kernelet's slice; a FIFO task has none (0).
func sysSchedRRGetInterval(t *Task, a sysargs) (uint64, error) {
	x, err := schedTarget(t, int(int32(a[0])))
	if err != nil {
		return 0, err
	}
	var d time.Duration
	if p, _ := x.kt.Policy(); p != kernelet.FIFO {
		d = kernelet.Slice
	}
	ts := unix.NsecToTimespec(int64(d))
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(ts.Sec))
	binary.LittleEndian.PutUint64(b[8:], uint64(ts.Nsec))
	return 0, t.p.k.svc.CopyOut(t.p.as, a[1], b[:])
}
