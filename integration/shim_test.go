package integration

// End-to-end tests of Endo's shim and sandbox: ctr and nerdctl drive io.containerd.endo.v1 on
// the harness' private containerd, running the busybox test image in the sandbox's kernel.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/console"
	"github.com/stretchr/testify/require"

	"github.com/endovisor/endo/integration/harness"
)

func startEndo(t *testing.T) (*harness.Containerd, string) {
	c := harness.Start(t, harness.Options{})
	return c, c.ImportImage(t)
}

// noLeftovers checks that nothing of container id is left (shim, sandbox, stubs, mounts,
// sockets), and cleans up through ctr first if the test did not get that far.
func noLeftovers(t *testing.T, c *harness.Containerd, id string) {
	t.Helper()
	require.Empty(t, harness.Leftovers(t, id), "containerd log:\n%s", c.LogTail(30))
}

// taskStatus is the STATUS column of `ctr task ls` for id ("" when there is no task).
func taskStatus(t *testing.T, c *harness.Containerd, id string) (pid int, status string) {
	out, _, err := c.Ctr("tasks", "ls")
	require.NoError(t, err)
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == id {
			pid, _ = strconv.Atoi(f[1])
			return pid, f[2]
		}
	}
	return 0, ""
}

func waitStatus(t *testing.T, c *harness.Containerd, id, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, st := taskStatus(t, c, id)
		if st == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %q, want %q; containerd log:\n%s", id, st, want, c.LogTail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func removeTask(t *testing.T, c *harness.Containerd, id string) {
	t.Helper()
	_, _, err := c.Ctr("tasks", "rm", id)
	require.NoError(t, err)
	_, _, err = c.Ctr("containers", "rm", id)
	require.NoError(t, err)
}

func TestShimEcho(t *testing.T) {
	c, img := startEndo(t)
	out, stderr, err := c.Ctr("run", "--rm", "--runtime", harness.RuntimeEndo, img, "endo-echo", "echo", "hello")
	require.NoError(t, err, "containerd log:\n%s", c.LogTail(30))
	require.Equal(t, "hello\n", out, "stderr: %s", stderr)
	noLeftovers(t, c, "endo-echo")
}

func TestShimExitStatus(t *testing.T) {
	c, img := startEndo(t)
	_, _, err := c.Ctr("run", "--rm", "--runtime", harness.RuntimeEndo, img, "endo-exit", "sh", "-c", "exit 3")
	require.Error(t, err)
	require.Equal(t, 3, harness.ExitCode(err), "err: %v", err)
	noLeftovers(t, c, "endo-exit")

	// This ctr has no `tasks wait`: an attached `tasks start` waits for the exit and reports it.
	_, _, err = c.Ctr("containers", "create", "--runtime", harness.RuntimeEndo, img, "endo-exit2", "sh", "-c", "sleep 0.2; exit 5")
	require.NoError(t, err)
	_, _, err = c.Ctr("tasks", "start", "endo-exit2")
	require.Equal(t, 5, harness.ExitCode(err), "err: %v", err)
	_, _, err = c.Ctr("containers", "rm", "endo-exit2") // an attached start deleted the task
	require.NoError(t, err)
	noLeftovers(t, c, "endo-exit2")
}

// The OCI process user (ctr run --user) is the id the container's process runs as.
func TestShimProcessUser(t *testing.T) {
	c, img := startEndo(t)
	out, stderr, err := c.Ctr("run", "--rm", "--runtime", harness.RuntimeEndo, "--user", "1000:1001", img, "endo-user",
		"sh", "-c", "id -u; id -g")
	require.NoError(t, err, "containerd log:\n%s", c.LogTail(30))
	require.Equal(t, "1000\n1001\n", out, "stderr: %s", stderr)
	noLeftovers(t, c, "endo-user")
}

func TestShimUnameIsTheSandboxKernel(t *testing.T) {
	c, img := startEndo(t)
	out, _, err := c.Ctr("run", "--rm", "--runtime", harness.RuntimeEndo, img, "endo-uname", "uname", "-r", "-v")
	require.NoError(t, err)
	require.Equal(t, "6.6.0-endo #1 SMP Endo\n", out)
	noLeftovers(t, c, "endo-uname")
}

func TestShimStdin(t *testing.T) {
	c, img := startEndo(t)
	out, stderr, err := c.CtrIn("data\nmore\n", "run", "--rm", "--runtime", harness.RuntimeEndo, img, "endo-stdin", "cat")
	require.NoError(t, err)
	require.Equal(t, "data\nmore\n", out, "stderr: %s", stderr)
	noLeftovers(t, c, "endo-stdin")
}

