package crossing

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futexes live in a shared file mapping (the sysmsg file), so they must not be private.
const (
	futexOpWait       = 0
	futexOpWake       = 1
	futexOpWaitBitset = 9
	futexOpWakeBitset = 10
)

// A thread's state word can have two sleepers at once: its stub thread waiting to be resumed,
// and (WaitNext) a carrier waiting for the stop after a resume that another carrier posts. The
// resume's wake must reach the stub thread only; the stub waits with plain FUTEX_WAIT (any bit).
const (
	bitResume = 1 // the sandbox's wake of a stub thread it resumes
	bitParked = 2 // a carrier in WaitNext
)

// futexWaitRaw sleeps while *addr == val, keeping the goroutine's P (no hand-off), for at most
// timeout. It returns when woken, on a timeout, on a signal, or at once if *addr != val.
func futexWaitRaw(addr *uint32, val uint32, timeout *unix.Timespec) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWait, uintptr(val),
		uintptr(unsafe.Pointer(timeout)), 0, 0)
}

// futexWaitBlocking is futexWaitRaw for long sleeps: the runtime may hand the P to other work.
func futexWaitBlocking(addr *uint32, val uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWait, uintptr(val), 0, 0, 0)
}

// futexWaitParked is futexWaitBlocking for a carrier in WaitNext: a resume's wake (bitResume)
// passes it by.
func futexWaitParked(addr *uint32, val uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWaitBitset, uintptr(val), 0, 0, bitParked)
}

// futexWakeResumed wakes the stub thread sleeping on its state word to be resumed.
func futexWakeResumed(addr *uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWakeBitset, 1, 0, 0, bitResume)
}

func futexWake(addr *uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWake, 1, 0, 0, 0)
}
