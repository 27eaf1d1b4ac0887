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

// Anywhere is the CPU of a thread Linux places as it likes, within what its cgroup allows.
const Anywhere = -1

// PinThread puts host thread tid (0: the calling thread) on cpu, or on every CPU its cgroup allows
// (Anywhere): Linux masks the set with the thread's cpuset, so it need not be known here.
func PinThread(tid, cpu int) error {
	var set unix.CPUSet
	if cpu == Anywhere {
		for i := range set {
			set[i] = ^set[i]
		}
	} else {
		set.Set(cpu)
	}
	if err := unix.SchedSetaffinity(tid, &set); err != nil {
		return fmt.Errorf("thread %d to CPU %d: %w", tid, cpu, err)
	}
	return nil
}

// Pin puts the runner that holds the context on cpu (Anywhere: back where Linux likes), and the
// stub's control thread with it while the context is its tenant's only thread (else the control
// thread serves several, and goes Anywhere). A runner keeps its CPU when it takes up another
// context, until that context's carrier pins it anew.
func (t *Thread) Pin(cpu int) {
	s := t.stub
	if r := t.runner(); r >= 0 && s.runnerCPU[r].Load() != int32(cpu+1) {
		if tid := s.runnerTid(r); tid != 0 && PinThread(tid, cpu) == nil {
			s.runnerCPU[r].Store(int32(cpu + 1))
		}
	}
	control := cpu
	if atomic.LoadUint32(s.u32(sysmsgCmd+cmdSingle)) == 0 {
		control = Anywhere
	}
	if s.controlTid != 0 && s.controlCPU.Load() != int32(control+1) && PinThread(s.controlTid, control) == nil {
		s.controlCPU.Store(int32(control + 1))
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
