package harness

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWithFifoDir(t *testing.T) {
	require.Equal(t, []string{"run", "--fifo-dir", "/d", "--rm", "img", "id"},
		withFifoDir([]string{"run", "--rm", "img", "id"}, "/d"))
	require.Equal(t, []string{"tasks", "exec", "--fifo-dir", "/d", "--exec-id", "e", "id", "sh"},
		withFifoDir([]string{"tasks", "exec", "--exec-id", "e", "id", "sh"}, "/d"))
	require.Equal(t, []string{"images", "ls"}, withFifoDir([]string{"images", "ls"}, "/d"))
}

func TestPathHas(t *testing.T) {
	require.True(t, pathHas("/run/x/io.containerd.runtime.v2.task/ns/t1/rootfs", "t1"))
	require.False(t, pathHas("/run/x/t10/rootfs", "t1"))
	id := "0123456789abcdef0123"
	require.True(t, pathHas("/kubepods/cri-containerd-"+id+".scope", id))
}

func TestUnescapeMount(t *testing.T) {
	require.Equal(t, "/a b/c", unescapeMount(`/a\040b/c`))
	require.Equal(t, `/a\x`, unescapeMount(`/a\x`))
}

// TestLeftoversFindsProcess runs a real process that names an id and checks Leftovers reports
// it until it is gone.
func TestLeftoversFindsProcess(t *testing.T) {
	id := "endo-leftover-probe"
	cmd := exec.Command("sh", "-c", "sleep 100; :", id) // the ":" keeps sh from exec-ing sleep (argv would lose the id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	// Kill the group: the shell's sleep child must not outlive the test.
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })

	left := Leftovers(t, id)
	require.Len(t, left, 1)
	require.True(t, strings.HasPrefix(left[0], "process pid "), left[0])

	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL))
	_ = cmd.Wait()
	require.Empty(t, Leftovers(t, id))
}
