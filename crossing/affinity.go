package crossing

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Host CPUs of a stub's threads. On a paravirtualised host a wake-up onto another, idle CPU costs
// far more than one on the waker's own (MEASURED.md: a futex hand-off sleeping on one CPU 16x a
// getpid, across idle CPUs 25x, onto a busy CPU over 100x), and a round trip of the crossing is
// two such wake-ups, more when the control thread maps memory. So the sandbox may put a tenant
// thread's runner and the control thread on the CPU its carrier sleeps on. Runners and the
// control thread remember where they were put: asking again for the same costs one load.

// Anywhere is the CPU of a thread Linux places as it likes, among the CPUs the sandbox was
// started on (taskset, a cpuset), which startCPUs holds.
const Anywhere = -1

var startCPUs = func() unix.CPUSet {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		for i := range set {
			set[i] = ^set[i]
		}
	}
	return set
}()

// StartCPUs lists the CPUs the sandbox started on. The slice is shared: do not change it.
func StartCPUs() []int { return startList }

var startList = func() []int {
	var cpus []int
	for cpu := 0; cpu < len(startCPUs)*64; cpu++ {
		if startCPUs.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus
}()

// PinThread puts host thread tid (0: the calling thread) on cpu, or back on the CPUs the sandbox
// started on (Anywhere).
func PinThread(tid, cpu int) error {
	set := startCPUs
	if cpu != Anywhere {
		set.Zero()
		set.Set(cpu)
	}
	if err := unix.SchedSetaffinity(tid, &set); err != nil {
		return fmt.Errorf("thread %d to CPU %d: %w", tid, cpu, err)
	}
	return nil
}

// Where runners and the control thread were put is kept as placed(cpu); 0 is not known yet (a
// new thread has the affinity of whichever thread made it).
func placed(cpu int) int32 { return int32(cpu + 2) }

// floatRunner lets Linux place runner r again (s.mu held): a runner that takes turns in a ring
// runs every member's tenant code, busy ones too, and stays where the last settled context it
// ran had put it until a member's carrier places it, which a busy member never does. Pinned so,
// both runners of a ring could share one CPU while the other idled.
func (s *Stub) floatRunner(r int) {
	if s.runnerCPU[r].Load() == placed(Anywhere) {
		return
	}
	if tid := s.runnerTid(r); tid != 0 && PinThread(tid, Anywhere) == nil {
		s.runnerCPU[r].Store(placed(Anywhere))
	}
}

// Pin puts the runner that holds the context on cpu (Anywhere: back where Linux likes), and the
// stub's control thread with it while the context is its tenant's only thread (else the control
// thread serves several, and goes Anywhere). A runner keeps its CPU when it takes up another
// context, until that context's carrier pins it anew.
func (t *Thread) Pin(cpu int) {
	s := t.stub
	if r := t.runner(); r >= 0 && s.runnerCPU[r].Load() != placed(cpu) {
		if tid := s.runnerTid(r); tid != 0 && PinThread(tid, cpu) == nil {
			s.runnerCPU[r].Store(placed(cpu))
		}
	}
	control := cpu
	if atomic.LoadUint32(s.u32(sysmsgCmd+cmdSingle)) == 0 {
		control = Anywhere
	}
	if s.controlTid != 0 && s.controlCPU.Load() != placed(control) && PinThread(s.controlTid, control) == nil {
		s.controlCPU.Store(placed(control))
	}
}

// findControl returns the host thread id of the stub's control thread: at boot, the stub's only
// thread besides its main one (runners are started later, by the control thread).
func findControl(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, fmt.Errorf("stub %d threads: %w", pid, err)
	}
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid != pid {
			return tid, nil
		}
	}
	return 0, fmt.Errorf("stub %d: no control thread", pid)
}
