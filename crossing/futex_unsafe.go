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

// futexWaitBlocking sleeps while *addr == val; the Go runtime has the goroutine's P back for
// other work meanwhile.
func futexWaitBlocking(addr *uint32, val uint32) {
	BlockingSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWait, uintptr(val), 0, 0, 0)
}

func futexWake(addr *uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWake, 1, 0, 0, 0)
}
