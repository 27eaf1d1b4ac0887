package crossing

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// waitExit waits until the child pid ends and reaps it. It waits through a pidfd in the Go
// runtime's poller, which holds no thread and no P meanwhile: os.Process.Wait blocks in waitid,
// and a goroutine in a blocking system call keeps its P until the runtime's monitor takes it
// back. The monitor runs at the sandbox's low host weight (nice 19), which Linux serves only
// every ~95 ms beside the pod's busy threads; with a stub or two per pod, their waits held the
// Ps that carriers woken by the host needed, and a woken carrier slept until one came free.
// Without pidfds it falls back to a blocking wait.
func waitExit(pid int) (syscall.WaitStatus, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return waitBlocking(pid)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return waitBlocking(pid)
	}
	var ws syscall.WaitStatus
	var werr error
	err = rc.Read(func(uintptr) bool {
		var got int
		got, werr = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		return werr != nil || got == pid // else not yet: wait until the pidfd is readable
	})
	if err != nil {
		return waitBlocking(pid) // the poller cannot wait for this pidfd
	}
	if werr != nil {
		return ws, fmt.Errorf("wait for stub %d: %w", pid, werr)
	}
	return ws, nil
}

func waitBlocking(pid int) (syscall.WaitStatus, error) {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			if err != nil {
				return ws, fmt.Errorf("wait for stub %d: %w", pid, err)
			}
			return ws, nil
		}
	}
}
