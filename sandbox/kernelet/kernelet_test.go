package kernelet

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNeverMoreHoldersThanVCPUs(t *testing.T) {
	k, err := New(2)
	require.NoError(t, err)
	var holders, most atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				v := k.Acquire()
				n := holders.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				runtime.Gosched()
				holders.Add(-1)
				k.Release(v)
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, most.Load(), int32(2))
	require.GreaterOrEqual(t, most.Load(), int32(1))
	require.Equal(t, 2, k.Idle())
}

func TestTryAcquireYieldsToWaiters(t *testing.T) {
	k, err := New(1)
	require.NoError(t, err)
	v := k.Acquire()
	require.Nil(t, k.TryAcquire())
	got := make(chan *VCPU)
	go func() { got <- k.Acquire() }()
	for !k.Waiting() {
	}
	k.Release(v)
	require.Equal(t, v, <-got)
	k2, err := New(2)
	require.NoError(t, err)
	a, b := k2.Acquire(), k2.TryAcquire()
	require.NotNil(t, b, "two vCPUs can be held at once")
	require.NotEqual(t, a.ID, b.ID)
	_, err = New(0)
	require.Error(t, err)
}

func TestResize(t *testing.T) {
	k, err := New(1)
	require.NoError(t, err)
	a := k.Acquire()
	got := make(chan *VCPU)
	go func() { got <- k.Acquire() }()
	for !k.Waiting() {
		runtime.Gosched()
	}
	require.NoError(t, k.Resize(2))
	b := <-got // the new vCPU served the waiter at once
	require.NotEqual(t, a.ID, b.ID)
	require.Equal(t, 2, k.N())

	require.NoError(t, k.Resize(1))
	require.Equal(t, 1, k.N())
	k.Release(a) // held beyond the new size: it goes
	require.Nil(t, k.TryAcquire(), "only one vCPU, and it is held")
	k.Release(b)
	require.NotNil(t, k.TryAcquire())
	require.Error(t, k.Resize(0))
}
