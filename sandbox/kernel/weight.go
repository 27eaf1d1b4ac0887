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
// weights summed to 1.05-1.12 times its own). The time slice's ticker, which wakes every 5 ms,
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

// sizeRuntime gives the Go runtime one P more than the pod has vCPUs (and at least three). A P is
// what lets a thread run Go code: with the host's CPU count instead, carriers on their way to or
// from a vCPU ran beside the N that hold one, and each weighed on the pod's share (measured on 2
// CPUs with 50 busy tasks beside a sibling cgroup, when the runtime's threads ran at nice 0: 2 Ps,
// sibling 0.84-0.88 of its share; 3 Ps, 0.74-0.80; 5 Ps, 0.75).
//
// The one more is for carriers woken by the host (a pipe read's poll): each needs a P to go on,
// and with N Ps none was free while carriers sat in their first, P-keeping wait and a thread at
// nice 19 held the rest without running. Linux gives a nice 19 thread a CPU beside a busy nice 0
// one only every ~95 ms (its deadline is its slice scaled by 1024/15), and the Go runtime's own
// monitor, which would take a P back, is such a thread: its trace showed gaps of 45 ms. Two
// processes yielding to each other on one vCPU: with 2 Ps, 4 runs in 12 alternated less than 0.9
// of the time (0.07-0.89: the one woken from a pipe read waited for a P while the other yielded to
// nobody), with 3 or 4 Ps none in 24. A later batch of 30 runs of 2000 yields with 3 Ps had 3
// under 0.5: there the woken carrier's thread slept (4 us of run queue wait in 19 ms), parked in
// the runtime for a P, while the stubs' reapers sat in waitid, each keeping its P, and the
// monitor that would take them back stayed runnable without running for 12 ms. The reapers now
// wait in the runtime's poller (crossing/reap.go): 0 of 40 runs under 0.5 with N+1 Ps, 3 of 40
// with N. Beside a sibling, 50 busy threads in two processes:
// sibling 0.94 on average with N Ps, 0.97 with N+1 (8 interleaved runs each; in a later batch of
// 6, 0.947 and 0.958, and with the kernelet's lead bound too 0.960); the lock row 0.983 and 0.975
// (7 runs); the probe saw more than 2 runnable in under 1% of samples either way.
func sizeRuntime(n int) { runtime.GOMAXPROCS(max(n, 2) + 1) }

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
