package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/endovisor/endo/cgroupfair"
	"github.com/stretchr/testify/require"
)

// stubsOf lists the stub processes whose parent is pid.
func stubsOf(pid int) []string {
	var out []string
	for dir, ppid := range stubs() {
		if ppid == strconv.Itoa(pid) {
			out = append(out, dir)
		}
	}
	return out
}

// inCgroup says whether /proc/<dir>/cgroup puts the process at path in the hierarchy that holds
// the cpu controller (v1), or in the unified one (v2).
func inCgroup(t *testing.T, procDir, path string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(procDir, "cgroup"))
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		cpu := false
		for _, c := range strings.Split(f[1], ",") {
			cpu = cpu || c == "cpu"
		}
		if (cpu || f[0] == "0" && f[1] == "") && f[2] == path {
			return true
		}
	}
	return false
}

// endo run --cgroup makes the cgroup, runs the sandbox and every stub in it, and removes it at the
// end; endo itself goes back where it was.
func TestRunInCgroup(t *testing.T) {
	path := fmt.Sprintf("/endo-test-run-%d", os.Getpid())
	require.False(t, cgroupExists(path))
	cmd := exec.Command(endoBin, "run", "--cgroup", path, "--rootfs", rootfs, "--", "sh", "-c", "sleep 1; sleep 30")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	// Two stubs at least: the shell's and its sleep's (a fork), once the first sleep is over.
	deadline := time.Now().Add(15 * time.Second)
	for len(stubsOf(cmd.Process.Pid)) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
	require.True(t, cgroupExists(path), "the cgroup is made")
	require.True(t, inCgroup(t, fmt.Sprintf("/proc/%d", cmd.Process.Pid), path), "endo is in its cgroup")
	stubDirs := stubsOf(cmd.Process.Pid)
	require.GreaterOrEqual(t, len(stubDirs), 2, "the shell and its sleep have stubs")
	for _, dir := range stubDirs {
		require.True(t, inCgroup(t, dir, path), "stub %s is in the sandbox's cgroup", dir)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("endo did not end on SIGTERM")
	}
	require.NotContains(t, errb.String(), "cgroup", "no complaint about leaving or removing the cgroup")
	require.False(t, cgroupExists(path), "the cgroup is removed after")
	requireNoStubs(t)
}

// cgroupDirs lists every directory of the cgroup at path, in any hierarchy (v1's one a
// controller, or v2's one).
func cgroupDirs(t *testing.T, path string) []string {
	t.Helper()
	v1, err := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", path))
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", path)); err == nil {
		v1 = append(v1, filepath.Join("/sys/fs/cgroup", path))
	}
	return v1
}

// A cgroup that refuses endo (here a realtime endo, which cgroup v1's cpu controller refuses
// without an rt_runtime budget, after the controllers before it took it) is a clear error, and
// no directory of it is left in any hierarchy.
func TestRunRefusedByCgroupLeavesNone(t *testing.T) {
	path := fmt.Sprintf("/endo-test-refused-%d", os.Getpid())
	got := runCmd(t, "", "chrt", "-f", "10", endoBin, "run", "--cgroup", path, "--rootfs", rootfs, "--", "true")
	require.Empty(t, cgroupDirs(t, path), "stderr: %s", got.stderr)
	if cgroups.Mode() != cgroups.Unified {
		require.Equal(t, exitEndoError, got.code, got.stderr)
		require.Contains(t, got.stderr, "realtime policy", "the error says why")
		require.Equal(t, 1, strings.Count(strings.TrimSpace(got.stderr), "\n")+1, "one line: %s", got.stderr)
	} else {
		require.Equal(t, 0, got.code, got.stderr)
	}
}

// A cgroup that is there already is joined, and left in place.
func TestRunJoinsAnExistingCgroup(t *testing.T) {
	path := fmt.Sprintf("/endo-test-join-%d", os.Getpid())
	_, err := cgroupfair.Create(path, nil)
	require.NoError(t, err)
	defer removeCgroup(path)
	got := runCmd(t, "", endoBin, "run", "--cgroup", path, "--rootfs", rootfs, "--", "true")
	require.Equal(t, 0, got.code, got.stderr)
	require.True(t, cgroupExists(path), "a cgroup endo did not make stays")
	require.NoError(t, removeCgroup(path), "and endo is not in it any more")
}

