package kernel

import (
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"
)

// poll, ppoll, select and pselect6 over the tenant's descriptors. Host-backed files (pipes,
// regular files, terminals) are polled on the host, together with the task's interrupt eventfd so
// that a signal or the process's end cuts the wait short, and without the vCPU. The sandbox's own
// synthetic files (/dev, /proc) are always ready, as files without a poll method are on Linux.

// Poll bits that x/sys/unix does not name (asm-generic/poll.h).
const (
	pollrdnorm = 0x40
	pollrdband = 0x80
	pollwrnorm = 0x100
	pollwrband = 0x200
)

// defaultPollMask is what Linux reports for a file that has no poll method.
const defaultPollMask = unix.POLLIN | unix.POLLOUT | pollrdnorm | pollwrnorm

// What select asks for and counts, as Linux's POLLIN_SET, POLLOUT_SET and POLLEX_SET.
const (
	selectIn  = unix.POLLIN | pollrdnorm | pollrdband | unix.POLLHUP | unix.POLLERR
	selectOut = unix.POLLOUT | pollwrnorm | pollwrband | unix.POLLERR
	selectEx  = unix.POLLPRI
)

// pollEntry is one descriptor to poll.
type pollEntry struct {
	fd      int32
	events  int16
	revents int16
}

// pollFds fills in the revents of every entry, waiting up to timeout (negative: forever) for one
// to be ready. It returns how many are ready, or EINTR when a signal (or the process's end) came
// first. A negative fd is skipped; a descriptor that is not open gets POLLNVAL.
func (t *Task) pollFds(es []pollEntry, timeout time.Duration) (int, error) {
	var host []unix.PollFd
	var hostIdx []int // host[i] polls es[hostIdx[i]]
	ready := 0
	for i := range es {
		e := &es[i]
		e.revents = 0
		if e.fd < 0 {
			continue
		}
		f, err := t.p.fds.Get(int(e.fd))
		if err != nil {
			e.revents = unix.POLLNVAL
			ready++
			continue
		}
		// The reference keeps the host descriptor open while it is polled, even if another
		// thread closes the tenant's fd meanwhile.
		defer f.DecRef()
		if f.Flags()&unix.O_PATH != 0 {
			e.revents = unix.POLLNVAL
			ready++
			continue
		}
		fd := f.HostFd()
		if fd < 0 {
			if e.revents = defaultPollMask & (e.events | unix.POLLERR | unix.POLLHUP); e.revents != 0 {
				ready++
			}
			continue
		}
		host = append(host, unix.PollFd{Fd: int32(fd), Events: e.events})
		hostIdx = append(hostIdx, i)
	}
	collect := func() int {
		n := 0
		for i, h := range host {
			if h.Revents != 0 {
				es[hostIdx[i]].revents = h.Revents
				n++
			}
		}
		return n
	}
	// A first look that never blocks, on the vCPU.
	if len(host) > 0 {
		if err := hostPoll(host, 0); err != nil {
			return 0, err
		}
		ready += collect()
	}
	if ready > 0 || timeout == 0 {
		return ready, nil
	}
	ifd, err := t.interruptFd()
	if err != nil {
		return 0, err
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	host = append(host, unix.PollFd{Fd: int32(ifd), Events: unix.POLLIN})
	for {
		if t.signalPending() || t.killed.Load() || t.p.dying() {
			return 0, unix.EINTR
		}
		wait := time.Duration(-1)
		if timeout > 0 {
			if wait = time.Until(deadline); wait <= 0 {
				return 0, nil
			}
		}
		for i := range host {
			host[i].Revents = 0
		}
		t.blocking(func() { err = hostPoll(host, wait) })
		if err != nil {
			return 0, err
		}
		intr := host[len(host)-1].Revents != 0
		host = host[:len(host)-1]
		n := collect()
		host = append(host, unix.PollFd{Fd: int32(ifd), Events: unix.POLLIN})
		if n > 0 {
			return n, nil
		}
		if intr {
			// Drain the wake-up; the loop's first test tells a signal from a stale wake-up.
			var b [8]byte
			unix.Read(ifd, b[:])
		}
	}
}

// hostPoll polls the host descriptors for up to wait (negative: forever); the Go runtime's own
// signals interrupting it restart it with what is left.
func hostPoll(fds []unix.PollFd, wait time.Duration) error {
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	for {
		var ts *unix.Timespec
		if wait >= 0 {
			left := wait
			if wait > 0 {
				left = max(time.Until(deadline), 0)
			}
			v := unix.NsecToTimespec(int64(left))
			ts = &v
		}
		_, err := unix.Ppoll(fds, ts, nil)
		if err != unix.EINTR {
			return err
		}
	}
}

// readPollEntries reads a tenant array of struct pollfd.
func (t *Task) readPollEntries(addr, n uint64) ([]pollEntry, error) {
	t.p.mu.Lock()
	limit := t.p.rlimit(unix.RLIMIT_NOFILE).Cur
	t.p.mu.Unlock()
	if n > limit || n > 1<<20 {
		return nil, unix.EINVAL
	}
	raw := make([]byte, 8*n)
	if n > 0 {
		if err := t.p.k.svc.CopyIn(t.p.as, raw, addr); err != nil {
			return nil, err
		}
	}
	es := make([]pollEntry, n)
	for i := range es {
		es[i].fd = int32(binary.LittleEndian.Uint32(raw[8*i:]))
		es[i].events = int16(binary.LittleEndian.Uint16(raw[8*i+4:]))
	}
	return es, nil
}

// writeRevents writes the revents fields back to the tenant's array.
func (t *Task) writeRevents(addr uint64, es []pollEntry) error {
	for i, e := range es {
		var b [2]byte
		binary.LittleEndian.PutUint16(b[:], uint16(e.revents))
		if err := t.p.k.svc.CopyOut(t.p.as, addr+uint64(8*i)+6, b[:]); err != nil {
			return err
		}
	}
	return nil
}

// poll(fds, nfds, timeout_ms).
func sysPoll(t *Task, a sysargs) (uint64, error) {
	es, err := t.readPollEntries(a[0], a[1])
	if err != nil {
		return 0, err
	}
	timeout := time.Duration(-1)
	if ms := int32(a[2]); ms >= 0 {
		timeout = time.Duration(ms) * time.Millisecond
	}
	n, err := t.pollFds(es, timeout)
	if err != nil {
		return 0, err
	}
	return uint64(n), t.writeRevents(a[0], es)
}

// ppoll(fds, nfds, timeout timespec*, sigmask*, sigsetsize).
func sysPpoll(t *Task, a sysargs) (uint64, error) {
	es, err := t.readPollEntries(a[0], a[1])
	if err != nil {
		return 0, err
	}
	timeout, err := t.readTimeout(a[2], false)
	if err != nil {
		return 0, err
	}
	restore, err := t.waitMask(a[3], a[4])
	if err != nil {
		return 0, err
	}
	start := time.Now()
	n, err := t.pollFds(es, timeout)
	restore(err == unix.EINTR)
	t.writeTimeLeft(a[2], timeout, start, false)
	if err != nil {
		return 0, err
	}
	return uint64(n), t.writeRevents(a[0], es)
}

// select(nfds, readfds, writefds, exceptfds, timeout timeval*).
func sysSelect(t *Task, a sysargs) (uint64, error) {
	timeout, err := t.readTimeout(a[4], true)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	n, err := t.doSelect(a[0], a[1], a[2], a[3], timeout)
	t.writeTimeLeft(a[4], timeout, start, true)
	return n, err
}

// pselect6(nfds, readfds, writefds, exceptfds, timeout timespec*, {sigmask*, sigsetsize}*).
func sysPselect6(t *Task, a sysargs) (uint64, error) {
	timeout, err := t.readTimeout(a[4], false)
	if err != nil {
		return 0, err
	}
	var maskAddr, maskSize uint64
	if a[5] != 0 {
		var b [16]byte
		if err := t.p.k.svc.CopyIn(t.p.as, b[:], a[5]); err != nil {
			return 0, err
		}
		maskAddr, maskSize = binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:])
	}
	restore, err := t.waitMask(maskAddr, maskSize)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	n, err := t.doSelect(a[0], a[1], a[2], a[3], timeout)
	restore(err == unix.EINTR)
	t.writeTimeLeft(a[4], timeout, start, false)
	return n, err
}

