package kernel

import (
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// onThread runs body on a host thread of its own, which ends with it, and returns that thread.
func onThread(t *testing.T, body func(stop *atomic.Bool)) (thread, func()) {
	t.Helper()
	tid := make(chan int)
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		tid <- unix.Gettid()
		body(&stop)
	}()
	th := thread{os.Getpid(), <-tid}
	return th, func() {
		stop.Store(true)
		<-done
	}
}

// A busy thread is runnable, and in nearly every pair of status reads runnable throughout (it
// makes no voluntary switch; the Go runtime's preemption of a long-running goroutine is one, but
// it comes every 10 ms, not within a pair of reads microseconds apart).
func TestSamplerSeesABusyThreadRunnableThroughout(t *testing.T) {
	th, end := onThread(t, func(stop *atomic.Bool) {
		for !stop.Load() {
		}
	})
	defer end()
	s := newSampler()
	defer s.close()
	throughout := 0
	for range 20 {
		if !s.runnable(th) {
			continue
		}
		a, okA := s.sleepless(th)
		b, okB := s.sleepless(th)
		if okA && okB && a == b {
			throughout++
		}
	}
	if throughout < 15 {
		t.Fatalf("a busy thread was runnable throughout %d of 20 pairs of reads", throughout)
	}
}

// A thread asleep in a system call is neither runnable nor runnable throughout, and one that has
// ended is not either.
func TestSamplerSeesASleepingThreadAsNotRunnable(t *testing.T) {
	th, end := onThread(t, func(stop *atomic.Bool) {
		for !stop.Load() {
			ts := unix.NsecToTimespec(int64(20 * time.Millisecond))
			unix.Nanosleep(&ts, nil)
		}
	})
	s := newSampler()
	defer s.close()
	asleep := 0
	for range 20 {
		_, ok := s.sleepless(th)
		if !s.runnable(th) && !ok {
			asleep++
		}
		time.Sleep(time.Millisecond)
	}
	if asleep < 15 {
		t.Fatalf("a thread that sleeps 20 ms at a time looked asleep in %d of 20 samples", asleep)
	}
	end()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(th.tid)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the test's thread did not end")
		}
		time.Sleep(time.Millisecond)
	}
	if _, ok := s.sleepless(th); ok || s.runnable(th) {
		t.Fatal("an ended thread counted as runnable")
	}
	if s.read(th, false) != nil {
		t.Fatal("an ended thread's stat file still read")
	}
}
