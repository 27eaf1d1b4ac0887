package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
)

func TestProcLifecycle(t *testing.T) {
	p := NewProc("c1")
	require.Equal(t, Created, p.Status())
	require.NoError(t, p.CheckDelete())
	require.NoError(t, p.Start(42))
	require.Equal(t, Running, p.Status())
	require.Equal(t, 42, p.Pid())
	require.True(t, errdefs.IsFailedPrecondition(p.Start(43)))
	require.True(t, errdefs.IsFailedPrecondition(p.CheckDelete()))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := p.Wait(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	require.True(t, p.SetExited(Exit{Status: 3}))
	require.False(t, p.SetExited(Exit{Status: 9}), "only the first exit counts")
	e, err := p.Wait(context.Background())
	require.NoError(t, err)
	require.Equal(t, 3, e.Status)
	require.False(t, e.At.IsZero())
	require.Equal(t, Stopped, p.Status())
	require.NoError(t, p.CheckDelete())
	require.True(t, errdefs.IsFailedPrecondition(p.Start(1)))
}

func TestCreatedProcCanStopWithoutRunning(t *testing.T) {
	p := NewProc("c2")
	require.True(t, p.SetExited(Exit{Status: 137}))
	e, ok := p.Exit()
	require.True(t, ok)
	require.Equal(t, 137, e.Status)
	<-p.Done()
}