// doSelect polls the descriptors of three fd_sets and rewrites the sets with the ready ones.
func (t *Task) doSelect(nfdsArg, rAddr, wAddr, eAddr uint64, timeout time.Duration) (uint64, error) {
	nfds := int64(int32(nfdsArg))
	if nfds < 0 {
		return 0, unix.EINVAL
	}
	nfds = min(nfds, int64(t.p.fds.Limit()))
	words := (nfds + 63) / 64
	sets := [3][]uint64{}
	for i, addr := range []uint64{rAddr, wAddr, eAddr} {
		if addr == 0 || words == 0 {
			continue
		}
		raw := make([]byte, 8*words)
		if err := t.p.k.svc.CopyIn(t.p.as, raw, addr); err != nil {
			return 0, err
		}
		sets[i] = make([]uint64, words)
		for w := range sets[i] {
			sets[i][w] = binary.LittleEndian.Uint64(raw[8*w:])
		}
	}
	isSet := func(s []uint64, fd int64) bool { return s != nil && s[fd/64]&(1<<(fd%64)) != 0 }
	var es []pollEntry
	for fd := int64(0); fd < nfds; fd++ {
		var ev int16
		if isSet(sets[0], fd) {
			ev |= unix.POLLIN | pollrdnorm | pollrdband
		}
		if isSet(sets[1], fd) {
			ev |= unix.POLLOUT | pollwrnorm | pollwrband
		}
		if isSet(sets[2], fd) {
			ev |= unix.POLLPRI
		}
		if ev != 0 {
			es = append(es, pollEntry{fd: int32(fd), events: ev})
		}
	}
	n, err := t.pollFds(es, timeout)
	if err != nil {
		return 0, err
	}
	if n > 0 {
		for _, e := range es {
			if e.revents&unix.POLLNVAL != 0 {
				return 0, unix.EBADF
			}
		}
	}
	var out [3][]uint64
	for i := range out {
		if sets[i] != nil {
			out[i] = make([]uint64, words)
		}
	}
	count := 0
	for _, e := range es {
		for i, want := range []int16{selectIn, selectOut, selectEx} {
			if isSet(sets[i], int64(e.fd)) && e.revents&want != 0 {
				out[i][e.fd/64] |= 1 << (e.fd % 64)
				count++
			}
		}
	}
	for i, addr := range []uint64{rAddr, wAddr, eAddr} {
		if out[i] == nil {
			continue
		}
		raw := make([]byte, 8*words)
		for w, v := range out[i] {
			binary.LittleEndian.PutUint64(raw[8*w:], v)
		}
		if err := t.p.k.svc.CopyOut(t.p.as, addr, raw); err != nil {
			return 0, err
		}
	}
	return uint64(count), nil
}

