package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/endovisor/endo/runtime"
	"github.com/endovisor/endo/sandbox/control"
)

// busyboxRoot makes a rootfs holding the host's static busybox as /bin/busybox and /bin/echo.
func busyboxRoot(t *testing.T) string {
	data, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skip("needs busybox-static at /bin/busybox")
	}
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755))
	require.NoError(t, os.Symlink("busybox", filepath.Join(root, "bin", "echo")))
	return root
}

// boot runs a real sandbox in this process and connects to it as the shim would.
func boot(t *testing.T) (*control.Client, chan error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "c.sock")
	done := make(chan error, 1)
	go func() {
		done <- Boot(context.Background(), Options{Socket: sock, Pod: "test", MemoryBytes: 256 << 20, VCPUs: 1, Log: io.Discard})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, sock, func() error {
		select {
		case err := <-done:
			return errors.Join(errors.New("Boot returned early"), err)
		default:
			return nil
		}
	})
	require.NoError(t, err)
	return c, done
}

func shutdown(t *testing.T, c *control.Client, done chan error) {
	t.Helper()
	require.NoError(t, c.Shutdown(context.Background()))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Boot did not return after Shutdown")
	}
	c.Close()
}

func TestBootRunsAContainer(t *testing.T) {
	root := busyboxRoot(t)
	c, done := boot(t)
	ctx := context.Background()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	err = c.Create(ctx, control.CreateRequest{
		ID: "c1", Rootfs: root,
		Process: runtime.Process{Argv: []string{"/bin/echo", "hello"}, Env: []string{"PATH=/bin"}, Cwd: "/"},
	}, control.Stdio{Stdout: w})
	w.Close()
	require.NoError(t, err)
	pid, err := c.Start(ctx, "c1", "")
	require.NoError(t, err)
	require.Positive(t, pid)
	out, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, "hello\n", string(out))
	st, err := c.Wait(ctx, "c1", "")
	require.NoError(t, err)
	require.Equal(t, 0, st.Status)
	st2, err := c.Stats(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, int64(256<<20), st2.MemoryLimit)

	// A second start of a finished process is refused; unknown containers are not found.
	_, err = c.Start(ctx, "c1", "")
	require.True(t, errdefs.IsFailedPrecondition(err), "got %v", err)
	_, err = c.Start(ctx, "nope", "")
	require.True(t, errdefs.IsNotFound(err), "got %v", err)
	require.NoError(t, c.Delete(ctx, "c1", ""))
	shutdown(t, c, done)
}

// A program that cannot be spawned fails Start with a clear error and leaves the container
// created, so that the shim can delete it.
func TestBootSpawnFailure(t *testing.T) {
	root := busyboxRoot(t)
	c, done := boot(t)
	ctx := context.Background()
	err := c.Create(ctx, control.CreateRequest{
		ID: "c2", Rootfs: root,
		Process: runtime.Process{Argv: []string{"/no/such/program"}, Cwd: "/"},
	}, control.Stdio{})
	require.NoError(t, err)
	_, err = c.Start(ctx, "c2", "")
	require.Error(t, err)
	require.Contains(t, err.Error(), "/no/such/program")
	require.NotContains(t, err.Error(), "\n")
	require.NoError(t, c.Signal(ctx, "c2", "", 9, false))
	st, err := c.Wait(ctx, "c2", "")
	require.NoError(t, err)
	require.Equal(t, 137, st.Status)
	require.NoError(t, c.Delete(ctx, "c2", ""))
	shutdown(t, c, done)
}
