package kernel

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/endovisor/endo/sandbox/kernel/vfs"
	"golang.org/x/sys/unix"
)

// epoll and eventfd. A tenant epoll set is a host epoll instance behind an anonymous tenant fd,
// with the interest list kept here: the host does readiness, edge triggering and one-shot for
// host-backed files, the sandbox maps host events back to the tenant's data. Each item registers
// its own duplicate of the file's host fd, so that one open file added under two tenant fds is two
// items, as on Linux; the item goes when the tenant deletes it or when the file's last reference
// goes (a release watcher, vfs/epoll.go), so the set never keeps a file open. The sandbox's
// synthetic files (/dev, /proc) have no host fd: they are always ready, as in poll.
//
// A wait takes no vCPU: it polls the host epoll fd together with the task's interrupt eventfd,
// and a signal ends it with EINTR (epoll waits are never restarted, as on Linux).
//
// Known gaps: a synthetic item does not make its set readable to poll or to an outer epoll set.

// epollEventSize is sizeof(struct epoll_event) on x86-64 (packed: events, then 64-bit data).
const epollEventSize = 12

// maxEpollEvents is Linux's EP_MAX_EVENTS: INT_MAX / sizeof(struct epoll_event).
const maxEpollEvents = 0x7fffffff / epollEventSize

// epollHarvestMax bounds how many events one wait collects (fewer than maxevents is allowed).
const epollHarvestMax = 1024

// epollExclusiveOK are the event bits EPOLLEXCLUSIVE may come with (Linux's
// EPOLLEXCLUSIVE_OK_BITS).
const epollExclusiveOK = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLERR | unix.EPOLLHUP | unix.EPOLLWAKEUP |
	unix.EPOLLET | unix.EPOLLEXCLUSIVE

// epollKey names an item as Linux does: the open file and the fd it was added under.
type epollKey struct {
	file *vfs.File
	fd   int
}

// epollItem is one entry of an interest list.
type epollItem struct {
	key    epollKey
	id     uint64 // the host epoll's data for this item
	events uint32 // what the tenant asked for, with its flags
	data   uint64 // returned to the tenant as given
	dup    int    // the host fd registered in the host set; -1 for a synthetic file
	armed  bool   // a synthetic edge-triggered or one-shot item has an event to report
}

// epollSet is the kernel's state of one tenant epoll set.
type epollSet struct {
	file *vfs.File // the tenant's open file of the set; its host fd is the host epoll instance
	ep   int

	mu     sync.Mutex
	closed bool
	items  map[*vfs.File]map[int]*epollItem
	byID   map[uint64]*epollItem
	synth  map[*epollItem]struct{}
	nextID uint64
}

// newEpollSet makes a set and its tenant file.
func newEpollSet() (*vfs.File, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	s := &epollSet{ep: ep, items: map[*vfs.File]map[int]*epollItem{}, byID: map[uint64]*epollItem{},
		synth: map[*epollItem]struct{}{}}
	f := vfs.AnonFile(ep, "eventpoll", unix.O_RDWR, false, s)
	s.file = f
	// The set learns of its own end too, to let go of the files it watches.
	f.Watch(s)
	return f, nil
}

// FileReleased drops the items of a file whose last reference went; when the file is the set's
// own, the whole set goes (its host epoll fd closes right after).
func (s *epollSet) FileReleased(f *vfs.File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if f == s.file {
		s.closed = true
		for file, byFd := range s.items {
			for _, it := range byFd {
				file.Unwatch(s)
				s.dropLocked(it, false)
			}
		}
		return
	}
	for _, it := range s.items[f] {
		s.dropLocked(it, true)
	}
}

// dropLocked takes an item out of the set: out of the host set (unless the host set is going
// anyway) and out of the maps. The caller holds s.mu and has unwatched the file if needed.
func (s *epollSet) dropLocked(it *epollItem, hostDel bool) {
	if it.dup >= 0 {
		if hostDel {
			unix.EpollCtl(s.ep, unix.EPOLL_CTL_DEL, it.dup, nil)
		}
		unix.Close(it.dup)
	}
	delete(s.byID, it.id)
	delete(s.synth, it)
	if byFd := s.items[it.key.file]; byFd != nil {
		delete(byFd, it.key.fd)
		if len(byFd) == 0 {
			delete(s.items, it.key.file)
		}
	}
}

