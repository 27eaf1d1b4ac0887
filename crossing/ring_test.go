package crossing

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Two contexts take turns on one runner through the ring, on the runner's own slice timer: each
// counts on from where it stopped with its own FPU state, and nothing of the sandbox resumes
// either. The second never ran before: it starts from ParkFresh with the fresh FPU state (the
// x87 control word and MXCSR of a new thread). A runner put on a CPU (a settled task's) floats
// once it takes turns: it runs the busy members too.
func TestRingTakesTurnsWithoutTheSandbox(t *testing.T) {
	s, a := startTenant(t, countLoop)
	b, err := s.NewThread()
	require.NoError(t, err)
	*b.Regs = unix.PtraceRegs{Rip: codeAddr, Rsp: stackAddr + 2048, Eflags: 0x202, Rbx: 1 << 40}
	require.True(t, b.ParkFresh())
	require.True(t, b.Parked())
	fresh := b.FPState()
	require.Equal(t, uint16(0x37f), binary.LittleEndian.Uint16(fresh[0:]))
	require.Equal(t, uint32(0x1f80), binary.LittleEndian.Uint32(fresh[24:]))

	a.Regs.Rbx = 0
	require.True(t, a.post(stateTrapped, uint32(ResumeResetFPU), 0))
	cpu, all := lastCPU(t)
	a.Pin(cpu)
	require.Equal(t, only(cpu), affinityOf(t, a.Tid()))
	runners, ok := s.OpenRing([]*Thread{a}, []*Thread{b})
	require.True(t, ok)
	require.Equal(t, all, affinityOf(t, s.runnerTid(runners[0])), "the ring's runner floats")
	_, again := s.OpenRing([]*Thread{a}, []*Thread{b})
	require.False(t, again, "a ring is open already")

	// Both count: b from 1<<40, a from 0, taking turns every SliceNanos of the runner's CPU.
	deadline := time.Now().Add(10 * time.Second)
	for b.Regs.Rbx <= 1<<40 || b.Parked() && a.Parked() {
		require.True(t, time.Now().Before(deadline), "b never ran")
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(10 * SliceNanos)
	got := s.CloseRing(runners)
	require.Len(t, got, 1)
	running := got[0]
	require.NotNil(t, running)
	other := a
	if running == a {
		other = b
	}
	running.Kick()
	require.NoError(t, running.Wait())
	require.Equal(t, TrapPreempt, running.Trap().Kind)
	require.True(t, other.Parked(), "the other waits parked in the closed ring")

	require.Greater(t, a.Regs.Rbx, uint64(0))
	require.Less(t, a.Regs.Rbx, uint64(1<<40), "a's own count")
	require.Greater(t, b.Regs.Rbx, uint64(1<<40), "b's own count")
	requireCountInFPU(t, a, "a's FPU state went with its registers")
	requireCountInFPU(t, b, "b's FPU state went with its registers")
}

// A released stub's contexts name no runner: the probe asks from outside the carriers, and must
// not read the sysmsg mapping once it is gone.
func TestTidAfterRelease(t *testing.T) {
	s, a := startTenant(t, []byte{0xeb, 0xfe}) // jmp .
	require.True(t, a.post(stateTrapped, uint32(ResumeResetFPU), 0))
	require.NotZero(t, a.Tid())
	s.Release()
	require.Zero(t, a.Tid())
}

// The preemption ticker switches and resumes contexts of any stub, also while it is released
// (a process ending on SIGTERM): once the sysmsg mapping is gone they must not read it. Before
// they held it, a switch at the end of a sched-fair run faulted in WaitStopped ("fatal error:
// fault", endo's exit status 2).
func TestSwitchAfterRelease(t *testing.T) {
	s, a := startTenant(t, []byte{0xeb, 0xfe}) // jmp .
	require.True(t, a.post(stateTrapped, uint32(ResumeResetFPU), 0))
	require.True(t, a.Running())
	s.Release()
	require.False(t, a.Running(), "a released stub's context runs nothing")
	require.False(t, a.Switch(nil), "a released stub's context is on no runner")
	require.False(t, a.ResumeParked(0), "a released stub's context cannot be resumed")
	require.True(t, a.WaitStopped(time.Minute), "a released stub's context counts as stopped")
}

// A switch that waits for a context to stop while its stub is killed and released sees it stop
// (the stub died), and the release waits for it before unmapping.
func TestWaitStoppedAcrossRelease(t *testing.T) {
	s, a := startTenant(t, []byte{0xeb, 0xfe}) // jmp .
	require.True(t, a.post(stateTrapped, uint32(ResumeResetFPU), 0))
	stopped := make(chan bool)
	go func() { stopped <- a.WaitStopped(time.Hour) }()
	s.Release()
	require.True(t, <-stopped, "the waiter saw the dead stub's context as stopped, not its limit")
}
