package crossing

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futexes live in a shared file mapping (the sysmsg file), so they must not be private.
const (
	futexOpWait = 0
	futexOpWake = 1
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

func futexWake(addr *uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWake, 1, 0, 0, 0)
}
