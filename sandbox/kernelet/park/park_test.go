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

// Until returns once its condition holds, however the Wakes fall around the looks at it.
func TestParkerUntil(t *testing.T) {
	var p Parker
	var level atomic.Int32
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
		for want := int32(1); want <= 200; want++ {
			p.Until(func() bool { return level.Load() >= want })
		}
	}()
	for i := 0; i < 200; i++ {
		level.Add(1)
		p.Wake()
		if i%50 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Until did not return once its condition held")
	}
	called := false
	p.Until(func() bool { called = true; return true })
	require.True(t, called, "a condition that holds returns at once")
}
