package kernel

import (
	"container/heap"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// waitTimerfd returns once the timer expires, not before.
func TestWaitTimerfd(t *testing.T) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(fd)
	start := time.Now()
	require.NoError(t, unix.TimerfdSettime(fd, 0, &unix.ItimerSpec{Value: unix.NsecToTimespec(int64(20 * time.Millisecond))}, nil))
	waitTimerfd(fd)
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
}

// The sleepers' queue gives the earliest deadline first, and a sleep taken out early leaves the
// others in order.
func TestSleepQueueOrder(t *testing.T) {
	var q sleepQueue
	timers := make([]*sleepTimer, 5)
	for i, at := range []int64{50, 10, 40, 20, 30} {
		timers[i] = &sleepTimer{at: at}
		heap.Push(&q, timers[i])
	}
	heap.Remove(&q, timers[3].index) // 20
	var got []int64
	for q.Len() > 0 {
		got = append(got, heap.Pop(&q).(*sleepTimer).at)
	}
	require.Equal(t, []int64{10, 30, 40, 50}, got)
	require.Equal(t, -1, timers[0].index)
}
