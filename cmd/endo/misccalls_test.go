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
// (SQLite's) behave as natively.
func TestMiscCallsMatchNative(t *testing.T) {
	want := native(t, "/bin/misccalls")
	require.Equal(t, 0, want.code, want.stdout+want.stderr)
	require.Equal(t, 37, strings.Count(want.stdout, ": ok\n"), want.stdout)
	require.Contains(t, want.stdout, "inotify events: create:f modify:f delete:f ignored \n")
	require.Equal(t, want, endo(t, "/bin/misccalls"))
	requireNoStubs(t)
}