// A program that cannot start fails `ctr run` with one clear line and leaves nothing.
func TestShimSpawnFailureIsOneLine(t *testing.T) {
	c, img := startEndo(t)
	_, stderr, err := c.Ctr("run", "--rm", "--runtime", harness.RuntimeEndo, img, "endo-nosuch", "/no/such/program")
	require.Error(t, err)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	var ctrLines []string
	for _, l := range lines {
		if strings.HasPrefix(l, "ctr: ") {
			ctrLines = append(ctrLines, l)
		}
	}
	require.Len(t, ctrLines, 1, "stderr: %s", stderr)
	require.Contains(t, ctrLines[0], "/no/such/program")
	require.Contains(t, ctrLines[0], "no such file or directory")
	// ctr run --rm does not delete a task whose start failed; ctr's own cleanup does.
	_, _, _ = c.Ctr("tasks", "rm", "-f", "endo-nosuch")
	_, _, _ = c.Ctr("containers", "rm", "endo-nosuch")
	noLeftovers(t, c, "endo-nosuch")
}

// A config.json the shim cannot use gives one clear line and leaves nothing.
func TestShimBrokenConfigIsOneLine(t *testing.T) {
	c, _ := startEndo(t)
	spec := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, os.WriteFile(spec, []byte(`{"ociVersion":"1.1.0","root":{"path":"rootfs"},
		"process":{"args":["true"],"cwd":"relative/dir"}}`), 0o644))
	// With --config, ctr takes the spec as is and only a container id.
	_, stderr, err := c.Ctr("run", "--rm", "--runtime", harness.RuntimeEndo, "--config", spec, "endo-badcfg")
	require.Error(t, err)
	require.Contains(t, stderr, `process.cwd "relative/dir" is not absolute`)
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "process.cwd") {
			require.Contains(t, l, "config.json", "the line names the file: %q", l)
		}
	}
	_, _, _ = c.Ctr("tasks", "rm", "-f", "endo-badcfg")
	_, _, _ = c.Ctr("containers", "rm", "endo-badcfg")
	noLeftovers(t, c, "endo-badcfg")
}

func TestShimExecPsKill(t *testing.T) {
	c, img := startEndo(t)
	const id = "endo-exec"
	_, _, err := c.Ctr("run", "-d", "--runtime", harness.RuntimeEndo, img, id, "sleep", "1000")
	require.NoError(t, err)
	waitStatus(t, c, id, "RUNNING")

	out, _, err := c.Ctr("tasks", "exec", "--exec-id", "e1", id, "echo", "from-exec")
	require.NoError(t, err)
	require.Equal(t, "from-exec\n", out)
	_, _, err = c.Ctr("tasks", "exec", "--exec-id", "e2", id, "sh", "-c", "exit 4")
	require.Equal(t, 4, harness.ExitCode(err), "err: %v", err)

	out, _, err = c.Ctr("tasks", "ps", id)
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`(?m)^\d+\s`), out, "ps lists the sleep")

	_, _, err = c.Ctr("tasks", "kill", "--signal", "SIGKILL", id)
	require.NoError(t, err)
	waitStatus(t, c, id, "STOPPED")
	removeTask(t, c, id)
	noLeftovers(t, c, id)
}

