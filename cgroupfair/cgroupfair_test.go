package cgroupfair

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestVCPUs(t *testing.T) {
	q := func(quota int64, period uint64) *specs.LinuxResources {
		return &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: &quota, Period: &period}}
	}
	require.Equal(t, 8, VCPUs(nil, 8))
	require.Equal(t, 2, VCPUs(q(150000, 100000), 8), "ceil(1.5)")
	require.Equal(t, 1, VCPUs(q(10000, 100000), 8))
	require.Equal(t, 8, VCPUs(q(5000000, 100000), 8), "never more than the host")
	require.Equal(t, 3, VCPUs(&specs.LinuxResources{CPU: &specs.LinuxCPU{Cpus: "0-1,4"}}, 8))
	require.Equal(t, 8, VCPUs(&specs.LinuxResources{CPU: &specs.LinuxCPU{Cpus: "bad"}}, 8))
}

func TestPathFor(t *testing.T) {
	p, err := PathFor("", "ctr1")
	require.NoError(t, err)
	require.Equal(t, "/endo/ctr1", p)
	p, err = PathFor("/kubepods/pod1/abc", "x")
	require.NoError(t, err)
	require.Equal(t, "/kubepods/pod1/abc", p)
	_, err = PathFor("system.slice:cri:abc", "x")
	require.ErrorContains(t, err, "systemd")
}

// A real cgroup: created with a CPU quota, a process moved in, seen there by the kernel, and the
// cgroup gone after Delete.
func TestPodCgroup(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	path := fmt.Sprintf("/endo-test/cg-%d", os.Getpid())
	quota, period := int64(50000), uint64(100000)
	pod, err := Create(path, &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: &quota, Period: &period}})
	require.NoError(t, err)
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	require.NoError(t, pod.Add(cmd.Process.Pid))
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
	require.NoError(t, err)
	require.Contains(t, string(cg), path)
	pids, err := pod.Pids()
	require.NoError(t, err)
	require.Contains(t, pids, cmd.Process.Pid)
	if !unified() {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", path, "cpu.cfs_quota_us"))
		require.NoError(t, err)
		require.Equal(t, "50000", strings.TrimSpace(string(b)))
	}
	cmd.Process.Kill()
	cmd.Wait()
	require.NoError(t, pod.Delete())
	_, err = os.Stat(filepath.Join("/sys/fs/cgroup/cpu", path))
	require.True(t, os.IsNotExist(err), "the cgroup is gone")
	// The test's parent cgroup, in every hierarchy it was made in (v1 has one per controller).
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/endo-test")
	if p := "/sys/fs/cgroup/endo-test"; unified() {
		parents = append(parents, p)
	}
	for _, p := range parents {
		require.NoError(t, os.Remove(p))
	}
	left, _ := filepath.Glob("/sys/fs/cgroup/*/endo-test")
	require.Empty(t, left, "no cgroup is left behind")
}

func TestMemoryLimitCarriesTheSandboxOverhead(t *testing.T) {
	limit := int64(64 << 20)
	r := withOverhead(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}})
	require.Equal(t, int64(64<<20+SandboxOverheadBytes), *r.Memory.Limit)
	require.Equal(t, int64(64<<20), limit, "the caller's spec is not changed")
	require.Nil(t, withOverhead(&specs.LinuxResources{}).Memory)
}

// A thread in a pod's cgroup leaves the cpu and cpuacct hierarchies for their roots; the other
// threads of its process stay where they are, and the pod's cgroup can go without it.
func TestLeaveWithThread(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	if unified() {
		require.Error(t, LeaveWithThread())
		return
	}
	dirs := []string{"/sys/fs/cgroup/cpu/endo-test-leave", "/sys/fs/cgroup/cpuacct/endo-test-leave"}
	for _, d := range dirs {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	defer func() {
		for _, d := range dirs {
			os.Remove(d)
		}
	}()
	cpuOf := func(tid int) string { // "" if unknown: it runs off the test's goroutine
		b, _ := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/cgroup", tid))
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.SplitN(l, ":", 3); len(f) == 3 && (f[1] == "cpu" || f[1] == "cpu,cpuacct") {
				return f[2]
			}
		}
		return ""
	}
	type result struct {
		tid         int
		before, now string
		err         error
	}
	got := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		r := result{tid: unix.Gettid()}
		for _, d := range dirs {
			if r.err = os.WriteFile(d+"/tasks", []byte(strconv.Itoa(r.tid)), 0); r.err != nil {
				got <- r
				return
			}
		}
		r.before = cpuOf(r.tid)
		r.err = LeaveWithThread()
		r.now = cpuOf(r.tid)
		got <- r
	}()
	r := <-got
	require.NoError(t, r.err)
	require.Equal(t, "/endo-test-leave", r.before)
	require.Equal(t, "/", r.now)
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/tasks")
		require.NoError(t, err)
		require.Empty(t, strings.TrimSpace(string(b)), "nothing is left in %s", d)
		require.NoError(t, os.Remove(d))
	}
}
