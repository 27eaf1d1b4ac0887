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

const (
	niceCarrier = 0  // a task's carrier, like its stub thread
	niceSandbox = 19 // every other thread of the sandbox
)

// atCarrierWeight runs the calling goroutine on a thread of its own at the carriers' weight until
// the returned function is called: for the sandbox's own clocks that tasks wait on (the time
// slice's ticker, the probe), which at nice 19 would run late whenever the pod's vCPUs are busy.
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
