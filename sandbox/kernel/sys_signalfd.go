package kernel

import (
	"encoding/binary"
	"math/bits"

	"github.com/endovisor/endo/sandbox/kernel/vfs"
	"golang.org/x/sys/unix"
)

// signalfd: a file from which a process reads its pending signals of a mask (which it blocks)
// as signalfd_siginfo records, and which polls readable while one is pending. A host eventfd
// carries the readiness, so that poll and epoll see it like any host file: it is raised when a
// signal of the mask becomes pending and drained when none is left. The signals are those of
// the process that made the file (Linux reads the reader's; they differ only for a file passed
// to another process).
type signalfd struct {
	p    *Process
	mask uint64 // guarded by p.mu
	efd  int    // the File's host eventfd
}

// signalfdInfoSize is sizeof(struct signalfd_siginfo).
const signalfdInfoSize = 128

func sysSignalfd(t *Task, a sysargs) (uint64, error) { return t.signalfd(a[0], a[1], a[2], 0) }
func sysSignalfd4(t *Task, a sysargs) (uint64, error) {
	return t.signalfd(a[0], a[1], a[2], a[3])
}

func (t *Task) signalfd(fd, maskAddr, size, flags uint64) (uint64, error) {
	p := t.p
	if size != 8 || flags&^(unix.SFD_CLOEXEC|unix.SFD_NONBLOCK) != 0 {
		return 0, unix.EINVAL
	}
	var b [8]byte
	if err := p.k.svc.CopyIn(p.as, b[:], maskAddr); err != nil {
		return 0, err
	}
	mask := binary.LittleEndian.Uint64(b[:]) &^ unblockable
	if int32(fd) != -1 {
		// A new mask for an existing signalfd.
		f, err := t.file(fd)
		if err != nil {
			return 0, err
		}
		defer f.DecRef()
		sf, ok := f.Private().(*signalfd)
		if !ok {
			return 0, unix.EINVAL
		}
		p.mu.Lock()
		sf.mask = mask
		p.mu.Unlock()
		sf.update()
		return fd, nil
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return 0, err
	}
	sf := &signalfd{p: p, mask: mask, efd: efd}
	f := vfs.AnonFile(efd, "signalfd", unix.O_RDWR|int(flags&unix.SFD_NONBLOCK), true, sf)
	p.mu.Lock()
	p.signalfds = append(p.signalfds, sf)
	p.mu.Unlock()
	f.Watch(sf)
	sf.update()
	return t.install(f, 0, flags&unix.SFD_CLOEXEC != 0)
}

// FileReleased is told when the file's last reference goes: the process forgets it.
func (sf *signalfd) FileReleased(*vfs.File) {
	p := sf.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.signalfds {
		if x == sf {
			p.signalfds = append(p.signalfds[:i], p.signalfds[i+1:]...)
			break
		}
	}
}

// update raises or drains the readiness after the pending signals or the mask changed.
func (sf *signalfd) update() {
	p := sf.p
	p.mu.Lock()
	ready := p.pendingAny() & sf.mask
	p.mu.Unlock()
	if ready != 0 {
		var one [8]byte
		binary.LittleEndian.PutUint64(one[:], 1)
		unix.Write(sf.efd, one[:])
		return
	}
	var drain [8]byte
	unix.Read(sf.efd, drain[:])
}

// pendingAny is every signal pending for the process or one of its tasks (p.mu held).
func (p *Process) pendingAny() uint64 {
	pend := p.pending
	for _, t := range p.tasks {
		pend |= t.pending
	}
	return pend
}

// signalfdsSee tells the process's signalfds that sig became pending.
func (p *Process) signalfdsSee(sig unix.Signal) {
	p.mu.Lock()
	var hit []*signalfd
	for _, sf := range p.signalfds {
		if sf.mask&sigbit(sig) != 0 {
			hit = append(hit, sf)
		}
	}
	p.mu.Unlock()
	for _, sf := range hit {
		sf.update()
	}
}

// read takes pending signals of the mask, a signalfd_siginfo each, as many as fit; it waits for
// one unless the file is non-blocking.
func (sf *signalfd) read(t *Task, f *vfs.File, addr, count uint64) (uint64, error) {
	if count < signalfdInfoSize {
		return 0, unix.EINVAL
	}
	p := t.p
	for {
		var out []byte
		for uint64(len(out))+signalfdInfoSize <= count {
			p.mu.Lock()
			mask := sf.mask
			p.mu.Unlock()
			taker := t
			if t.p != sf.p {
				taker = nil // a file another process made: its signals
			}
			sig, info, ok := sf.p.takeSignal(taker, mask)
			if !ok {
				break
			}
			var rec [signalfdInfoSize]byte
			le := binary.LittleEndian
			le.PutUint32(rec[0:], uint32(sig))
			le.PutUint32(rec[8:], uint32(info.code))
			le.PutUint32(rec[12:], uint32(info.pid))
			le.PutUint32(rec[40:], uint32(info.status))
			le.PutUint64(rec[72:], info.addr)
			out = append(out, rec[:]...)
		}
		sf.update()
		if len(out) > 0 {
			return uint64(len(out)), p.k.svc.CopyOut(p.as, addr, out)
		}
		if f.Flags()&unix.O_NONBLOCK != 0 {
			return 0, unix.EAGAIN
		}
		if err := t.waitReady(f, unix.POLLIN); err != nil {
			return 0, err
		}
	}
}

// takeSignal takes the lowest pending signal of set, task t's own first (t may be nil: the
// process's only), with its siginfo.
func (p *Process) takeSignal(t *Task, set uint64) (unix.Signal, sigInfo, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var own uint64
	if t != nil {
		own = t.pending
	}
	ready := (own | p.pending) & set
	if ready == 0 {
		return 0, sigInfo{}, false
	}
	sig := unix.Signal(bits.TrailingZeros64(ready) + 1)
	if own&sigbit(sig) != 0 {
		t.pending &^= sigbit(sig)
	} else {
		p.pending &^= sigbit(sig)
	}
	info := p.info[sig]
	p.info[sig] = sigInfo{}
	return sig, info, true
}
