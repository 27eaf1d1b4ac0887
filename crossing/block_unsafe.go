package crossing

import (
	"syscall"
	_ "unsafe" // for go:linkname
)

// The Go runtime's entry for a system call known to block: the goroutine's P goes to other work
// (or idle) at once. Through syscall.Syscall the P stays with the sleeping thread, not idle, until
// the runtime's monitor (sysmon) takes it back: after 10 ms while other Ps are idle and no
// goroutine waits for it. While any P is not idle the monitor polls, every 20 µs at first and
// again after each P it takes back. The monitor is a thread of
// the pod, so each poll is a wake-up in the pod's cgroup, on a CPU where a neighbour may run.
//
//go:linkname entersyscallblock runtime.entersyscallblock
func entersyscallblock()

//go:linkname exitsyscall runtime.exitsyscall
func exitsyscall()

// BlockingSyscall6 is syscall.Syscall6 for a host call that sleeps (a futex wait): the Go
// runtime has the goroutine's P back for other work before the call starts.
//
//go:nosplit
func BlockingSyscall6(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err syscall.Errno) {
	entersyscallblock()
	r1, r2, err = syscall.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
	exitsyscall()
	return
}
