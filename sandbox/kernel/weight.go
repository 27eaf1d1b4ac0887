package kernel

import (
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// The sandbox's weight on the host. Linux divides a CPU between the cgroups with runnable threads
// there by weight, and a cgroup's weight on a CPU follows the weight of its runnable threads on
// it. The kernelet keeps at most N stub threads running, but the Go runtime's own threads of the
// sandbox (woken to run goroutines, or spinning to find some) are runnable now and then too, and
// at the default weight each made the pod heavier: with 50 busy tenant threads on 2 vCPUs, the
// pod took 1.46 CPUs from a sibling cgroup of equal weight. So those threads run at nice 19
// (weight 15 against 1024). Stub threads run at nice 0 (the stub sets it), and so do carriers,
// which take turns with their stubs: lower, a carrier woken to take a free vCPU would wait
// behind the pod's running threads for its little share (a pipe round trip took 27x native).
//
// A thread that is runnable often but briefly weighs more than its CPU time: Linux sizes a
// cgroup's weight on each CPU from the larger of its runnable threads' weights there and their
// load average, so every short wake-up at nice 0 lifts the pod's share for a moment (seen in
// /sys/kernel/debug/sched/debug beside 50 busy threads in two processes: the pod's per-CPU
// weights summed to 1.05-1.12 times its own). The time slice's ticker (then waking every 5 ms)
// runs at nice 19 for that: the sibling's share went from 0.84-0.99 (mean 0.90, nine runs) to
// 0.90-1.02 (mean 0.96, ten runs); at nice 5 it was 0.82-0.87. The cost is slices that overrun
// while the pod's vCPUs are busy, as the ticker waits for a CPU: 50 busy threads in two
// processes, 5 s, no sibling: 58-66 holds of a vCPU longer than 30 ms (longest 131-432 ms),
// against 6-28 (58-102 ms) at nice 0. Slices timed by the runners themselves, as a ring's are,
// would need neither.

const (
	niceCarrier = 0  // a task's carrier, like its stub thread
	niceSandbox = 19 // every other thread of the sandbox
)

// The pod's threads stay SCHED_OTHER on the host. SCHED_BATCH for the stubs' threads (a woken
// thread never preempts the one running on its CPU, so a runner woken to take over from a waker
// that then sleeps cannot leave that waker runnable beside it until the next tick) cut the runs
// in which the probe saw three of 50 busy tasks on 2 vCPUs from 10 of 40 to 2 of 40, but a wakee
// put on a CPU where a neighbour runs waits for the tick, and thread creation is a run of such
// hand-offs: 50 threads in two processes beside a sibling cgroup's busy loops took 3.1 s to start
// (mean of 10) against 1.8 s, 4.3 s with the carriers at SCHED_BATCH too, and the two processes'
// rings, which open only once the threads are up, stayed shut for most of a 5 s window in 2 of 8
// runs (TestProbeTwoProcessesTakeTurns).

// batchWhile puts the calling thread, locked to its goroutine, in SCHED_BATCH at its nice until
// the returned function is called: for the probe, which must not make what it measures. At
// SCHED_OTHER its timer's wake-up preempted a carrier that had just handed its vCPU on and was
// about to sleep, and the sample it then took counted that carrier as runnable beside the task
// it had handed to (traced, 1 vCPU: 97 us). A SCHED_BATCH thread woken never preempts; it waits
// for the running thread to sleep or for the host's tick. A busy thread and a SCHED_FIFO one
// that sleeps 2 ms 500 times on 1 vCPU, 12 interleaved runs each: samples that saw both
// runnable, 26 of 4977 at SCHED_OTHER, 6 of 4923 at SCHED_BATCH. The probe takes some 20% fewer
// samples so (50 busy threads on 2 vCPUs: 197 a run against 242).
func batchWhile() (undo func()) {
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil || a.Policy != unix.SCHED_NORMAL {
		return func() {}
	}
	if unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_BATCH, Nice: a.Nice}, 0) != nil {
		return func() {}
	}
	return func() {
		unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL, Nice: a.Nice}, 0)
	}
}

// runtimeProcs sets the Go runtime's P count to one more than the pod has vCPUs (at least
// three). A P is what lets a thread run Go code. A carrier asleep (its stub's next trap, its turn
// at a vCPU) gives its P back as it goes to sleep (crossing.BlockingSyscall6), so only the N
// carriers that hold a vCPU, those spinning on a spare one, and the sandbox's own goroutines need
// one. When a sleeping carrier kept its P until the runtime's monitor took it back (a thread at
// nice 19, which beside busy threads ran only every ~95 ms), each live carrier had a P of its own:
// eight threads that only yield while the main thread slept 2 ms at a time took 12 s for 2000
// sleeps on 1 vCPU and 27 s on 2 with N+1 Ps, 4.8 s and 7.1 s with a P for each carrier. Now
// sched-perf's row 6 (the same load) is as late with N+1 Ps as with a P for each carrier (2.23x
// and 2.44x of Linux in two runs, against 2.52x and 2.18x), and no thread's start changes the
// count: each change stops the world, and a new thread's carrier waited up to 3 ms for that
// beside the pod's two runners, which the probe counted as three runnable.
//
// Earlier, when the runtime's threads ran at nice 0, more Ps meant more of them awake beside the
// N that hold a vCPU (measured on 2 CPUs with 50 busy tasks beside a sibling cgroup: 2 Ps,
// sibling 0.84-0.88 of its share; 3 Ps, 0.74-0.80; 5 Ps, 0.75); at nice 19 they weigh 15 against
// 1024. The one more than N is for the sandbox's own goroutines (a pipe read's poll, the probe):
// two processes yielding to each other on one vCPU alternated less than 0.9 of the time in 4 of
// 12 runs with N Ps, as the one woken from a pipe read waited for a P. The runtime stops the
// world only when the count changes.
func runtimeProcs(vcpus int) {
	runtime.GOMAXPROCS(max(vcpus, 2) + 1)
}

// atCarrierWeight runs the calling goroutine on a thread of its own at the carriers' weight until
// the returned function is called: for the sandbox's own clock that tasks wait on (the probe),
// which at nice 19 would run late whenever the pod's vCPUs are busy.
func (k *Kernel) atCarrierWeight() (done func()) {
	runtime.LockOSThread()
	if k.lowWeight {
		unix.Setpriority(unix.PRIO_PROCESS, 0, niceCarrier)
	}
	return func() {
		if k.lowWeight {
			unix.Setpriority(unix.PRIO_PROCESS, 0, niceSandbox)
		}
		runtime.UnlockOSThread()
	}
}

// lowerWeight puts every thread of this process at niceSandbox; threads the Go runtime makes
// later inherit it (those made for locked threads come from its template thread, made here or
// later from one of these). It does nothing, and reports false, when the process may not raise a
// thread back to niceCarrier (no CAP_SYS_NICE): carriers would then weigh less than their stubs.
func lowerWeight() bool {
	if unix.Setpriority(unix.PRIO_PROCESS, 0, niceSandbox) != nil {
		return false
	}
	if unix.Setpriority(unix.PRIO_PROCESS, 0, niceCarrier) != nil {
		return false
	}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return false
	}
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			unix.Setpriority(unix.PRIO_PROCESS, tid, niceSandbox)
		}
	}
	return true
}
