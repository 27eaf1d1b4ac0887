package kernel

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/endovisor/endo/crossing"
)

// A task's home: the host CPU its hand-offs sleep on. A round trip of the crossing wakes the stub
// thread and then the carrier (and the control thread when memory is mapped), and on a
// paravirtualised host a wake-up onto another CPU costs far more than one on the waker's own
// (MEASURED.md). So while a task's round trips sleep (no spare vCPU to spin on) and its tenant
// code runs only briefly between calls, its carrier, its stub thread and, alone in its process,
// the stub's control thread are put on one CPU. Tasks settle on the sandbox's CPUs in turn: two
// that hand off to each other (a pipe, a futex) then go on each on its own CPU while the other
// wakes (measured, a round trip: futex 27-42 us so, 68-82 with both on one CPU; pipe 83-101
// against 99-102). A forked child settles where its parent is, which waits for it. One that
// finds its CPU crowded (waits for it) leaves, and next settles where Linux has put it.
// Tenant code that runs long, a preemption or a spin floats them again: Linux must stay free to
// spread a pod's busy threads over its CPUs, and a spinning side needs a CPU of its own. So does
// a crowded kernelet (tasks wait for vCPUs, or take turns in a ring): a task's stub thread then
// runs other tasks' code too, busy ones, and pinned it kept two of the pod's runners on one CPU
// at times. sched-fair's lock row (four of its threads lock and unlock all along, and settled),
// 11 interleaved pairs: the sibling had 0.954-0.993 (mean 0.978) with settling, 0.973-1.009
// (mean 0.992) with none.

const (
	settleAfter = 4    // brief round trips in a row before a task settles
	briefMicros = 1000 // a round trip shorter than this is brief
	// A settled task that has not waited in the kernel lately (it hands off to no one) looks
	// every lookEvery round trips at how long its carrier waited for its CPU: more than
	// 1/crowdedShare of the time, and another busy thread is there (two settled busy loops
	// where the pod had a CPU free, or a neighbour): it floats, for unsettledTrips. Measured:
	// two settled loops of sched_yield on one CPU wait 36-40% of the time; pipe ping-pong on one
	// CPU, where the waker's going to sleep is what the wakee waits for, 25-30%.
	lookEvery      = 32
	crowdedShare   = 3
	unsettledTrips = 2048
)

type home struct {
	cpu   int  // the host CPU the task's threads are on; crossing.Anywhere while they float
	brief int  // brief round trips in a row (negative: kept floating that many more)
	own   bool // it was crowded out of the CPU it had: it settles where it is
	at    int  // the CPU it settles on first, plus one (its parent's: inherit); 0: none
	trips int  // round trips since the last look

	stat          *os.File // the carrier's /proc/thread-self/schedstat, open while settled
	since, waited int64    // at the last look: the time, the carrier's total wait for its CPU
}

// place puts the task's threads where its next round trip wants them, before it resumes tenant
// code: floating if it spins, else at home once its calls have come briefly enough.
func (t *Task) place(spinning bool) {
	h := &t.home
	switch {
	case spinning || t.p.k.sched.Crowded():
		t.float()
	case h.cpu == crossing.Anywhere && h.brief >= settleAfter:
		var cpu int
		switch {
		case h.at > 0:
			cpu, h.at = h.at-1, 0
		case h.own:
			cpu = crossing.CurrentCPU()
		default:
			cpu = t.p.k.nextHome()
		}
		if cpu == crossing.Anywhere || crossing.PinThread(0, cpu) != nil {
			h.brief = 0
			break
		}
		h.cpu = cpu
		h.trips = 0
		h.since, h.waited = time.Now().UnixNano(), h.runDelay()
	case h.cpu != crossing.Anywhere && h.trips >= lookEvery && t.spin.calmed():
		now, waited := time.Now().UnixNano(), h.runDelay()
		if (waited-h.waited)*crowdedShare > now-h.since {
			t.float()
			h.brief = -unsettledTrips
			h.own = true
			break
		}
		h.trips = 0
		h.since, h.waited = now, waited
	}
	t.th.Pin(h.cpu)
}

// nextHome is the CPU the next task to settle settles on: the sandbox's CPUs in turn.
func (k *Kernel) nextHome() int {
	cpus := crossing.StartCPUs()
	if len(cpus) == 0 {
		return crossing.Anywhere
	}
	return cpus[int(k.homes.Add(1)-1)%len(cpus)]
}

// inherit makes a new task (a child, a thread) of parent's settle at once where parent is
// settled: the two hand off to each other (a fork and a wait, an exec and an exit), and the new
// one's first calls come before it could settle by itself.
func (h *home) inherit(parent *home) {
	if parent.cpu != crossing.Anywhere {
		h.at, h.brief, h.own = parent.cpu+1, settleAfter, parent.own
	}
}

// runDelay is how long the carrier's thread has waited for a CPU in all, in nanoseconds, or 0 if
// the host does not say.
func (h *home) runDelay() int64 {
	if h.stat == nil {
		f, err := os.Open("/proc/thread-self/schedstat")
		if err != nil {
			return 0
		}
		h.stat = f
	}
	var buf [96]byte
	n, _ := h.stat.ReadAt(buf[:], 0)
	f := strings.Fields(string(buf[:n]))
	if len(f) < 2 {
		return 0
	}
	d, _ := strconv.ParseInt(f[1], 10, 64)
	return d
}

// ran counts a round trip of elapsed cycles that ended in a trap of kind: a long one or a
// preemption means busy tenant code, which floats.
func (t *Task) ran(elapsed uint64, kind crossing.TrapKind) {
	h := &t.home
	if kind == crossing.TrapPreempt || elapsed > briefMicros*crossing.CyclesPerMicrosecond() {
		h.brief = min(h.brief, 0)
		t.float()
		return
	}
	h.brief++
	h.trips++
}

// float lets Linux place the carrier again; the stub's threads follow at the next place.
func (t *Task) float() {
	h := &t.home
	if h.cpu != crossing.Anywhere {
		crossing.PinThread(0, crossing.Anywhere)
		h.cpu = crossing.Anywhere
	}
	if h.stat != nil {
		h.stat.Close() // it is the carrier thread's: the thread may go back to the runtime
		h.stat = nil
	}
}
