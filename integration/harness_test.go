// Package integration holds Endo's end-to-end tests: real containerd, ctr and nerdctl driving
// runtimes through the harness. The tests here prove the harness itself on runc; they must never
// depend on Endo's own binaries.
package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/endovisor/endo/integration/harness"
)

func startRunc(t *testing.T) (*harness.Containerd, string) {
	c := harness.Start(t, harness.Options{WithoutEndo: true})
	return c, c.ImportImage(t)
}

func TestHarnessRuncEcho(t *testing.T) {
	c, img := startRunc(t)
	out, stderr, err := c.Ctr("run", "--rm", "--runtime", harness.RuntimeRunc, img, "t1", "echo", "hello")
	require.NoError(t, err)
	require.Equal(t, "hello\n", out, "stderr: %s", stderr)
	require.Empty(t, harness.Leftovers(t, "t1"))
}

func TestHarnessRuncExitStatus(t *testing.T) {
	c, img := startRunc(t)
	_, _, err := c.Ctr("run", "--rm", "--runtime", harness.RuntimeRunc, img, "t2", "sh", "-c", "exit 3")
	require.Error(t, err)
	require.Equal(t, 3, harness.ExitCode(err), "err: %v", err)
	require.Empty(t, harness.Leftovers(t, "t2"))
}

// TestHarnessLeftoversSeesLiveContainer shows Leftovers can fail: a running container's shim,
// process, cgroup, mount and socket are all reported until it is deleted.
func TestHarnessLeftoversSeesLiveContainer(t *testing.T) {
	c, img := startRunc(t)
	_, _, err := c.Ctr("run", "-d", "--runtime", harness.RuntimeRunc, img, "t3", "sleep", "1000")
	require.NoError(t, err)
	left := strings.Join(harness.Leftovers(t, "t3"), "\n")
	for _, kind := range []string{"process", "mount", "cgroup", "shim socket", "bundle"} {
		require.Contains(t, left, kind)
	}
	_, _, err = c.Ctr("tasks", "kill", "--signal", "SIGKILL", "t3")
	require.NoError(t, err)
	_, _, err = c.Ctr("tasks", "wait", "t3")
	require.Error(t, err) // ctr task wait exits with the task's status (137)
	_, _, err = c.Ctr("tasks", "rm", "t3")
	require.NoError(t, err)
	_, _, err = c.Ctr("containers", "rm", "t3")
	require.NoError(t, err)
	require.Empty(t, harness.Leftovers(t, "t3"))
}

func TestHarnessNerdctlRunc(t *testing.T) {
	c, img := startRunc(t)
	out, stderr, err := c.Nerdctl("run", "--rm", "--net", "none", "--name", "n1", "--runtime", harness.RuntimeRunc, img, "echo", "hi")
	require.NoError(t, err)
	require.Equal(t, "hi\n", out, "stderr: %s", stderr)
	require.Empty(t, harness.Leftovers(t, "n1"))
}

// TestDeployDropInLoads checks that containerd 2.4.2 accepts deploy/containerd-endo.toml as an
// import and registers the endo CRI handler from it.
func TestDeployDropInLoads(t *testing.T) {
	paths, err := harness.FindPaths()
	require.NoError(t, err)
	containerd := filepath.Join(paths.ToolsBin, "containerd")
	if _, err := os.Stat(containerd); err != nil {
		t.Fatalf("%s missing: run integration/tools.sh %s", containerd, filepath.Dir(paths.ToolsBin))
	}
	dir := t.TempDir()
	cfg := strings.Replace(harness.RenderConfig(dir), "imports = []",
		"imports = ['"+filepath.Join(paths.Repo, "deploy", "containerd-endo.toml")+"']", 1)
	require.NotEqual(t, harness.RenderConfig(dir), cfg, "template lost its imports line")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o644))
	out, err := exec.Command(containerd, "--config", filepath.Join(dir, "config.toml"), "config", "dump").CombinedOutput()
	require.NoError(t, err, "%s", out)
	dump := string(out)
	require.Contains(t, dump, "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.endo]")
	require.Contains(t, dump, "runtime_type = 'io.containerd.endo.v1'")
	require.Contains(t, dump, "ConfigPath = '/etc/containerd/endo.toml'")
}