// readTimeout reads a timeout (a timeval for select, else a timespec); no pointer means forever,
// and so does one too long for a time.Duration (centuries).
func (t *Task) readTimeout(addr uint64, timeval bool) (time.Duration, error) {
	if addr == 0 {
		return -1, nil
	}
	var b [16]byte
	if err := t.p.k.svc.CopyIn(t.p.as, b[:], addr); err != nil {
		return 0, err
	}
	sec, frac := int64(binary.LittleEndian.Uint64(b[0:])), int64(binary.LittleEndian.Uint64(b[8:]))
	if sec < 0 || frac < 0 {
		return 0, unix.EINVAL
	}
	unit := time.Nanosecond
	if timeval {
		// Linux carries whole seconds of tv_usec over rather than refusing them.
		unit = time.Microsecond
		sec, frac = sec+frac/1e6, frac%1e6
	} else if frac >= 1e9 {
		return 0, unix.EINVAL
	}
	if sec > int64(1<<62/time.Second) {
		return -1, nil
	}
	return time.Duration(sec)*time.Second + time.Duration(frac)*unit, nil
}

// writeTimeLeft tells the tenant how much of its timeout is left, as Linux's select, pselect6
// and ppoll do; a timeout it cannot write back is not an error (it may be read-only).
func (t *Task) writeTimeLeft(addr uint64, timeout time.Duration, start time.Time, timeval bool) {
	if addr == 0 || timeout <= 0 {
		return
	}
	left := max(timeout-time.Since(start), 0)
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(left/time.Second))
	if timeval {
		binary.LittleEndian.PutUint64(b[8:], uint64(left%time.Second/time.Microsecond))
	} else {
		binary.LittleEndian.PutUint64(b[8:], uint64(left%time.Second))
	}
	t.p.k.svc.CopyOut(t.p.as, addr, b[:])
}

// waitMask sets the signal mask a ppoll or pselect6 waits with (none: the mask stays). The
// function it returns puts the old mask back: at once, or when the wait was cut short by a
// signal, after that signal's handler has its frame (which saves the old mask for sigreturn).
func (t *Task) waitMask(addr, size uint64) (func(interrupted bool), error) {
	if addr == 0 {
		return func(bool) {}, nil
	}
	if size != 8 {
		return nil, unix.EINVAL
	}
	var b [8]byte
	if err := t.p.k.svc.CopyIn(t.p.as, b[:], addr); err != nil {
		return nil, err
	}
	old := t.mask()
	t.setMask(binary.LittleEndian.Uint64(b[:]) &^ unblockable)
	return func(interrupted bool) {
		if interrupted {
			t.savedMask = &old
			return
		}
		t.setMask(old)
	}, nil
}
