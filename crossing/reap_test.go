package crossing

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitExit reaps a child and reports how it ended: an exit status, or the signal that killed it.
func TestWaitExit(t *testing.T) {
	start := func(args ...string) *os.Process {
		p, err := os.StartProcess("/bin/sh", append([]string{"sh", "-c"}, args...), &os.ProcAttr{})
		require.NoError(t, err)
		return p
	}
	p := start("exit 3")
	ws, err := waitExit(p.Pid)
	require.NoError(t, err)
	require.True(t, ws.Exited())
	require.Equal(t, 3, ws.ExitStatus())
	p.Release()

	p = start("sleep 10")
	done := make(chan syscall.WaitStatus, 1)
	go func() {
		ws, err := waitExit(p.Pid)
		require.NoError(t, err)
		done <- ws
	}()
	time.Sleep(50 * time.Millisecond) // waiting in the poller
	require.NoError(t, p.Signal(syscall.SIGKILL))
	select {
	case ws = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end when the child was killed")
	}
	require.True(t, ws.Signaled())
	require.Equal(t, syscall.SIGKILL, ws.Signal())
	p.Release()

	// Reaped: nothing is left to wait for.
	_, err = waitExit(p.Pid)
	require.Error(t, err)
}
