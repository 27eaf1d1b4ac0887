package harness

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cleanup stops the daemon and removes its directory. Anything a test left running or mounted is
// a test failure: it is reported with t.Errorf first, then removed so the next test starts clean.
func (c *Containerd) cleanup(t testing.TB) {
	t.Helper()
	live.remove(c)
	running := c.cmd != nil && c.cmd.Process != nil
	if running {
		select {
		case <-c.exited:
			t.Errorf("harness: containerd died during the test (%v)", c.exitErr)
			running = false
		default:
		}
	}
	if running {
		c.removeTasks(t)
		c.stopDaemon(t)
	}

	// Shims outlive containerd; any still up after their tasks were removed is a leak.
	procs := waitFor(5*time.Second, func() []proc { return procsMentioning(c.dir) })
	for _, p := range procs {
		t.Errorf("harness: process left at end of test: pid %d %q", p.pid, p.cmdline)
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}

	mounts, err := mountsUnder(c.dir)
	if err != nil {
		t.Errorf("harness: %v", err)
	}
	// Deepest first, so a mount on top of another comes off before the one below it.
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, m := range mounts {
		t.Errorf("harness: mount left at end of test: %s", m)
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			t.Errorf("harness: unmount %s: %v", m, err)
		}
	}

	removeNamespaceCgroups(c.ns)
	// runc's shim keeps its state in /run/containerd/runc/<ns> whatever containerd's state dir;
	// the namespace is this daemon's own, so its (empty) directory goes too.
	_ = os.Remove(filepath.Join("/run/containerd/runc", c.ns))
	c.removeHostFifos()

	if t.Failed() {
		t.Logf("containerd log (last 60 lines) %s:\n%s", c.logPath, c.LogTail(60))
	}
	if os.Getenv("ENDO_KEEP_TEST_DIR") != "" {
		t.Logf("harness: keeping %s (ENDO_KEEP_TEST_DIR)", c.dir)
		return
	}
	if err := os.RemoveAll(c.dir); err != nil {
		t.Errorf("harness: remove %s: %v", c.dir, err)
	}
}

// removeTasks reports and removes tasks a test left in the namespace, then deletes its
// containers (container records without tasks hold no host resources, so they are not reported).
func (c *Containerd) removeTasks(t testing.TB) {
	t.Helper()
	out, _, err := c.Ctr("tasks", "ls", "-q")
	if err != nil {
		t.Errorf("harness: list tasks: %v", err)
		return
	}
	for _, id := range strings.Fields(out) {
		t.Errorf("harness: task %q still present at end of test", id)
		_, _, _ = c.Ctr("tasks", "kill", "--all", "--signal", "SIGKILL", id)
		if _, _, err := c.Ctr("tasks", "rm", "--force", id); err != nil {
			t.Errorf("harness: remove task %s: %v", id, err)
		}
	}
	out, _, err = c.Ctr("containers", "ls", "-q")
	if err != nil {
		t.Errorf("harness: list containers: %v", err)
		return
	}
	for _, id := range strings.Fields(out) {
		if _, _, err := c.Ctr("containers", "rm", id); err != nil {
			t.Errorf("harness: remove container %s: %v", id, err)
		}
	}
}

func (c *Containerd) stopDaemon(t testing.TB) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return
	case <-time.After(20 * time.Second):
	}
	t.Errorf("harness: containerd did not stop within 20s of SIGTERM; killing it")
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// waitFor polls f until it returns nothing or the time is up, and returns its last answer: a
// shim or mount that goes away on its own a moment after delete is not a leak.
func waitFor[T any](d time.Duration, f func() []T) []T {
	deadline := time.Now().Add(d)
	for {
		got := f()
		if len(got) == 0 || time.Now().After(deadline) {
			return got
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mountsUnder lists mount points at or below dir, from this process's mount table.
func mountsUnder(dir string) ([]string, error) {
	all, err := mountPoints()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range all {
		if m == dir || strings.HasPrefix(m, dir+"/") {
			out = append(out, m)
		}
	}
	return out, nil
}

// removeNamespaceCgroups removes the empty per-namespace cgroup directories (/<ns> in each
// hierarchy) that containerd's default cgroupsPath /<ns>/<id> leaves behind after the last
// container. A non-empty one is left alone: its children are reported by Leftovers.
func removeNamespaceCgroups(ns string) {
	roots, err := cgroupRoots()
	if err != nil {
		return
	}
	for _, r := range roots {
		_ = os.Remove(filepath.Join(r, ns))
	}
}

// hostFifoDir is where nerdctl (which has no flag to move them) leaves its IO FIFOs.
const hostFifoDir = "/run/containerd/fifo"

// removeHostFifos removes FIFO directories that appeared in hostFifoDir while this daemon ran and
// hold nothing but named pipes: nerdctl does not remove them after `run --rm`.
func (c *Containerd) removeHostFifos() {
	for name := range listDir(hostFifoDir) {
		if c.hostFifos[name] {
			continue
		}
		dir := filepath.Join(hostFifoDir, name)
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		onlyPipes := true
		for _, e := range entries {
			if e.Type()&os.ModeNamedPipe == 0 {
				onlyPipes = false
			}
		}
		if onlyPipes {
			_ = os.RemoveAll(dir)
		}
	}
}

func listDir(dir string) map[string]bool {
	out := map[string]bool{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		out[e.Name()] = true
	}
	return out
}

// dirPrefix names the private dirs in /run; ownerFile in each holds the test process's pid.
const (
	dirPrefix = "endo-test-"
	ownerFile = "owner"
)

// reapStale removes what a test process that died without its cleanups (a `go test -timeout`
// panic, a kill) left: its containerd, shims, mounts and private dir. Only dirs whose owner
// process is gone are touched, so concurrent test processes keep theirs.
func reapStale(t testing.TB) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join("/run", dirPrefix+"*"))
	for _, dir := range dirs {
		raw, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // being set up, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil {
			continue
		}
		for _, p := range procsMentioning(dir + "/") {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		waitFor(5*time.Second, func() []proc { return procsMentioning(dir + "/") })
		mounts, _ := mountsUnder(dir)
		sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
		for _, m := range mounts {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
		killNamespaceCgroups(filepath.Base(dir))
		_ = os.RemoveAll(filepath.Join("/run/containerd/runc", filepath.Base(dir)))
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("harness: remove stale %s: %v", dir, err)
			continue
		}
		t.Logf("harness: removed %s left by dead test process %d", dir, pid)
	}
}

// killNamespaceCgroups kills every process in the cgroups under /<ns> (container processes do
// not name the private dir, so only their cgroup finds them) and removes those cgroups.
func killNamespaceCgroups(ns string) {
	roots, _ := cgroupRoots()
	var dirs []string
	for _, r := range roots {
		_ = filepath.WalkDir(filepath.Join(r, ns), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			dirs = append(dirs, path)
			raw, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			for _, f := range strings.Fields(string(raw)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
	// Children before parents; a cgroup empties a moment after its last process is reaped.
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	waitFor(5*time.Second, func() []string {
		var left []string
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
				left = append(left, d)
			}
		}
		return left
	})
}
