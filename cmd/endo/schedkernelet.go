package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/endovisor/endo/sandbox/kernelet"
	"github.com/endovisor/endo/sandbox/kernelet/park"
)

// The kernelet's own costs, for sched-perf: goroutines stand for tasks (each locked to its OS
// thread, as a carrier is) and use only the kernelet's public API. No tenant code or stub takes
// part: these are the scheduler's decisions and hand-offs alone.

// kerneletYieldRoundTrip measures two tasks yielding to each other on one vCPU: one sample per
// round trip (a yields to b, b yields back to a).
func kerneletYieldRoundTrip(n int) []time.Duration {
	k, err := kernelet.New(1)
	if err != nil {
		return nil
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // a P for each thread and more, as kerneletWake
	a, b := k.NewTask("a"), k.NewTask("b")
	a.Acquire()
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
		pinHostCPU0()
		b.Acquire()
		for i := 0; i < n; i++ {
			b.Yield()
		}
		b.Exit()
	}()
	for k.Stats().Waiting == 0 {
		runtime.Gosched()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer pinHostCPU0()()
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		a.Yield()
		out = append(out, time.Since(t0))
	}
	a.Exit()
	<-done
	return out
}

// kerneletWakeSameVCPU measures a blocked high-priority (FIFO) task woken by a lower (ordinary)
// one that holds the only vCPU, as the kernel wakes a task from a futex wait: the waker's Wake
// finds the vCPU held by a lower task and kicks it; here the holder is the waker itself, which
// gives way (Preempted), and the vCPU's grant wakes the woken task's thread (OnGrant, a host
// futex). A sample runs from just before Wake until the woken task's Acquire returns.
func kerneletWakeSameVCPU(n int) []time.Duration { return kerneletWake(n, 1) }

// kerneletWakeKick is the same with two vCPUs: the wakee may run only on vCPU 1, whose holder
// (lower, on a thread of its own) sleeps until the kick wakes it (the kernel's kick is a signal
// that makes the holder's thread trap, then a futex wake of its carrier), then gives way.
func kerneletWakeKick(n int) []time.Duration { return kerneletWake(n, 2) }

func kerneletWake(n, vcpus int) []time.Duration {
	k, err := kernelet.New(vcpus)
	if err != nil {
		return nil
	}
	// A P of the Go runtime for each thread taking part, and one more: the waker spins on its P
	// while it waits for the wakee to sleep, and a woken thread without a free P would wait for
	// the runtime to take one back from a sleeping thread (tens of µs to 10 ms, whence a median
	// of 113 µs in some runs of the kick row with 2 Ps, 11-12 µs with 4).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(vcpus + 2))
	pin := vcpus - 1 // the wakee's vCPU, held by the low-priority holder
	low := k.NewTask("low")
	low.SetAffinity(kernelet.CPUSetOf(pin), false)
	hi := k.NewTask("hi")
	hi.SetPolicy(kernelet.FIFO, 10, false)
	hi.SetAffinity(kernelet.CPUSetOf(pin), false)

	// Each task's thread sleeps on a host futex of its own, as a carrier does.
	var hiPark, lowPark park.Parker
	var woken, kicked, stop atomic.Bool
	hi.OnGrant = hiPark.Wake
	k.OnKick(func(t *kernelet.Task) {
		if t == low {
			kicked.Store(true)
			lowPark.Wake()
		}
	})
	var t0 time.Time // written before woken is set, read after it is seen
	var hiTid, served atomic.Int32
	out := make([]time.Duration, 0, n)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
		if vcpus == 1 {
			pinHostCPU0() // the same host CPU as the waker, as Linux's row has them
		}
		hi.Acquire() // once, so that it sleeps from now on as a task that has run
		hi.Release()
		hiTid.Store(int32(unix.Gettid()))
		for range n {
			hiPark.Until(woken.Load)
			woken.Store(false)
			hi.Acquire()
			out = append(out, time.Since(t0))
			hi.Release()
			served.Add(1)
		}
		hi.Exit()
	}()
	for hiTid.Load() == 0 {
		runtime.Gosched()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if vcpus == 1 {
		defer pinHostCPU0()()
	}
	waker := low
	if vcpus > 1 {
		// The waker runs on vCPU 0; the low holder of the wakee's vCPU serves its kicks.
		waker = k.NewTask("waker")
		waker.SetAffinity(kernelet.CPUSetOf(0), false)
		lowDone := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			defer close(lowDone)
			low.Acquire()
			for {
				lowPark.Until(func() bool { return kicked.Load() || stop.Load() })
				if stop.Load() {
					low.Exit()
					return
				}
				kicked.Store(false)
				low.Preempted()
			}
		}()
		defer func() {
			stop.Store(true)
			lowPark.Wake()
			<-lowDone
		}()
	}
	waker.Acquire()
	for i := range n {
		// The wakee must have taken the last wake and be asleep again before the next (the
		// Linux row waits the same way).
		for served.Load() != int32(i) || !threadSleeps(int(hiTid.Load())) {
		}
		t0 = time.Now()
		woken.Store(true)
		if hi.Wake() {
			hiPark.Wake()
		}
		if vcpus == 1 && kicked.Swap(false) {
			low.Preempted() // the waker holds the wakee's vCPU: it gives way
		}
	}
	<-done
	waker.Exit()
	return out
}

// threadSleeps reports whether a thread of this process sleeps in the host ('S' in its stat).
func threadSleeps(tid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'S'
}

// pinHostCPU0 binds the calling (locked) thread to host CPU 0, as Linux's side of the same row
// is, and returns what undoes it: otherwise each hand-off wakes a thread on the other CPU, which
// on a paravirtualised host costs ~25 us alone (the pipe row).
func pinHostCPU0() (undo func()) {
	var old, one unix.CPUSet
	if unix.SchedGetaffinity(0, &old) != nil {
		return func() {}
	}
	one.Set(0)
	if unix.SchedSetaffinity(0, &one) != nil {
		return func() {}
	}
	return func() { unix.SchedSetaffinity(0, &old) }
}