// hostEvents is what the host set is asked to watch for an item: the tenant's events without
// EPOLLWAKEUP (the tenant may not keep the host awake).
func hostEvents(events uint32) uint32 { return events &^ unix.EPOLLWAKEUP }

// ctl serves epoll_ctl for target file tf open at fd. The caller has checked the arguments.
func (s *epollSet) ctl(op int, fd int, tf *vfs.File, events uint32, data uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return unix.EBADF
	}
	key := epollKey{tf, fd}
	it := s.items[tf][fd]
	switch op {
	case unix.EPOLL_CTL_ADD:
		if it != nil {
			return unix.EEXIST
		}
		s.nextID++
		it = &epollItem{key: key, id: s.nextID, events: events, data: data, dup: -1, armed: true}
		if hfd := tf.HostFd(); hfd >= 0 {
			dup, err := unix.FcntlInt(uintptr(hfd), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				return unix.ENOMEM
			}
			ev := unix.EpollEvent{Events: hostEvents(events), Fd: int32(it.id), Pad: int32(it.id >> 32)}
			if err := unix.EpollCtl(s.ep, unix.EPOLL_CTL_ADD, dup, &ev); err != nil {
				unix.Close(dup)
				return err
			}
			it.dup = dup
		} else {
			s.synth[it] = struct{}{}
		}
		if !tf.Watch(s) {
			// Released meanwhile: cannot happen while the caller holds a reference.
			s.dropLocked(it, true)
			return unix.EBADF
		}
		if s.items[tf] == nil {
			s.items[tf] = map[int]*epollItem{}
		}
		s.items[tf][fd] = it
		s.byID[it.id] = it
		return nil
	case unix.EPOLL_CTL_MOD:
		if it == nil {
			return unix.ENOENT
		}
		if it.events&unix.EPOLLEXCLUSIVE != 0 {
			return unix.EINVAL
		}
		if it.dup >= 0 {
			ev := unix.EpollEvent{Events: hostEvents(events), Fd: int32(it.id), Pad: int32(it.id >> 32)}
			if err := unix.EpollCtl(s.ep, unix.EPOLL_CTL_MOD, it.dup, &ev); err != nil {
				return err
			}
		}
		it.events, it.data, it.armed = events, data, true
		return nil
	case unix.EPOLL_CTL_DEL:
		if it == nil {
			return unix.ENOENT
		}
		tf.Unwatch(s)
		s.dropLocked(it, true)
		return nil
	}
	return unix.EINVAL
}

// epollOut is one event for the tenant.
type epollOut struct {
	events uint32
	data   uint64
}

// harvest collects up to max ready events without waiting: the host set's, then the synthetic
// items'.
func (s *epollSet) harvest(max int) ([]epollOut, error) {
	buf := make([]unix.EpollEvent, min(max, epollHarvestMax))
	var n int
	var err error
	for {
		if n, err = unix.EpollWait(s.ep, buf, 0); err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]epollOut, 0, n)
	for _, ev := range buf[:n] {
		id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
		// An item deleted since the host reported it is not reported.
		if it := s.byID[id]; it != nil {
			out = append(out, epollOut{ev.Events, it.data})
		}
	}
	for it := range s.synth {
		if len(out) >= max {
			break
		}
		once := it.events&(unix.EPOLLET|unix.EPOLLONESHOT) != 0
		if once && !it.armed {
			continue
		}
		ready := uint32(defaultPollMask) & (it.events | unix.EPOLLERR | unix.EPOLLHUP)
		if ready == 0 {
			continue
		}
		it.armed = false
		out = append(out, epollOut{ready, it.data})
	}
	return out, nil
}

