package crossing

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func affinityOf(t *testing.T, tid int) unix.CPUSet {
	t.Helper()
	var set unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(tid, &set))
	return set
}

func only(cpu int) unix.CPUSet {
	var set unix.CPUSet
	set.Set(cpu)
	return set
}

// lastCPU is the highest CPU the calling thread may run on.
func lastCPU(t *testing.T) (int, unix.CPUSet) {
	all := affinityOf(t, 0)
	for cpu := len(all)*64 - 1; cpu >= 0; cpu-- {
		if all.IsSet(cpu) {
			return cpu, all
		}
	}
	t.Fatal("no CPU allowed")
	return 0, all
}

// A thread put on a CPU runs there, and Anywhere gives it back every CPU it had.
func TestPinThreadMovesTheCaller(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu, all := lastCPU(t)
	defer unix.SchedSetaffinity(0, &all)

	require.NoError(t, PinThread(0, cpu))
	require.Equal(t, cpu, CurrentCPU())
	require.Equal(t, only(cpu), affinityOf(t, 0))
	require.NoError(t, PinThread(0, Anywhere))
	require.Equal(t, all, affinityOf(t, 0))

	require.Error(t, PinThread(0, 1<<12), "a CPU the host does not have")
}

// Pin puts a context's runner on a CPU, and the control thread with it only while the context is
// its tenant's only thread; Anywhere undoes both, and the tenant runs on wherever it is put.
func TestPinPutsRunnerAndControlThread(t *testing.T) {
	code := []byte{
		0xb8, 39, 0, 0, 0, // mov $39 (getpid), %eax
		0x0f, 0x05, // syscall
		0xeb, 0xf7, // jmp back to the start
	}
	s, th := startTenant(t, code)
	cpu, all := lastCPU(t)
	require.NotZero(t, s.controlTid)
	require.NotEqual(t, s.Pid(), s.controlTid)

	s.SetSingle(true)
	th.Pin(cpu)
	require.Equal(t, only(cpu), affinityOf(t, th.Tid()), "the runner")
	require.Equal(t, only(cpu), affinityOf(t, s.controlTid), "the control thread")
	require.NoError(t, th.Resume(ResumeResetFPU, 0, 0))
	require.Equal(t, uint64(unix.SYS_GETPID), th.Regs.Orig_rax)

	s.SetSingle(false)
	th.Pin(cpu)
	require.Equal(t, only(cpu), affinityOf(t, th.Tid()))
	require.Equal(t, all, affinityOf(t, s.controlTid), "it serves several threads: anywhere")

	th.Pin(Anywhere)
	require.Equal(t, all, affinityOf(t, th.Tid()))
	require.NoError(t, th.Resume(0, 0, 0))
	require.Equal(t, uint64(unix.SYS_GETPID), th.Regs.Orig_rax)
}

// The CPUs tasks settle on are those the sandbox started on (taskset, a cpuset).
func TestStartCPUsAreTheStartAffinity(t *testing.T) {
	var set unix.CPUSet
	for _, cpu := range StartCPUs() {
		set.Set(cpu)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.Equal(t, affinityOf(t, 0), set)
}
