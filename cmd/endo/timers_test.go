package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// alarm(2) and ITIMER_REAL (tenants/timers.c) behave as natively; the CPU-time timers, which
// are not there, fail with ENOSYS and are listed by --report.
func TestTimersMatchNative(t *testing.T) {
	want := native(t, "/bin/timers")
	for _, line := range []string{
		"second alarm: 5",
		"periodic: 3 signals, interval 20000 us, armed 1",
		"sleep cut: EINTR, by the alarm 1",
		"child's alarm: 0",
		"after exec, alarm left: 30",
	} {
		require.Contains(t, want.stdout, line+"\n")
	}
	require.Equal(t, want, endo(t, "/bin/timers"))

	got := runCmd(t, "", endoBin, "run", "--report", "--rootfs", rootfs, "--", "/bin/timers", "prof")
	require.Equal(t, 0, got.code)
	require.Equal(t, "ITIMER_PROF: ENOSYS\n", got.stdout)
	require.Contains(t, got.stderr, "setitimer: 1")
	requireNoStubs(t)
}