// epollWait waits up to timeout (negative: forever) for events of the set open at epfd and
// writes them to the tenant's array at addr.
func (t *Task) epollWait(epfd, addr uint64, maxArg uint64, timeout time.Duration) (uint64, error) {
	maxev := int64(int32(maxArg))
	if maxev <= 0 || maxev > maxEpollEvents {
		return 0, unix.EINVAL
	}
	f, err := t.file(epfd)
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	if f.Flags()&unix.O_PATH != 0 {
		return 0, unix.EBADF
	}
	s, ok := f.Private().(*epollSet)
	if !ok {
		return 0, unix.EINVAL
	}
	out, err := s.harvest(int(maxev))
	if err != nil {
		return 0, err
	}
	if len(out) == 0 && timeout != 0 {
		if out, err = t.epollBlock(s, int(maxev), timeout); err != nil {
			return 0, err
		}
	}
	if len(out) == 0 {
		return 0, nil
	}
	raw := make([]byte, epollEventSize*len(out))
	for i, e := range out {
		binary.LittleEndian.PutUint32(raw[epollEventSize*i:], e.events)
		binary.LittleEndian.PutUint64(raw[epollEventSize*i+4:], e.data)
	}
	if err := t.p.k.svc.CopyOut(t.p.as, addr, raw); err != nil {
		return 0, unix.EFAULT
	}
	return uint64(len(out)), nil
}

