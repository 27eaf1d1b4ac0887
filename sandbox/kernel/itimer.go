package kernel

import (
	"encoding/binary"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// realTimer is a process's ITIMER_REAL, which alarm(2) sets too: when it runs out the process gets
// SIGALRM, and with an interval it starts again. A fork's child starts without one; execve keeps it.
type realTimer struct {
	mu       sync.Mutex
	timer    *time.Timer
	deadline time.Time
	interval time.Duration
	gen      uint64 // bumped at every set, so that a timer already firing for an old setting does nothing
}

// set arms the timer (value 0 disarms it) and returns what was left of the old setting.
func (r *realTimer) set(p *Process, value, interval time.Duration) (left, oldInterval time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	left, oldInterval = r.leftLocked(), r.interval
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.gen++
	r.interval = interval
	if value <= 0 {
		r.deadline = time.Time{}
		return left, oldInterval
	}
	r.armLocked(p, value)
	return left, oldInterval
}

func (r *realTimer) armLocked(p *Process, d time.Duration) {
	gen := r.gen
	r.deadline = time.Now().Add(d)
	r.timer = time.AfterFunc(d, func() { r.fire(p, gen) })
}

func (r *realTimer) fire(p *Process, gen uint64) {
	r.mu.Lock()
	if gen != r.gen {
		r.mu.Unlock()
		return
	}
	if r.interval > 0 {
		r.armLocked(p, r.interval)
	} else {
		r.timer, r.deadline = nil, time.Time{}
	}
	r.mu.Unlock()
	p.Signal(unix.SIGALRM) // fails only for a process that has ended, whose timer is stopped
}

// get returns what is left and the interval.
func (r *realTimer) get() (left, interval time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leftLocked(), r.interval
}

func (r *realTimer) leftLocked() time.Duration {
	if r.deadline.IsZero() {
		return 0
	}
	// An armed timer never reports zero left, as on Linux.
	return max(time.Until(r.deadline), time.Microsecond)
}

// stop disarms the timer for good (the process has ended).
func (r *realTimer) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.gen++
	r.deadline = time.Time{}
}

func sysAlarm(t *Task, a sysargs) (uint64, error) {
	left, _ := t.p.alarm.set(t.p, time.Duration(uint32(a[0]))*time.Second, 0)
	// Whole seconds left, rounded to the nearest, and at least one if the alarm was set.
	secs := uint64((left + 500*time.Millisecond) / time.Second)
	if secs == 0 && left > 0 {
		secs = 1
	}
	return secs, nil
}

// The kinds of interval timer. Only the real one is there: the two that count the process's CPU
// time are not (a clear ENOSYS, counted in the report, rather than a timer that never fires).
const (
	itimerReal    = 0
	itimerVirtual = 1
	itimerProf    = 2
)

func sysSetitimer(t *Task, a sysargs) (uint64, error) {
	which, newAddr, oldAddr := a[0], a[1], a[2]
	if err := itimerKind(t, which); err != nil {
		return 0, err
	}
	value, interval := time.Duration(0), time.Duration(0)
	if newAddr != 0 {
		var b [32]byte
		if err := t.p.k.svc.CopyIn(t.p.as, b[:], newAddr); err != nil {
			return 0, err
		}
		var ok bool
		if interval, ok = timeval(b[0:16]); !ok {
			return 0, unix.EINVAL
		}
		if value, ok = timeval(b[16:32]); !ok {
			return 0, unix.EINVAL
		}
	}
	left, oldInterval := t.p.alarm.set(t.p, value, interval)
	if oldAddr != 0 {
		return 0, putItimerval(t, oldAddr, left, oldInterval)
	}
	return 0, nil
}

func sysGetitimer(t *Task, a sysargs) (uint64, error) {
	if err := itimerKind(t, a[0]); err != nil {
		return 0, err
	}
	left, interval := t.p.alarm.get()
	return 0, putItimerval(t, a[1], left, interval)
}

func itimerKind(t *Task, which uint64) error {
	switch which {
	case itimerReal:
		return nil
	case itimerVirtual, itimerProf:
		t.p.k.countUnimplemented(unix.SYS_SETITIMER)
		return unix.ENOSYS
	}
	return unix.EINVAL
}

// timeval reads a struct timeval; a negative or out-of-range one is invalid.
func timeval(b []byte) (time.Duration, bool) {
	sec := int64(binary.LittleEndian.Uint64(b[0:8]))
	usec := int64(binary.LittleEndian.Uint64(b[8:16]))
	if sec < 0 || usec < 0 || usec >= 1_000_000 || sec > int64(1<<62)/int64(time.Second) {
		return 0, false
	}
	return time.Duration(sec)*time.Second + time.Duration(usec)*time.Microsecond, true
}

func putItimerval(t *Task, addr uint64, left, interval time.Duration) error {
	var b [32]byte
	putTimeval(b[0:16], interval)
	putTimeval(b[16:32], left)
	return t.p.k.svc.CopyOut(t.p.as, addr, b[:])
}

func putTimeval(b []byte, d time.Duration) {
	binary.LittleEndian.PutUint64(b[0:8], uint64(d/time.Second))
	binary.LittleEndian.PutUint64(b[8:16], uint64(d%time.Second/time.Microsecond))
}
