package main

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

var patchedRe = regexp.MustCompile(`call sites patched: (\d+); calls through them: (\d+)`)

// patchedCounts reads the report's line on patched call sites.
func patchedCounts(t *testing.T, stderr string) (sites, calls int) {
	t.Helper()
	m := patchedRe.FindStringSubmatch(stderr)
	require.NotNil(t, m, "no patched-calls line in the report: %s", stderr)
	sites, _ = strconv.Atoi(m[1])
	calls, _ = strconv.Atoi(m[2])
	return sites, calls
}

// Calls from patched sites give what native calls give: results, a handler run at such a call
// with the FPU state kept (the call escalates to a full frame), a blocking call restarted after a
// handler (it goes back onto the patched site), calls from a second thread (they trap again), and
// a forked child's own. The same with patching off; only the report's counts differ.
func TestPatchedCallSites(t *testing.T) {
	want := native(t, "/bin/calls")
	require.Equal(t, 0, want.code, want.stderr)
	require.Contains(t, want.stdout, "xmm0 kept 5 times")

	got := runCmd(t, "", endoBin, "run", "--report", "--rootfs", rootfs, "--", "/bin/calls")
	require.Equal(t, want.stdout, got.stdout, got.stderr)
	require.Equal(t, 0, got.code)
	sites, calls := patchedCounts(t, got.stderr)
	require.GreaterOrEqual(t, sites, 3, "getpid, kill and read sites at least")
	require.Greater(t, calls, 1000, "the getpid loop came through its patched site")

	off := runCmd(t, "", endoBin, "run", "--report", "--no-patch", "--rootfs", rootfs, "--", "/bin/calls")
	require.Equal(t, want.stdout, off.stdout, off.stderr)
	sites, calls = patchedCounts(t, off.stderr)
	require.Zero(t, sites)
	require.Zero(t, calls)
}

// A busybox shell script (fork, exec, pipes, signals through many patched sites of busybox and
// the programs it starts) prints what it prints natively, with patching on.
func TestPatchedShellScript(t *testing.T) {
	script := `for i in 1 2 3; do echo $i | cat; done; x=$(ls / | wc -l); echo $x;` +
		` trap 'echo got USR1' USR1; kill -USR1 $$; sleep 0.1 & wait; echo done`
	want := native(t, "/bin/sh", "-c", script)
	got := runCmd(t, "", endoBin, "run", "--report", "--rootfs", rootfs, "--", "/bin/sh", "-c", script)
	require.Equal(t, want.stdout, got.stdout, got.stderr)
	sites, calls := patchedCounts(t, got.stderr)
	require.Greater(t, sites, 0)
	require.Greater(t, calls, 0)
}