func TestShimMetrics(t *testing.T) {
	c, img := startEndo(t)
	const id = "endo-metrics"
	_, _, err := c.Ctr("run", "-d", "--runtime", harness.RuntimeEndo, img, id, "sleep", "1000")
	require.NoError(t, err)
	waitStatus(t, c, id, "RUNNING")
	out, _, err := c.Ctr("tasks", "metrics", id)
	require.NoError(t, err)
	m := regexp.MustCompile(`memory.usage_in_bytes\s+(\d+)|memory.usage\s+(\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "metrics: %s", out)
	n, _ := strconv.Atoi(m[1] + m[2])
	require.Positive(t, n, "metrics: %s", out)

	_, _, err = c.Ctr("tasks", "kill", "--signal", "SIGKILL", id)
	require.NoError(t, err)
	waitStatus(t, c, id, "STOPPED")
	removeTask(t, c, id)
	noLeftovers(t, c, id)
}

// Killing the sandbox process reports the task exited (137) and cleanup leaves nothing.
func TestShimSandboxKilled(t *testing.T) {
	c, img := startEndo(t)
	const id = "endo-sbkill"
	_, _, err := c.Ctr("run", "-d", "--runtime", harness.RuntimeEndo, img, id, "sleep", "1000")
	require.NoError(t, err)
	waitStatus(t, c, id, "RUNNING")
	pid, _ := taskStatus(t, c, id)
	require.Positive(t, pid)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	require.NoError(t, err)
	require.Contains(t, string(cmdline), "boot", "the task pid is the sandbox process")
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	waitStatus(t, c, id, "STOPPED")
	_, stderr, err := c.Ctr("tasks", "rm", id)
	require.NoError(t, err)
	require.Contains(t, stderr, "137")
	_, _, err = c.Ctr("containers", "rm", id)
	require.NoError(t, err)
	noLeftovers(t, c, id)
}

// ctr run -t gives the tenant a terminal with a real size.
func TestShimTerminal(t *testing.T) {
	c, img := startEndo(t)
	const id = "endo-tty"
	master, slavePath, err := console.NewPty()
	require.NoError(t, err)
	defer master.Close()
	require.NoError(t, master.Resize(console.WinSize{Width: 100, Height: 30}))
	slave, err := os.OpenFile(slavePath, os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	defer slave.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := c.CtrCmd(ctx, "run", "--rm", "-t", "--runtime", harness.RuntimeEndo, img, id, "stty", "size")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	require.NoError(t, cmd.Start())
	slave.Close()
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(&out, master) // ends with EIO when ctr exits
		close(copied)
	}()
	err = cmd.Wait()
	<-copied
	require.NoError(t, err, "output: %q", out.String())
	m := regexp.MustCompile(`(\d+) (\d+)`).FindStringSubmatch(out.String())
	require.NotNil(t, m, "output: %q", out.String())
	rows, _ := strconv.Atoi(m[1])
	cols, _ := strconv.Atoi(m[2])
	require.Positive(t, rows)
	require.Positive(t, cols)
	noLeftovers(t, c, id)
}

func TestShimNerdctl(t *testing.T) {
	c, img := startEndo(t)
	out, stderr, err := c.Nerdctl("run", "--rm", "--net", "none", "--name", "endo-nerd", "--runtime", harness.RuntimeEndo, img, "echo", "hi")
	require.NoError(t, err, "containerd log:\n%s", c.LogTail(30))
	require.Equal(t, "hi\n", out, "stderr: %s", stderr)
	noLeftovers(t, c, "endo-nerd")
}

// Events reach containerd in its order: create, start, exit, delete; exec-added, exec-started,
// then the exec's exit carrying the exec id.
func TestShimEventOrder(t *testing.T) {
	c, img := startEndo(t)
	const id = "endo-events"
	ctx, cancel := context.WithCancel(context.Background())
	ev := c.CtrCmd(ctx, "events")
	var evOut bytes.Buffer
	ev.Stdout = &evOut
	require.NoError(t, ev.Start())
	time.Sleep(300 * time.Millisecond) // let ctr subscribe

	_, _, err := c.Ctr("run", "-d", "--runtime", harness.RuntimeEndo, img, id, "sleep", "2")
	require.NoError(t, err)
	out, _, err := c.Ctr("tasks", "exec", "--exec-id", "x1", id, "echo", "in-exec")
	require.NoError(t, err)
	require.Equal(t, "in-exec\n", out)
	waitStatus(t, c, id, "STOPPED")
	removeTask(t, c, id)
	time.Sleep(300 * time.Millisecond)
	cancel()
	_ = ev.Wait()

	var got []string
	for _, l := range strings.Split(evOut.String(), "\n") {
		f := strings.Fields(l)
		for i, w := range f {
			if strings.HasPrefix(w, "/tasks/") && i+1 < len(f) {
				rest := strings.Join(f[i+1:], " ")
				if !strings.Contains(rest, id) {
					continue
				}
				if w == "/tasks/exit" && strings.Contains(rest, `"x1"`) {
					w += "(x1)"
				}
				got = append(got, w)
			}
		}
	}
	want := []string{"/tasks/create", "/tasks/start", "/tasks/exec-added", "/tasks/exec-started", "/tasks/exit(x1)", "/tasks/exit", "/tasks/delete"}
	require.Equal(t, want, got, "events:\n%s", evOut.String())
	noLeftovers(t, c, id)
}

// A container that touches more memory than its limit is OOM-killed inside its sandbox:
// containerd hears TaskOOM before TaskExit, and the exit status is 137.
func TestShimOOM(t *testing.T) {
	c, img := startEndo(t)
	const id = "endo-oom"
	ctx, cancel := context.WithCancel(context.Background())
	ev := c.CtrCmd(ctx, "events")
	var evOut bytes.Buffer
	ev.Stdout = &evOut
	require.NoError(t, ev.Start())
	time.Sleep(300 * time.Millisecond) // let ctr subscribe

	_, _, err := c.Ctr("run", "--rm", "--memory-limit", "67108864", "--runtime", harness.RuntimeEndo, img, id, "sort", "/dev/zero")
	require.Equal(t, 137, harness.ExitCode(err), "containerd log:\n%s", c.LogTail(30))
	time.Sleep(300 * time.Millisecond)
	cancel()
	_ = ev.Wait()
	var got []string
	for _, l := range strings.Split(evOut.String(), "\n") {
		for _, topic := range []string{"/tasks/oom", "/tasks/exit"} {
			if strings.Contains(l, topic+" ") && strings.Contains(l, id) {
				got = append(got, topic)
			}
		}
	}
	require.Equal(t, []string{"/tasks/oom", "/tasks/exit"}, got, "events:\n%s", evOut.String())
	noLeftovers(t, c, id)
}

// The sandbox and its stubs live in the pod's cgroup, with the pod's CPU limit; the tenant sees
// as many CPUs as the quota gives it; the cgroup goes with the container.
func TestShimPodCgroup(t *testing.T) {
	c, img := startEndo(t)
	const id = "endo-cgroup"
	out, _, err := c.Ctr("run", "--rm", "--cpu-quota", "50000", "--cpu-period", "100000", "--runtime", harness.RuntimeEndo, img, id, "nproc")
	require.NoError(t, err, "containerd log:\n%s", c.LogTail(30))
	require.Equal(t, "1\n", out, "ceil(50000/100000) vCPUs")
	noLeftovers(t, c, id)

	const id2 = "endo-cgroup2"
	_, _, err = c.Ctr("run", "-d", "--cpu-quota", "150000", "--cpu-period", "100000", "--runtime", harness.RuntimeEndo, img, id2, "sleep", "30")
	require.NoError(t, err)
	pid, _ := taskStatus(t, c, id2)
	require.NotZero(t, pid)
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	require.NoError(t, err)
	// ctr gives every container the cgroupsPath /<namespace>/<id>.
	cgPath := "/" + c.Namespace() + "/" + id2
	require.Regexp(t, `(?m)^\d+:[^:]*cpu[^:]*:`+cgPath+`$`, string(cg), "the sandbox is in the pod's cgroup")
	dir, quotaFile, want := "/sys/fs/cgroup/cpu"+cgPath, "cpu.cfs_quota_us", "150000"
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil { // cgroup v2
		dir, quotaFile, want = "/sys/fs/cgroup"+cgPath, "cpu.max", "150000 100000"
	}
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(strings.Fields(string(procs))), 2, "the sandbox and its stub(s): %q", procs)
	quota, err := os.ReadFile(filepath.Join(dir, quotaFile))
	require.NoError(t, err)
	require.Equal(t, want, strings.TrimSpace(string(quota)))
	_, _, err = c.Ctr("tasks", "kill", "-s", "SIGKILL", id2)
	require.NoError(t, err)
	waitStatus(t, c, id2, "STOPPED")
	removeTask(t, c, id2)
	noLeftovers(t, c, id2)
}

// Update of a running pod's CPU limit changes its vCPUs: a new process sees it in nproc.
func TestShimUpdateChangesVCPUs(t *testing.T) {
	c, img := startEndo(t)
	const id = "endo-update"
	_, stderr, err := c.Nerdctl("run", "-d", "--net", "none", "--name", id, "--cpus", "1", "--runtime", harness.RuntimeEndo, img, "sleep", "30")
	require.NoError(t, err, "stderr: %s; containerd log:\n%s", stderr, c.LogTail(30))
	out, _, err := c.Nerdctl("exec", id, "nproc")
	require.NoError(t, err)
	require.Equal(t, "1\n", out)
	// nerdctl v2.0.5's `update --cpus 2` sends the old quota; the explicit flags work.
	_, stderr, err = c.Nerdctl("update", "--cpu-quota", "200000", "--cpu-period", "100000", id)
	require.NoError(t, err, "stderr: %s", stderr)
	out, _, err = c.Nerdctl("exec", id, "nproc")
	require.NoError(t, err)
	require.Equal(t, "2\n", out, "containerd log:\n%s", c.LogTail(40))
	_, stderr, err = c.Nerdctl("rm", "-f", id)
	require.NoError(t, err, "stderr: %s", stderr)
	noLeftovers(t, c, id)
}
