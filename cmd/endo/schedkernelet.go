package main

import (
	"runtime"
	"time"

	"github.com/endovisor/endo/sandbox/kernelet"
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
	a, b := k.NewTask("a"), k.NewTask("b")
	a.Acquire()
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
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
// one that holds the only vCPU: from the wake (the waker's event, here the Acquire call's start
// stands for it) until the woken task holds the vCPU. The waker gets the kick and gives way.
func kerneletWakeSameVCPU(n int) []time.Duration { return kerneletWake(n, 1) }

// kerneletWakeKick is the same with two vCPUs, the wakee pinned to the other vCPU, whose holder
// runs lower-priority work: the wakee's vCPU is kicked, its holder gives way.
func kerneletWakeKick(n int) []time.Duration { return kerneletWake(n, 2) }

func kerneletWake(n, vcpus int) []time.Duration {
	k, err := kernelet.New(vcpus)
	if err != nil {
		return nil
	}
	kicked := make(chan *kernelet.Task, 1)
	k.OnKick(func(t *kernelet.Task) {
		select {
		case kicked <- t:
		default:
		}
	})
	pin := vcpus - 1 // the wakee's vCPU, held by the low-priority holder
	low := k.NewTask("low")
	low.SetAffinity(kernelet.CPUSetOf(pin), false)
	hi := k.NewTask("hi")
	hi.SetPolicy(kernelet.FIFO, 10, false)
	hi.SetAffinity(kernelet.CPUSetOf(pin), false)

	wake := make(chan time.Time)
	ran := make(chan time.Duration)
	go func() {
		runtime.LockOSThread()
		for t0 := range wake {
			hi.Acquire()
			d := time.Since(t0)
			hi.Release()
			ran <- d
		}
		hi.Exit()
		close(ran)
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	low.Acquire()
	waker := low
	if vcpus > 1 {
		// The waker runs on vCPU 0; the low holder of the wakee's vCPU is another task, which
		// serves its kicks on its own goroutine.
		waker = k.NewTask("waker")
		waker.SetAffinity(kernelet.CPUSetOf(0), false)
		waker.Acquire()
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			runtime.LockOSThread()
			for {
				select {
				case t := <-kicked:
					t.Preempted()
				case <-stop:
					low.Exit()
					return
				}
			}
		}()
	}
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		wake <- time.Now()
		if vcpus == 1 {
			<-kicked // the waker itself holds the wakee's vCPU: it gives way
			low.Preempted()
		}
		out = append(out, <-ran)
	}
	close(wake)
	<-ran
	if vcpus == 1 {
		low.Exit()
	} else {
		waker.Exit()
	}
	return out
}
