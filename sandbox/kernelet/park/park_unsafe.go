package park

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/endovisor/endo/crossing"
)

const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG: the word is the sandbox's own
	futexWakePrivate = 1 | 128
)

// futexWait sleeps while *word == val, at most d (negative: no limit), as a system call the
// Go runtime knows blocks: the carrier's P goes to other work meanwhile.
func futexWait(word *atomic.Uint32, val uint32, d time.Duration) {
	var ts *unix.Timespec
	if d >= 0 {
		t := unix.NsecToTimespec(int64(d))
		ts = &t
	}
	crossing.BlockingSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWaitPrivate, uintptr(val), uintptr(unsafe.Pointer(ts)), 0, 0)
}

// futexWake wakes the one thread that may sleep on word.
func futexWake(word *atomic.Uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWakePrivate, 1, 0, 0, 0)
}
