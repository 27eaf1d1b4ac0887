package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	"github.com/endovisor/endo/runtime"
)

// echoHandler is a minimal sandbox: Create writes the container's first argument to the stdout
// it was given, so the test sees the files really crossed the socket.
type echoHandler struct {
	mu       sync.Mutex
	created  map[string]bool
	shutdown chan struct{}
	once     sync.Once
}

func (h *echoHandler) Create(_ context.Context, r *CreateRequest, st Stdio) error {
	defer st.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.created[r.ID] {
		return fmt.Errorf("container %s: %w", r.ID, errdefs.ErrAlreadyExists)
	}
	h.created[r.ID] = true
	if st.Stdout != nil {
		if _, err := io.WriteString(st.Stdout, r.Process.Argv[0]); err != nil {
			return err
		}
	}
	if st.Stdin != nil {
		b, err := io.ReadAll(st.Stdin)
		if err != nil {
			return err
		}
		if st.Stderr != nil {
			_, err = st.Stderr.Write(b)
		}
		return err
	}
	return nil
}
func (h *echoHandler) Exec(context.Context, *ExecRequest, Stdio) error {
	return fmt.Errorf("exec: %w", errdefs.ErrNotImplemented)
}
func (h *echoHandler) Start(_ context.Context, r *ProcRequest) (*StartReply, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.created[r.ID] {
		return nil, fmt.Errorf("container %s: %w", r.ID, errdefs.ErrNotFound)
	}
	return &StartReply{Pid: 1}, nil
}
func (h *echoHandler) Signal(context.Context, *SignalRequest) error { return nil }
func (h *echoHandler) Wait(ctx context.Context, _ *ProcRequest) (*WaitReply, error) {
	select {
	case <-h.shutdown:
		return &WaitReply{Status: 137, Signal: 9, ExitedAt: time.Now()}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
func (h *echoHandler) Pids(context.Context, string) (*PidsReply, error) {
	return &PidsReply{Pids: []int{1, 2}}, nil
}
func (h *echoHandler) Stats(context.Context, string) (*StatsReply, error) {
	return &StatsReply{MemoryBytes: 4096}, nil
}
func (h *echoHandler) ResizePty(context.Context, *ResizeRequest) error { return nil }
func (h *echoHandler) Update(context.Context, *UpdateRequest) error    { return nil }
func (h *echoHandler) Delete(context.Context, *ProcRequest) error      { return nil }
func (h *echoHandler) Shutdown()                                       { h.once.Do(func() { close(h.shutdown) }) }

func serve(t *testing.T) (*Client, *echoHandler, chan error, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.sock")
	h := &echoHandler{created: map[string]bool{}, shutdown: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- Serve(context.Background(), path, h) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, path, nil)
	require.NoError(t, err)
	return c, h, done, path
}

func TestControlStdioCrossesAndSocketIsGone(t *testing.T) {
	c, _, done, path := serve(t)
	defer c.Close()
	ctx := context.Background()

	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	errR, errW, err := os.Pipe()
	require.NoError(t, err)
	_, err = inW.WriteString("from stdin")
	require.NoError(t, err)
	inW.Close()

	err = c.Create(ctx, CreateRequest{ID: "a", Rootfs: "/", Process: runtime.Process{Argv: []string{"hello"}}},
		Stdio{Stdin: inR, Stdout: outW, Stderr: errW})
	require.NoError(t, err)
	// The sandbox has its own copies now; ours go, and its writes are all that is in the pipes.
	inR.Close()
	outW.Close()
	errW.Close()
	out, err := io.ReadAll(outR)
	require.NoError(t, err)
	require.Equal(t, "hello", string(out))
	echoed, err := io.ReadAll(errR)
	require.NoError(t, err)
	require.Equal(t, "from stdin", string(echoed))

	_, err = os.Stat(path)
	require.True(t, errors.Is(err, os.ErrNotExist), "control socket must be unlinked once the shim is connected: %v", err)

	pid, err := c.Start(ctx, "a", "")
	require.NoError(t, err)
	require.Equal(t, 1, pid)
	pids, err := c.Pids(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []int{1, 2}, pids)

	require.NoError(t, c.Shutdown(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after Shutdown")
	}
}

func TestControlErrorsKeepTheirClass(t *testing.T) {
	c, _, _, _ := serve(t)
	defer c.Close()
	ctx := context.Background()

	_, err := c.Start(ctx, "missing", "")
	require.Error(t, err)
	require.True(t, errdefs.IsNotFound(err), "got %v", err)
	require.Contains(t, err.Error(), "container missing")

	require.NoError(t, c.Create(ctx, CreateRequest{ID: "b", Process: runtime.Process{Argv: []string{"x"}}}, Stdio{}))
	err = c.Create(ctx, CreateRequest{ID: "b", Process: runtime.Process{Argv: []string{"x"}}}, Stdio{})
	require.True(t, errdefs.IsAlreadyExists(err), "got %v", err)

	err = c.Exec(ctx, ExecRequest{ID: "b", ExecID: "e"}, Stdio{})
	require.True(t, errdefs.IsNotImplemented(err), "got %v", err)
}

// A shim that goes away ends the sandbox, and pending waits get their replies first.
func TestControlShimGoneEndsServe(t *testing.T) {
	c, h, done, _ := serve(t)
	waitErr := make(chan error, 1)
	go func() {
		_, err := c.Wait(context.Background(), "a", "")
		waitErr <- err
	}()
	time.Sleep(50 * time.Millisecond)
	c.session.Close()
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrShimGone)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return when the session closed")
	}
	select {
	case <-h.shutdown:
	default:
		t.Fatal("handler was not shut down")
	}
	c.Close()
	<-waitErr
}

func TestBootArgsRoundTrip(t *testing.T) {
	in := BootConfig{Socket: "/run/x/c.sock", Pod: "p1", MemoryBytes: 1 << 30, VCPUs: 2, Hostname: "h"}
	out, err := ParseBootArgs(in.Args())
	require.NoError(t, err)
	require.Equal(t, in, out)
	_, err = ParseBootArgs([]string{"--memory", "1"})
	require.ErrorContains(t, err, "--socket is required")
}
