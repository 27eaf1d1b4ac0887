package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// rt_sigtimedwait (how container inits such as tini take their signals), the sender's pid in a
// signal's siginfo, times, clock_getres, fallocate, preadv/pwritev, flock between processes,
// personality, getresuid, getcpu, timerfd, inotify and signalfd (with a blocked SIGCHLD, which
// must stay pending although ignored by default) and fcntl record locks between processes
// (SQLite's), memfd and futexes in memory shared with a child behave as natively.
func TestMiscCallsMatchNative(t *testing.T) {
	want := nativeWithProc(t, "/bin/misccalls")
	require.Equal(t, 0, want.code, want.stdout+want.stderr)
	require.Equal(t, 41, strings.Count(want.stdout, ": ok\n"), want.stdout)
	require.Contains(t, want.stdout, "inotify events: create:f modify:f delete:f ignored \n")
	require.Contains(t, want.stdout, "memfd link: /memfd:scratch (deleted)\n")
	require.Equal(t, want, endo(t, "/bin/misccalls"))
	requireNoStubs(t)
}

// What a container may not do (mount, set the host name or the clock) is EPERM, as without the
// capabilities, not ENOSYS. Not compared with native: as root on the host these would succeed.
func TestPrivilegedCallsAreNotPermitted(t *testing.T) {
	got := endo(t, "sh", "-c", `hostname endo-x; date -s 2020-01-01 >/dev/null; mount -t tmpfs none /mnt; hostname`)
	require.Contains(t, got.stderr, "hostname: sethostname: Operation not permitted")
	require.Contains(t, got.stderr, "date: can't set date: Operation not permitted")
	require.Contains(t, got.stderr, "mount: permission denied")
	require.NotContains(t, got.stdout, "endo-x")
	requireNoStubs(t)
}
