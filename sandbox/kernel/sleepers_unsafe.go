package kernel

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/endovisor/endo/crossing"
)

// waitTimerfd waits until the timerfd fd expires (or is set to expire at once), as a blocking
// call: the thread's P goes to other goroutines meanwhile, where a plain read would keep it
// until the runtime's monitor (at nice 19, late beside busy vCPUs) took it back.
func waitTimerfd(fd int) {
	var n uint64
	crossing.BlockingSyscall6(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&n)), unsafe.Sizeof(n), 0, 0, 0)
}
