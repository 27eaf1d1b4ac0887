package kernel

import (
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// onThread runs body on a host thread of its own and returns that thread, and a function that
// stops body and waits for it.
func onThread(t *testing.T, body func(stop *atomic.Bool)) (thread, func()) {
	t.Helper()
	tid := make(chan int)
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
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
// ended is not either (a sleep(1) process's thread: a thread of this process that ends may be the
// main one, which the Go runtime keeps).
func TestSamplerSeesASleepingThreadAsNotRunnable(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	th := thread{cmd.Process.Pid, cmd.Process.Pid}
	s := newSampler()
	defer s.close()
	asleep := 0
	for range 20 {
		time.Sleep(5 * time.Millisecond)
		if _, ok := s.sleepless(th); !ok && !s.runnable(th) {
			asleep++
		}
	}
	if asleep < 15 {
		t.Fatalf("a sleeping process looked asleep in %d of 20 samples", asleep)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, ok := s.sleepless(th); ok || s.runnable(th) {
		t.Fatal("an ended thread counted as runnable")
	}
	if s.read(th, false) != nil || s.read(th, true) != nil {
		t.Fatal("an ended thread's files still read")
	}
}
