package crossing

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/endovisor/endo/memgrant"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

const (
	codeAddr  = 0x400000
	stackAddr = 0x500000
)

// startTenant spawns a stub and maps code at codeAddr and one stack page at stackAddr, from a
// memory file of the test's own.
func startTenant(t *testing.T, code []byte) (*Stub, *Thread) {
	t.Helper()
	fd, err := unix.MemfdCreate("test-grant", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	grant := os.NewFile(uintptr(fd), "test-grant")
	t.Cleanup(func() { grant.Close() })
	require.NoError(t, unix.Ftruncate(fd, 1<<20))
	_, err = unix.Pwrite(fd, code, 0)
	require.NoError(t, err)

	s, th, err := Spawn(grant, nil)
	require.NoError(t, err)
	t.Cleanup(s.Release)
	require.NoError(t, s.Apply([]memgrant.HostOp{
		{Kind: memgrant.OpMap, Addr: codeAddr, Length: 4096, Prot: memgrant.ProtRead | memgrant.ProtExec, Offset: 0},
		{Kind: memgrant.OpMap, Addr: stackAddr, Length: 4096, Prot: memgrant.ProtRead | memgrant.ProtWrite, Offset: 4096},
	}))
	require.Equal(t, TrapSyscall, th.Trap().Kind)
	require.Equal(t, uint64(unix.SYS_GETPID), th.Regs.Orig_rax, "the boot ping is a getpid")
	*th.Regs = unix.PtraceRegs{Rip: codeAddr, Rsp: stackAddr + 4096, Eflags: 0x202}
	return s, th
}

func TestTenantSyscallsTrap(t *testing.T) {
	code := []byte{
		0xb8, 39, 0, 0, 0, // mov $39 (getpid), %eax
		0x0f, 0x05, // syscall
		0x48, 0x89, 0xc7, // mov %rax, %rdi
		0xb8, 60, 0, 0, 0, // mov $60 (exit), %eax
		0x0f, 0x05, // syscall
	}
	s, th := startTenant(t, code)
	require.NoError(t, th.Resume(ResumeResetFPU, 0, 0))
	tr := th.Trap()
	require.Equal(t, TrapSyscall, tr.Kind)
	require.Equal(t, uint64(unix.SYS_GETPID), th.Regs.Orig_rax)
	require.Equal(t, uint64(codeAddr+7), tr.Addr, "si_call_addr is after the syscall")
	th.Regs.Rax = 4242
	require.NoError(t, th.Resume(0, 0, 0))
	require.Equal(t, uint64(unix.SYS_EXIT), th.Regs.Orig_rax)
	require.Equal(t, uint64(4242), th.Regs.Rdi, "the tenant saw the sandbox's return value")
	th.Exit()
	s.Kill()
	<-s.Exited()
}

func TestTenantFaultTraps(t *testing.T) {
	code := []byte{
		0x48, 0xc7, 0xc0, 0x00, 0x10, 0, 0, // mov $0x1000, %rax
		0x48, 0x89, 0x00, // mov %rax, (%rax): write to an unmapped page
	}
	_, th := startTenant(t, code)
	require.NoError(t, th.Resume(0, 0, 0))
	tr := th.Trap()
	require.Equal(t, TrapFault, tr.Kind)
	require.Equal(t, syscall.SIGSEGV, tr.Signal)
	require.Equal(t, uint64(0x1000), tr.Addr)
	require.True(t, tr.Write)
}

// A tenant that jumps to a syscall instruction of the stub gets nothing: the filter kills the
// stub for any call the handler does not make itself.
func TestTenantJumpIntoStubIsKilled(t *testing.T) {
	text, err := StubText()
	require.NoError(t, err)
	for _, nr := range []uint64{unix.SYS_EXECVE, unix.SYS_OPENAT, unix.SYS_MMAP, unix.SYS_GETPID, unix.SYS_CLONE, unix.SYS_SECCOMP} {
		code := []byte{
			0xb8, byte(nr), 0, 0, 0, // mov $nr, %eax
			0x48, 0xbb, 0, 0, 0, 0, 0, 0, 0, 0, // movabs $target, %rbx
			0xff, 0xe3, // jmp *%rbx
		}
		target := findSyscallInsn(t, text)
		for i := 0; i < 8; i++ {
			code[7+i] = byte(target >> (8 * i))
		}
		s, th := startTenant(t, code)
		th.Regs.Rdi = codeAddr // a pointer, for the calls that take one
		require.ErrorIs(t, th.Resume(0, 0, 0), ErrStubDead, "call %d", nr)
		<-s.Exited()
		require.True(t, s.exitStatus.Signaled(), "call %d: %v", nr, describeWait(s.exitStatus))
		require.Equal(t, syscall.SIGSYS, s.exitStatus.Signal())
	}
}

// findSyscallInsn finds a syscall instruction (0f 05) in the stub's text.
func findSyscallInsn(t *testing.T, text Range) uint64 {
	off := text.Start - StubBase
	for i := off; i+1 < text.End-StubBase; i++ {
		// The blob's file offset of .text is one page (see stub.ld and the ELF layout).
		if stubBlob[0x1000+i] == 0x0f && stubBlob[0x1000+i+1] == 0x05 {
			return StubBase + i
		}
	}
	t.Fatal("no syscall instruction in the stub")
	return 0
}

func TestNewThreadTrapsOnItsOwnSlot(t *testing.T) {
	code := []byte{
		0xb8, 39, 0, 0, 0, // mov $39 (getpid), %eax
		0x0f, 0x05, // syscall
		0xb8, 186, 0, 0, 0, // mov $186 (gettid), %eax
		0x0f, 0x05, // syscall
	}
	s, main := startTenant(t, code)
	th, err := s.NewThread()
	require.NoError(t, err)
	require.NotEqual(t, s.Pid(), th.Tid(), "a thread of its own")
	require.Equal(t, uint64(unix.SYS_GETPID), th.Regs.Orig_rax, "the new thread waits at its boot ping")

	*th.Regs = unix.PtraceRegs{Rip: codeAddr, Rsp: stackAddr + 2048, Eflags: 0x202}
	require.NoError(t, th.Resume(ResumeResetFPU, 0, 0))
	require.Equal(t, uint64(unix.SYS_GETPID), th.Regs.Orig_rax)
	require.Equal(t, uint64(codeAddr+7), th.Trap().Addr)
	th.Regs.Rax = 77
	require.NoError(t, th.Resume(0, 0, 0))
	require.Equal(t, uint64(unix.SYS_GETTID), th.Regs.Orig_rax)

	// The first thread still runs on its own.
	require.NoError(t, main.Resume(0, 0, 0))
	require.Equal(t, uint64(unix.SYS_GETPID), main.Regs.Orig_rax)

	// A thread that ends clears its slot; the slot can serve again.
	th.Exit()
	for !th.Dead() {
	}
	th.Release()
	again, err := s.NewThread()
	require.NoError(t, err)
	require.Equal(t, th.index, again.index)
}

// Every command runs alone: an unmap must not fall through into anything else (it once ran on
// into the clone of a thread).
func TestCommandsStartNoThread(t *testing.T) {
	s, _ := startTenant(t, []byte{0x0f, 0x05})
	require.NoError(t, s.Apply([]memgrant.HostOp{
		{Kind: memgrant.OpProtect, Addr: stackAddr, Length: 4096, Prot: memgrant.ProtRead},
		{Kind: memgrant.OpUnmap, Addr: stackAddr, Length: 4096},
		{Kind: memgrant.OpMap, Addr: stackAddr, Length: 4096, Prot: memgrant.ProtRead, Offset: 4096},
		{Kind: memgrant.OpUnmap, Addr: stackAddr, Length: 4096},
	}))
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", s.Pid()))
	require.NoError(t, err)
	require.Len(t, tasks, 2, "the tenant thread and the control thread, nothing else")
}

// Tenants keep pointers into the vDSO across fork: every stub has it at the same address.
func TestStubsShareTheVDSOAddress(t *testing.T) {
	a, _ := startTenant(t, []byte{0x0f, 0x05})
	b, _ := startTenant(t, []byte{0x0f, 0x05})
	require.NotZero(t, a.VDSO())
	require.Equal(t, a.VDSO(), b.VDSO())
}

// xmm0 in an fxsave image (the legacy area's first XMM register).
func xmm0(fp []byte) uint64 { return binary.LittleEndian.Uint64(fp[160:]) }

// requireCountInFPU checks that a context stopped in countLoop has its own count in xmm0: the
// count in rbx, or one less when the stop came between the increment and the copy.
func requireCountInFPU(t *testing.T, th *Thread, msg string) {
	t.Helper()
	rbx, x := th.Regs.Rbx, xmm0(th.FPState())
	require.True(t, x == rbx || x+1 == rbx, "%s: rbx %#x, xmm0 %#x", msg, rbx, x)
}

// waitState waits until the context reaches state st (the stub writes it).
func waitState(t *testing.T, th *Thread, st uint32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for atomic.LoadUint32(th.state) != st {
		require.True(t, time.Now().Before(deadline), "context %d stays in state %d, not %d", th.index, atomic.LoadUint32(th.state), st)
		time.Sleep(time.Millisecond)
	}
}

// countLoop counts in rbx forever and keeps the count in xmm0 too, so that a context's FPU state
// shows whether it travelled with its registers.
var countLoop = []byte{
	0x48, 0xff, 0xc3, // loop: inc %rbx
	0x66, 0x48, 0x0f, 0x6e, 0xc3, // movq %rbx, %xmm0
	0xeb, 0xf6, // jmp loop
}

// A runner parks its context and takes another of the same stub on its own, registers and FPU
// state included; the parked one goes on later on another runner where it stopped.
func TestRunnerSwitchesContexts(t *testing.T) {
	s, a := startTenant(t, countLoop)
	b, err := s.NewThread()
	require.NoError(t, err)
	*b.Regs = unix.PtraceRegs{Rip: codeAddr, Rsp: stackAddr + 2048, Eflags: 0x202, Rbx: 1 << 40}
	a.Regs.Rbx = 0

	// b runs on its own runner, is stopped, and parks: its runner goes idle.
	require.True(t, b.post(stateTrapped, uint32(ResumeResetFPU), 0))
	time.Sleep(5 * time.Millisecond) // let it count
	b.Kick()
	require.NoError(t, b.Wait())
	require.Equal(t, TrapPreempt, b.Trap().Kind)
	counted := b.Regs.Rbx
	require.Greater(t, counted, uint64(1<<40))
	require.True(t, b.Park())
	require.True(t, b.Parked())
	require.Zero(t, b.Tid(), "a parked context is on no runner")

	// a runs on runner 0; the switch makes runner 0 park a and run b, waking nobody.
	require.True(t, a.post(stateTrapped, uint32(ResumeResetFPU), 0))
	time.Sleep(5 * time.Millisecond)
	require.True(t, a.Switch(b))
	waitState(t, a, stateParked)
	waitState(t, b, stateResume)
	require.Equal(t, s.Pid(), b.Tid(), "b now runs on runner 0, the stub's main thread")
	aCount := a.Regs.Rbx
	require.Greater(t, aCount, uint64(0))
	requireCountInFPU(t, a, "a's FPU state went with its registers")

	time.Sleep(5 * time.Millisecond)
	b.Kick()
	require.NoError(t, b.Wait())
	require.Equal(t, TrapPreempt, b.Trap().Kind)
	require.Greater(t, b.Regs.Rbx, counted, "b went on from where it stopped")
	requireCountInFPU(t, b, "b's FPU state came to runner 0")

	// a goes on, on the idle runner.
	require.True(t, a.ResumeParked(0))
	time.Sleep(5 * time.Millisecond)
	a.Kick()
	require.NoError(t, a.Wait())
	require.Equal(t, TrapPreempt, a.Trap().Kind)
	require.Greater(t, a.Regs.Rbx, aCount)
	require.Less(t, a.Regs.Rbx, uint64(1<<40), "a's own count, not b's")
	requireCountInFPU(t, a, "a's FPU state came to the idle runner")
	require.NotEqual(t, s.Pid(), a.Tid())
	require.ElementsMatch(t, []int{s.Pid(), a.Tid()}, s.Runners())
}

// The control thread's await holds its batch's ack until the word it watches changes, and no
// longer than its timeout when the word never does. NewThread's ack waits so for the new runner's
// first trap, so that the creator's carrier is not woken while that runner still runs.
func TestControlAwaitHoldsTheAckUntilTheWordChanges(t *testing.T) {
	s, _ := startTenant(t, []byte{0x0f, 0x05})
	off := sysmsgThreads + (sysmsgMaxThreads-1)*sysmsgBlock + slotState // a slot no thread has
	word := s.u32(off)
	atomic.StoreUint32(word, 7)
	addr := uint64(SysmsgBase + off)
	s.cmdMu.Lock()
	defer s.cmdMu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := s.runBatch([]cmdOp{{kind: opAwait, addr: addr, length: 7, prot: 60}})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the ack came while the word held its value (err %v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	atomic.StoreUint32(word, 8)
	futexWake(word)
	require.NoError(t, <-done)

	// A word that keeps its value: the timeout (20 ms) ends the wait, and the batch goes on.
	_, err := s.runBatch([]cmdOp{{kind: opAwait, addr: addr, length: 8, off: 20_000_000},
		{kind: opProtect, addr: stackAddr, length: 4096, prot: unix.PROT_READ}})
	require.NoError(t, err)
}