var stolenLine = regexp.MustCompile(`probe: at most (\d+) tasks runnable .*; carriers' stolen time ([0-9.]+) ms`)

// The probe line reports the carriers' stolen time: with host busy loops on every CPU, the
// carriers of two busy tasks wait for a CPU at some point.
func TestProbeReportsStolenTime(t *testing.T) {
	var loops []*exec.Cmd
	for i := 0; i < 2; i++ {
		c := exec.Command(filepath.Join(rootfs, "bin", "schedbench"), "spin", "0")
		require.NoError(t, c.Start())
		loops = append(loops, c)
	}
	defer func() {
		for _, c := range loops {
			c.Process.Kill()
			c.Wait()
		}
	}()
	got := runCmd(t, "", endoBin, "run", "--probe", "--cpus", "2", "--rootfs", rootfs, "--", "/bin/schedbench", "fair", "2", "1")
	require.Equal(t, 0, got.code, got.stderr)
	require.Equal(t, "fair ok 2\n", got.stdout)
	m := stolenLine.FindStringSubmatch(got.stderr)
	require.NotNil(t, m, got.stderr)
	ms, err := strconv.ParseFloat(m[2], 64)
	require.NoError(t, err)
	require.Greater(t, ms, 0.0, "carriers beside busy host loops wait for a CPU")
}

// sched-fair leaves nothing behind when it is interrupted: no cgroup, no busy loop, no sandbox.
func TestSchedFairCleansUpOnInterrupt(t *testing.T) {
	cmd := exec.Command(endoBin, "sched-fair", "--tenants", rootfs, "--seconds", "20", "--runs", "1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	base := fmt.Sprintf("/endo-sched-fair-%d", cmd.Process.Pid)
	deadline := time.Now().Add(15 * time.Second)
	for !cgroupExists(base+"/sibling") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.True(t, cgroupExists(base+"/sibling"), out.String())
	time.Sleep(2 * time.Second) // the loops and the sandbox run
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("sched-fair did not end on SIGINT")
	}
	require.Contains(t, out.String(), "cleaning up")
	require.False(t, cgroupExists(base), out.String())
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.HasPrefix(b, []byte(filepath.Join(rootfs, "bin", "schedbench"))) {
			t.Errorf("a busy loop is left: %s", p)
		}
	}
	requireNoStubs(t)
}

// sched-fair leaves no cgroup behind when its standard output is a pipe nobody reads any more
// (its table, written last, then ends it by SIGPIPE).
func TestSchedFairCleansUpWhenItsOutputIsGone(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(endoBin, "sched-fair", "--tenants", rootfs, "--seconds", "1", "--runs", "1", "--only", "1 busy task")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	r.Close()
	w.Close()
	base := fmt.Sprintf("/endo-sched-fair-%d", cmd.Process.Pid)
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the table's write to the pipe fails: %s", stderr.String())
	require.Contains(t, stderr.String(), "run 1: sibling", "the row was measured")
	require.False(t, cgroupExists(base), stderr.String())
	requireNoStubs(t)
}

// sched-perf's in-process kernelet rows take every sample they ask for: each wake is taken before
// the next is made (a wake folded into the one before it used to leave the wakee waiting for
// the last one, and the row hung until its time limit).
func TestKerneletRowsTakeEverySample(t *testing.T) {
	for name, row := range map[string]func(int) []time.Duration{
		"yield": kerneletYieldRoundTrip, "wake": kerneletWakeSameVCPU, "kick": kerneletWakeKick,
	} {
		for range 3 {
			d, ok := withTimeout(row, 300, 30*time.Second)
			require.True(t, ok, "%s: no result in 30 s", name)
			require.Len(t, d, 300, name)
			for _, x := range d {
				require.Positive(t, x, name)
			}
		}
	}
}
