package kernel

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/endovisor/endo/memgrant"
	"golang.org/x/sys/unix"
)

// Futexes are the kernel's own: a wait queue per (address space, address). The value check and
// the enqueue happen under one lock that every wake takes too, so a waker that changed the word
// before waking cannot be missed. A futex is named by its address space and address; one in
// shared memory, used without FUTEX_PRIVATE_FLAG, by its frame instead, so that the processes
// that share the memory meet there (process-shared mutexes and semaphores).
type futexTable struct {
	mu     sync.Mutex
	queues map[futexKey][]*futexWaiter
}

type futexKey struct {
	as    *memgrant.AddressSpace // nil for a futex in shared memory
	addr  uint64                 // the address, or the offset in its frame
	frame memgrant.Frame
}

// futexKeyOf names the futex at addr for a call with op's flags.
func (t *Task) futexKeyOf(addr, op uint64) futexKey {
	as := t.p.as
	if op&futexPrivateFlag == 0 {
		if f, ok := as.SharedFrame(addr); ok {
			return futexKey{addr: addr & (memgrant.PageSize - 1), frame: f}
		}
	}
	return futexKey{as: as, addr: addr}
}

type futexWaiter struct {
	bitset uint32
	woken  atomic.Bool
	task   *Task
}

const (
	futexOpWait        = 0
	futexOpWake        = 1
	futexOpRequeue     = 3
	futexOpCmpRequeue  = 4
	futexOpWaitBitset  = 9
	futexOpWakeBitset  = 10
	futexPrivateFlag   = 128
	futexClockRealtime = 256
	futexBitsetAny     = 0xffffffff
	futexCmdMask       = ^uint64(futexPrivateFlag | futexClockRealtime)
)

func (ft *futexTable) wake(key futexKey, n int, bitset uint32) int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.wakeLocked(key, n, bitset)
}

func (ft *futexTable) wakeLocked(key futexKey, n int, bitset uint32) int {
	q := ft.queues[key]
	woken := 0
	rest := q[:0]
	for _, w := range q {
		if woken < n && w.bitset&bitset != 0 {
			w.woken.Store(true)
			// Its carrier wakes once it has a vCPU: before, it would only queue itself.
			w.task.wakePlaced(w.task.kt)
			woken++
			continue
		}
		rest = append(rest, w)
	}
	if len(rest) == 0 {
		delete(ft.queues, key)
	} else {
		ft.queues[key] = rest
	}
	return woken
}

func (ft *futexTable) remove(key futexKey, w *futexWaiter) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	q := ft.queues[key]
	for i, x := range q {
		if x == w {
			ft.queues[key] = append(q[:i], q[i+1:]...)
			break
		}
	}
	if len(ft.queues[key]) == 0 {
		delete(ft.queues, key)
	}
}

// load reads the futex word; tenant threads change it natively, so this is a snapshot.
func (t *Task) futexLoad(addr uint64) (uint32, error) {
	if addr%4 != 0 {
		return 0, unix.EINVAL
	}
	var b [4]byte
	if err := t.p.k.svc.CopyIn(t.p.as, b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

// futex(uaddr, op, val, timeout|val2, uaddr2, val3).
func sysFutex(t *Task, a sysargs) (uint64, error) {
	addr, op, val := a[0], a[1], uint32(a[2])
	ft := &t.p.k.futexes
	switch op & futexCmdMask {
	case futexOpWait:
		return t.futexWait(t.futexKeyOf(addr, op), addr, val, a[3], false, op&futexClockRealtime != 0, futexBitsetAny)
	case futexOpWaitBitset:
		if uint32(a[5]) == 0 {
			return 0, unix.EINVAL
		}
		return t.futexWait(t.futexKeyOf(addr, op), addr, val, a[3], true, op&futexClockRealtime != 0, uint32(a[5]))
	case futexOpWake:
		return uint64(ft.wake(t.futexKeyOf(addr, op), int(int32(val)), futexBitsetAny)), nil
	case futexOpWakeBitset:
		if uint32(a[5]) == 0 {
			return 0, unix.EINVAL
		}
		return uint64(ft.wake(t.futexKeyOf(addr, op), int(int32(val)), uint32(a[5]))), nil
	case futexOpRequeue, futexOpCmpRequeue:
		ft.mu.Lock()
		defer ft.mu.Unlock()
		if op&futexCmdMask == futexOpCmpRequeue {
			cur, err := t.futexLoad(addr)
			if err != nil {
				return 0, err
			}
			if cur != uint32(a[5]) {
				return 0, unix.EAGAIN
			}
		}
		from, to := t.futexKeyOf(addr, op), t.futexKeyOf(a[4], op)
		n := ft.wakeLocked(from, int(int32(val)), futexBitsetAny)
		moved := 0
		for len(ft.queues[from]) > 0 && moved < int(int32(a[3])) {
			w := ft.queues[from][0]
			ft.queues[from] = ft.queues[from][1:]
			ft.queues[to] = append(ft.queues[to], w)
			moved++
		}
		if len(ft.queues[from]) == 0 {
			delete(ft.queues, from)
		}
		return uint64(n + moved), nil
	}
	t.p.k.countUnimplemented(unix.SYS_FUTEX)
	return 0, unix.ENOSYS
}

// futexWait sleeps while the word at addr holds val, without a vCPU, until a wake, the timeout
// (relative, or absolute for the bitset form) or a signal.
func (t *Task) futexWait(key futexKey, addr uint64, val uint32, tsAddr uint64, absolute, realtime bool, bitset uint32) (uint64, error) {
	var deadline time.Time
	if tsAddr != 0 {
		d, err := t.readTimespec(tsAddr)
		if err != nil {
			return 0, err
		}
		if absolute {
			clock := int32(unix.CLOCK_MONOTONIC)
			if realtime {
				clock = unix.CLOCK_REALTIME
			}
			var now unix.Timespec
			unix.ClockGettime(clock, &now)
			d -= time.Duration(now.Nano())
		}
		deadline = time.Now().Add(d)
	}
	ft := &t.p.k.futexes
	w := &futexWaiter{bitset: bitset, task: t}
	ticket := t.park.Ticket()
	ft.mu.Lock()
	cur, err := t.futexLoad(addr)
	if err != nil {
		ft.mu.Unlock()
		return 0, err
	}
	if cur != val {
		ft.mu.Unlock()
		return 0, unix.EAGAIN
	}
	if ft.queues == nil {
		ft.queues = map[futexKey][]*futexWaiter{}
	}
	ft.queues[key] = append(ft.queues[key], w)
	ft.mu.Unlock()

	var result error
	t.blocking(func() {
		// The carrier sleeps on its own wake word: a waker reaches it with one host call.
		switch cut, timedOut := t.waitWoken(ticket, deadline, w.woken.Load); {
		case cut:
			result = unix.EINTR
		case timedOut:
			result = unix.ETIMEDOUT
		}
	})
	if result != nil {
		if w.woken.Load() { // woken meanwhile: that wins
			return 0, nil
		}
		ft.remove(key, w)
		if result == unix.EINTR {
			t.interrupted = true
		}
		return 0, result
	}
	return 0, nil
}
