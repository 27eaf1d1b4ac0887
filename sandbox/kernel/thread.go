package kernel

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"time"

	"github.com/endovisor/endo/crossing"
	"golang.org/x/sys/unix"
)

// The clone flags of a thread: glibc's pthread_create and Go's runtime both use these.
const threadFlags = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
	unix.CLONE_THREAD | unix.CLONE_SYSVSEM

// newThread starts a task in the same process: a new thread of the same stub, whose control
// thread clones it.
func (t *Task) newThread(flags, stack, ptid, ctid, tls uint64) (uint64, error) {
	if flags&threadFlags != threadFlags || flags&^(threadFlags|unix.CLONE_SETTLS|unix.CLONE_PARENT_SETTID|
		unix.CLONE_CHILD_SETTID|unix.CLONE_CHILD_CLEARTID|unix.CLONE_DETACHED) != 0 {
		t.p.k.countUnimplemented(unix.SYS_CLONE)
		return 0, fmt.Errorf("clone flags %#x: %w", flags, unix.EINVAL)
	}
	p, k := t.p, t.p.k
	tid, err := k.allocPid()
	if err != nil {
		return 0, unix.EAGAIN
	}
	// Patched call sites must trap before the thread exists (crossing.Stub.SetSingle), and no
	// task that ends meanwhile may turn them back.
	p.mu.Lock()
	p.threading++
	p.stub.SetSingle(false)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.threading--
		p.mu.Unlock()
		p.updateSingle()
	}()
	th, err := p.stub.NewThread()
	if err != nil {
		k.cfg.Log("pid %d: new thread: %v", p.pid, err)
		return 0, unix.EAGAIN
	}
	nt := &Task{p: p, tid: tid, th: th, fsBase: t.fsBase, comm: t.name(), interrupt: make(chan struct{}, 1)}
	nt.setMask(t.mask())
	if t.kt != nil {
		nt.kt = t.kt.Fork(nt) // policy, nice and affinity, as Linux's threads inherit them
	}
	regs := *t.th.Regs
	regs.Rax = 0
	if stack != 0 {
		regs.Rsp = stack
	}
	if flags&unix.CLONE_SETTLS != 0 {
		nt.fsBase = tls
	}
	regs.Fs_base = nt.fsBase
	*th.Regs = regs
	nt.resumeFlags = crossing.ResumeSetFS | crossing.ResumeResetFPU
	nt.fresh = true
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], uint32(tid))
	if flags&unix.CLONE_PARENT_SETTID != 0 {
		k.svc.CopyOut(p.as, ptid, b[:])
	}
	if flags&unix.CLONE_CHILD_SETTID != 0 {
		k.svc.CopyOut(p.as, ctid, b[:])
	}
	if flags&unix.CLONE_CHILD_CLEARTID != 0 {
		nt.clearTID = ctid
	}
	p.mu.Lock()
	p.tasks = append(p.tasks, nt)
	p.live++
	p.mu.Unlock()
	nt.start()
	t.quiet = true
	return uint64(tid), nil
}

// exitThread ends this task alone: its tid word is cleared and woken (pthread_join waits on it)
// and its stub thread exits.
func (t *Task) exitThread() {
	if t.clearTID != 0 {
		var zero [4]byte
		if t.p.k.svc.CopyOut(t.p.as, t.clearTID, zero[:]) == nil {
			t.p.k.futexes.wake(t.futexKeyOf(t.clearTID, 0), 1, futexBitsetAny)
		}
	}
	t.th.Exit()
	t.alone = true
	t.stop = true
}

// releaseThread frees the ended thread's slot once the host thread is gone.
func (t *Task) releaseThread() {
	deadline := time.Now().Add(100 * time.Millisecond)
	for !t.th.Dead() {
		if time.Now().After(deadline) {
			t.p.k.cfg.Log("pid %d: thread %d did not end; its slot stays taken", t.p.pid, t.tid)
			return
		}
		runtime.Gosched()
	}
	t.th.Release()
}

// task finds a live task of the process by its tid.
func (p *Process) task(tid int) *Task {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.tasks {
		if t.tid == tid {
			return t
		}
	}
	return nil
}
