package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// epoll and eventfd: each check of tenants/epoll.c prints what it saw, the same inside Endo as
// natively (with a /proc, for the fd links).
func TestEpollMatchesNative(t *testing.T) {
	want := nativeWithProc(t, "/bin/epoll")
	// Lines the native run prints too, so that a broken comparison cannot pass.
	for _, line := range []string{
		"fd link: anon_inode:[eventpoll]",
		"add again: EEXIST",
		"mod not added: ENOENT",
		"add bad fd: EBADF",
		"add self: EINVAL",
		"add regular file: EPERM",
		"add O_PATH fd: EBADF",
		"loop: ELOOP",
		"timeout 0: 0",
		"timeout 50ms: 0",
		"child wrote: 1 [0x1 0x1111]",
		"level again: 1 [0x1 0x1111]",
		"edge again: 0",
		"edge new data: 1 [0x1 0x2222]",
		"oneshot again: 0",
		"oneshot rearmed: 1 [0x1 0x4444]",
		"eventfd written: 1 [0x1 0xdeadbeefcafe]",
		"semaphore read 1: 8 value 1",
		"semaphore read 2: EAGAIN value 0",
		"poll eventfd: 1 revents 0x5",
		"blocking eventfd read: 8 value 5",
		"closed, no dup: 0",
		"two items: 2 sum 0x12221",
		"child's wait: 1 [0x1 0x1111]",
		"signal: EINTR handled 1",
		"signal with SA_RESTART: EINTR handled 2",
		"pwait, let in by its mask: EINTR handled 3",
	} {
		require.Contains(t, want.stdout, line+"\n")
	}
	got := endo(t, "/bin/epoll")
	require.Equal(t, want, got)
	// On one vCPU, a task blocked in epoll_wait or an eventfd read must give the vCPU to the
	// child that will wake it.
	got = runCmd(t, "", endoBin, "run", "--cpus", "1", "--rootfs", rootfs, "--", "/bin/epoll")
	require.Equal(t, want, got)
	requireNoStubs(t)
}
