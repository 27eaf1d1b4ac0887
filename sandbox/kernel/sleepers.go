package kernel

import (
	"container/heap"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// A task asleep in the kernel until a deadline (nanosleep, a futex wait's timeout, sigtimedwait)
// is woken by the kernel's timer thread, which places it as a futex wake does (wakePlaced): its
// carrier wakes only once the task has a vCPU. When the carrier slept on a host futex with the
// deadline as its timeout, the host woke it to ask for a vCPU even when all of them were busy,
// and it waited for a host CPU beside their runners: the probe saw three of 50 busy tasks
// runnable on 2 vCPUs as the main thread's 3 s sleep ended (traced: 1.25 ms in the host's run
// queue). The timer thread is the sandbox's own, as the Go runtime's threads are, and runs only
// to place the sleepers whose time has come; it runs at the carriers' weight, since a sleep that
// ends late is a task that runs late. (A Go timer would fire on one of the runtime's threads, at
// nice 19 (weight.go), which beside busy vCPUs waited for a CPU: eight threads yielding on 2
// vCPUs made each 2 ms sleep of a ninth last 3.5 ms.)

// waitWoken sleeps on the carrier's own wake word, ticket taken before woken's condition could
// change, until woken reports true, a signal's poke or the stub's end cuts the wait short (cut:
// waitCut), or deadline (zero: none) passes (timedOut). The timer thread ends a timed wait; should
// it be unable to take this one (no timerfd), the carrier's own host futex times out instead.
func (t *Task) waitWoken(ticket uint32, deadline time.Time, woken func() bool) (cut, timedOut bool) {
	k := t.p.k
	timed := !deadline.IsZero()
	hostDeadline, armed := deadline, false
	if timed && time.Until(deadline) > 0 {
		if err := k.sleepers.arm(k, t, deadline); err == nil {
			hostDeadline, armed = time.Time{}, true
			defer k.sleepers.disarm(t)
		} else {
			k.cfg.Log("pid %d: %v; the carrier times its own wait", t.p.pid, err)
		}
	}
	for !woken() {
		if t.waitCut() {
			return true, false
		}
		if armed && t.sleepTimer.fired.Load() || timed && !armed && !time.Now().Before(deadline) {
			return false, !woken()
		}
		t.park.Wait(ticket, hostDeadline)
		ticket = t.park.Ticket()
	}
	return false, false
}

// sleepers is the kernel's timer thread and the deadlines it keeps, earliest first, on one
// timerfd: a sleeper that comes before the earliest sets it anew (one host call), and the thread
// is woken only by the host timer.
type sleepers struct {
	mu      sync.Mutex
	started bool
	fd      int   // CLOCK_MONOTONIC timerfd, once started
	armed   int64 // the expiry fd is set to (ns on CLOCK_MONOTONIC); 0: none
	queue   sleepQueue
	closed  bool
	done    chan struct{}
}

// sleepTimer is a task's deadline while it sleeps (guarded by sleepers.mu, but fired).
type sleepTimer struct {
	task  *Task
	at    int64 // ns on CLOCK_MONOTONIC
	index int   // in the queue; -1 when not in it
	fired atomic.Bool
}

// sleepQueue is a heap of sleep timers by deadline.
type sleepQueue []*sleepTimer

func (q sleepQueue) Len() int           { return len(q) }
func (q sleepQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q sleepQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *sleepQueue) Push(x any) {
	st := x.(*sleepTimer)
	st.index = len(*q)
	*q = append(*q, st)
}
func (q *sleepQueue) Pop() any {
	old := *q
	st := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	st.index = -1
	return st
}

func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// arm starts t's sleep until deadline: from now until disarm, t.sleepTimer.fired says whether
// the deadline has come, and when it does the task is placed and its carrier woken (granted).
func (s *sleepers) arm(k *Kernel, t *Task, deadline time.Time) error {
	st := &t.sleepTimer
	st.task = t
	st.fired.Store(false)
	st.at = monoNow() + int64(time.Until(deadline))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("sleep timer: the kernel is closing")
	}
	if !s.started {
		if err := s.start(k); err != nil {
			return err
		}
	}
	heap.Push(&s.queue, st)
	if s.armed == 0 || st.at < s.armed {
		if err := s.set(st.at); err != nil {
			heap.Remove(&s.queue, st.index) // the caller times its own wait
			return err
		}
	}
	return nil
}

// disarm ends t's sleep, whether or not its deadline came; after it the timer thread does not
// touch the task.
func (s *sleepers) disarm(t *Task) {
	st := &t.sleepTimer
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.index >= 0 && st.index < len(s.queue) && s.queue[st.index] == st {
		heap.Remove(&s.queue, st.index)
		if len(s.queue) == 0 {
			s.set(0) // no wake-up for nobody (a futex wait woken early, the common case)
		}
	}
}

// set makes the timerfd expire at ns on CLOCK_MONOTONIC (0: never); s.mu held.
func (s *sleepers) set(at int64) error {
	spec := unix.ItimerSpec{}
	if at > 0 {
		spec.Value = unix.NsecToTimespec(at)
	}
	if err := unix.TimerfdSettime(s.fd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		return fmt.Errorf("sleep timer: set: %w", err)
	}
	s.armed = at
	return nil
}

// start makes the timerfd and the thread that waits on it (s.mu held).
func (s *sleepers) start(k *Kernel) error {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("sleep timer: %w", err)
	}
	s.fd, s.done, s.started = fd, make(chan struct{}), true
	go s.run(k)
	return nil
}

// run is the timer thread: it reads the timerfd and places every sleeper whose deadline has come.
func (s *sleepers) run(k *Kernel) {
	defer close(s.done)
	defer k.atCarrierWeight()()
	for {
		waitTimerfd(s.fd)
		s.mu.Lock()
		if s.closed {
			unix.Close(s.fd)
			s.mu.Unlock()
			return
		}
		now := monoNow()
		for len(s.queue) > 0 && s.queue[0].at <= now {
			st := heap.Pop(&s.queue).(*sleepTimer)
			st.fired.Store(true)
			// Under s.mu, so that a task whose sleep has ended (disarm) is not woken.
			st.task.wakePlaced(st.task.kt)
		}
		next := int64(0)
		if len(s.queue) > 0 {
			next = s.queue[0].at
		}
		if err := s.set(next); err != nil {
			k.cfg.Log("%v", err)
		}
		s.mu.Unlock()
	}
}

// close stops the timer thread; no task sleeps by then (Kernel.Close).
func (s *sleepers) close() {
	s.mu.Lock()
	s.closed = true
	started := s.started
	if started {
		// Expire at once: the thread wakes, sees closed and ends.
		unix.TimerfdSettime(s.fd, 0, &unix.ItimerSpec{Value: unix.Timespec{Nsec: 1}}, nil)
	}
	s.mu.Unlock()
	if started {
		<-s.done
	}
}
