package park

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParkerWakes(t *testing.T) {
	var p Parker
	// A wake between the ticket and the wait is not lost.
	tk := p.Ticket()
	p.Wake()
	require.True(t, p.Wait(tk, time.Time{}))

	// A sleeping carrier is woken, every time.
	const rounds = 1000
	var seen atomic.Int32
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
		for i := 0; i < rounds; i++ {
			tk := p.Ticket()
			for seen.Load() <= int32(i) {
				p.Wait(tk, time.Time{})
				tk = p.Ticket()
			}
		}
	}()
	for i := 0; i < rounds; i++ {
		seen.Add(1)
		p.Wake()
		if i%100 == 0 {
			time.Sleep(time.Millisecond) // let it fall asleep now and then
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a wake-up was lost")
	}
}

func TestParkerTimesOut(t *testing.T) {
	var p Parker
	start := time.Now()
	require.False(t, p.Wait(p.Ticket(), time.Now().Add(20*time.Millisecond)))
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	require.False(t, p.Wait(p.Ticket(), time.Now().Add(-time.Second)), "a past deadline")
}