// epollBlock waits without the vCPU until the set has events, the timeout passes (no events) or
// a signal comes (EINTR).
func (t *Task) epollBlock(s *epollSet, maxev int, timeout time.Duration) ([]epollOut, error) {
	ifd, err := t.interruptFd()
	if err != nil {
		return nil, err
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	fds := []unix.PollFd{{Fd: int32(s.ep), Events: unix.POLLIN}, {Fd: int32(ifd), Events: unix.POLLIN}}
	for {
		if t.signalPending() || t.killed.Load() || t.p.dying() {
			return nil, unix.EINTR
		}
		wait := time.Duration(-1)
		if timeout > 0 {
			if wait = time.Until(deadline); wait <= 0 {
				return nil, nil
			}
		}
		fds[0].Revents, fds[1].Revents = 0, 0
		t.blocking(func() { err = hostPoll(fds, wait) })
		if err != nil {
			return nil, err
		}
		if fds[0].Revents != 0 {
			out, err := s.harvest(maxev)
			if err != nil || len(out) > 0 {
				return out, err
			}
		}
		if fds[1].Revents != 0 {
			// Drain the wake-up; the loop's first test tells a signal from a stale wake-up.
			var b [8]byte
			unix.Read(ifd, b[:])
		}
	}
}

// epoll_create(size): size is only checked, as on Linux.
func sysEpollCreate(t *Task, a sysargs) (uint64, error) {
	if int32(a[0]) <= 0 {
		return 0, unix.EINVAL
	}
	return t.epollCreate(false)
}

// epoll_create1(flags).
func sysEpollCreate1(t *Task, a sysargs) (uint64, error) {
	if a[0]&^unix.EPOLL_CLOEXEC != 0 {
		return 0, unix.EINVAL
	}
	return t.epollCreate(a[0]&unix.EPOLL_CLOEXEC != 0)
}

func (t *Task) epollCreate(cloexec bool) (uint64, error) {
	f, err := newEpollSet()
	if err != nil {
		return 0, err
	}
	return t.install(f, 0, cloexec)
}

// epoll_ctl(epfd, op, fd, event*).
func sysEpollCtl(t *Task, a sysargs) (uint64, error) {
	op := int(int32(a[1]))
	var events uint32
	var data uint64
	if op != unix.EPOLL_CTL_DEL {
		var b [epollEventSize]byte
		if err := t.p.k.svc.CopyIn(t.p.as, b[:], a[3]); err != nil {
			return 0, unix.EFAULT
		}
		events, data = binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint64(b[4:])
	}
	ef, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer ef.DecRef()
	fd := int(int32(a[2]))
	tf, err := t.file(a[2])
	if err != nil {
		return 0, err
	}
	defer tf.DecRef()
	if ef.Flags()&unix.O_PATH != 0 || tf.Flags()&unix.O_PATH != 0 {
		return 0, unix.EBADF // O_PATH descriptors are not open for I/O
	}
	// Files without a poll method on Linux (regular files, directories) cannot be watched.
	if tf.IsRegular() || tf.IsDir() {
		return 0, unix.EPERM
	}
	s, ok := ef.Private().(*epollSet)
	if !ok || ef == tf {
		return 0, unix.EINVAL
	}
	if events&unix.EPOLLEXCLUSIVE != 0 {
		if op == unix.EPOLL_CTL_MOD {
			return 0, unix.EINVAL
		}
		if _, nested := tf.Private().(*epollSet); op == unix.EPOLL_CTL_ADD && (nested || events&^epollExclusiveOK != 0) {
			return 0, unix.EINVAL
		}
	}
	return 0, s.ctl(op, fd, tf, events, data)
}

// epoll_wait(epfd, events*, maxevents, timeout_ms).
func sysEpollWait(t *Task, a sysargs) (uint64, error) {
	return t.epollWait(a[0], a[1], a[2], msTimeout(a[3]))
}

// epoll_pwait(epfd, events*, maxevents, timeout_ms, sigmask*, sigsetsize): the wait runs with
// the given mask, as ppoll's.
func sysEpollPwait(t *Task, a sysargs) (uint64, error) {
	return t.epollPwait(a, msTimeout(a[3]))
}

// epoll_pwait2(epfd, events*, maxevents, timeout timespec*, sigmask*, sigsetsize).
func sysEpollPwait2(t *Task, a sysargs) (uint64, error) {
	timeout, err := t.readTimeout(a[3], false)
	if err != nil {
		return 0, err
	}
	return t.epollPwait(a, timeout)
}

func (t *Task) epollPwait(a sysargs, timeout time.Duration) (uint64, error) {
	restore, err := t.waitMask(a[4], a[5])
	if err != nil {
		return 0, err
	}
	n, err := t.epollWait(a[0], a[1], a[2], timeout)
	restore(err == unix.EINTR)
	return n, err
}

// msTimeout is a timeout in milliseconds; a negative one means forever.
func msTimeout(arg uint64) time.Duration {
	ms := int32(arg)
	if ms < 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

// eventfd(initval).
func sysEventfd(t *Task, a sysargs) (uint64, error) { return t.eventfd(a[0], 0) }

// eventfd2(initval, flags).
func sysEventfd2(t *Task, a sysargs) (uint64, error) { return t.eventfd(a[0], a[1]) }

// eventfd makes a host eventfd behind a tenant fd. The host one is always non-blocking: a
// blocking tenant read or write waits in the kernel's poll, without the vCPU and cut short by
// signals, like a pipe's.
func (t *Task) eventfd(initval, flags uint64) (uint64, error) {
	if flags&^(unix.EFD_CLOEXEC|unix.EFD_NONBLOCK|unix.EFD_SEMAPHORE) != 0 {
		return 0, unix.EINVAL
	}
	hfd, err := unix.Eventfd(uint(uint32(initval)), unix.EFD_CLOEXEC|unix.EFD_NONBLOCK|int(flags&unix.EFD_SEMAPHORE))
	if err != nil {
		return 0, err
	}
	f := vfs.AnonFile(hfd, "eventfd", unix.O_RDWR|int(flags&unix.EFD_NONBLOCK), true, nil)
	return t.install(f, 0, flags&unix.EFD_CLOEXEC != 0)
}

// timerfd_create(clockid, flags): a host timerfd behind a tenant fd, like eventfd. The tenant's
// clocks are the host's, so the host's timer keeps the tenant's time; reads and polls go to it.
func sysTimerfdCreate(t *Task, a sysargs) (uint64, error) {
	flags := a[1]
	if flags&^(unix.TFD_CLOEXEC|unix.TFD_NONBLOCK) != 0 {
		return 0, unix.EINVAL
	}
	switch a[0] {
	case unix.CLOCK_REALTIME, unix.CLOCK_MONOTONIC, unix.CLOCK_BOOTTIME:
	default:
		return 0, unix.EINVAL // the alarm clocks need CAP_WAKE_ALARM
	}
	hfd, err := unix.TimerfdCreate(int(a[0]), unix.TFD_CLOEXEC|unix.TFD_NONBLOCK)
	if err != nil {
		return 0, err
	}
	f := vfs.AnonFile(hfd, "timerfd", unix.O_RDWR|int(flags&unix.TFD_NONBLOCK), true, timerfdMark{})
	return t.install(f, 0, flags&unix.TFD_CLOEXEC != 0)
}

// timerfdMark tells a timerfd's File from the other anonymous files.
type timerfdMark struct{}

// timerfd returns the host fd of a tenant's timerfd.
func (t *Task) timerfd(fd uint64) (int, func(), error) {
	f, err := t.file(fd)
	if err != nil {
		return 0, nil, err
	}
	if _, ok := f.Private().(timerfdMark); !ok {
		f.DecRef()
		return 0, nil, unix.EINVAL
	}
	return f.HostFd(), func() { f.DecRef() }, nil
}

// timerfd_settime(fd, flags, new, old): the tenant's itimerspecs as they are, to the host timer.
func sysTimerfdSettime(t *Task, a sysargs) (uint64, error) {
	if a[1]&^(unix.TFD_TIMER_ABSTIME|unix.TFD_TIMER_CANCEL_ON_SET) != 0 {
		return 0, unix.EINVAL
	}
	hfd, done, err := t.timerfd(a[0])
	if err != nil {
		return 0, err
	}
	defer done()
	var nv, ov unix.ItimerSpec
	if err := t.p.k.svc.CopyIn(t.p.as, structBytes(&nv), a[2]); err != nil {
		return 0, err
	}
	if err := unix.TimerfdSettime(hfd, int(a[1]), &nv, &ov); err != nil {
		return 0, err
	}
	if a[3] == 0 {
		return 0, nil
	}
	return 0, t.p.k.svc.CopyOut(t.p.as, a[3], structBytes(&ov))
}

func sysTimerfdGettime(t *Task, a sysargs) (uint64, error) {
	hfd, done, err := t.timerfd(a[0])
	if err != nil {
		return 0, err
	}
	defer done()
	var cur unix.ItimerSpec
	if err := unix.TimerfdGettime(hfd, &cur); err != nil {
		return 0, err
	}
	return 0, t.p.k.svc.CopyOut(t.p.as, a[1], structBytes(&cur))
}

// inotify_init1(flags): a host inotify instance behind a tenant fd. Its events name files
// relative to the watched directory only, so nothing of the host's paths reaches the tenant.
func sysInotifyInit(t *Task, a sysargs) (uint64, error) { return t.inotifyInit(0) }
func sysInotifyInit1(t *Task, a sysargs) (uint64, error) {
	return t.inotifyInit(a[0])
}

func (t *Task) inotifyInit(flags uint64) (uint64, error) {
	if flags&^(unix.IN_CLOEXEC|unix.IN_NONBLOCK) != 0 {
		return 0, unix.EINVAL
	}
	hfd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return 0, err
	}
	f := vfs.AnonFile(hfd, "inotify", unix.O_RDONLY|int(flags&unix.IN_NONBLOCK), true, inotifyMark{})
	return t.install(f, 0, flags&unix.IN_CLOEXEC != 0)
}

// inotifyMark tells an inotify instance's File from the other anonymous files.
type inotifyMark struct{}

func (t *Task) inotify(fd uint64) (*vfs.File, error) {
	f, err := t.file(fd)
	if err != nil {
		return nil, err
	}
	if _, ok := f.Private().(inotifyMark); !ok {
		f.DecRef()
		return nil, unix.EINVAL
	}
	return f, nil
}

// inotify_add_watch(fd, path, mask): the path is resolved in the container's view; the host
// watches the very file through the sandbox's own descriptor of it.
func sysInotifyAddWatch(t *Task, a sysargs) (uint64, error) {
	in, err := t.inotify(a[0])
	if err != nil {
		return 0, err
	}
	defer in.DecRef()
	mask := uint32(a[2])
	if mask&unix.IN_ALL_EVENTS == 0 {
		return 0, unix.EINVAL
	}
	base, p, err := t.pathAt(atFDCWD, a[1])
	if err != nil {
		return 0, err
	}
	flags := unix.O_PATH
	if mask&unix.IN_DONT_FOLLOW != 0 {
		flags |= unix.O_NOFOLLOW
	}
	f, err := t.p.fs.Open(base, p, flags, 0)
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	if f.HostFd() < 0 {
		return 0, unix.EINVAL // the sandbox's own /proc and /dev change without events
	}
	wd, err := unix.InotifyAddWatch(in.HostFd(), fmt.Sprintf("/proc/self/fd/%d", f.HostFd()), mask&^unix.IN_DONT_FOLLOW)
	return uint64(wd), err
}

func sysInotifyRmWatch(t *Task, a sysargs) (uint64, error) {
	in, err := t.inotify(a[0])
	if err != nil {
		return 0, err
	}
	defer in.DecRef()
	_, err = unix.InotifyRmWatch(in.HostFd(), uint32(a[1]))
	return 0, err
}
