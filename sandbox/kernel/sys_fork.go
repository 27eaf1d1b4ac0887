package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/endovisor/endo/crossing"
	"github.com/endovisor/endo/memgrant"
	"github.com/endovisor/endo/sandbox/kernel/vfs"
	"golang.org/x/sys/unix"
)

func sysFork(t *Task, a sysargs) (uint64, error) { return t.fork(uint64(unix.SIGCHLD), 0, 0, 0, 0) }
func sysVfork(t *Task, a sysargs) (uint64, error) {
	return t.fork(unix.CLONE_VM|unix.CLONE_VFORK|uint64(unix.SIGCHLD), 0, 0, 0, 0)
}

// clone(flags, stack, parent_tid, child_tid, tls) on x86-64.
func sysClone(t *Task, a sysargs) (uint64, error) {
	if a[0]&unix.CLONE_THREAD != 0 {
		return t.newThread(a[0], a[1], a[2], a[3], a[4])
	}
	return t.fork(a[0], a[1], a[2], a[3], a[4])
}

// Clone flags a new process may ask for. Sharing ones (VM without VFORK, FILES, FS, SIGHAND)
// without CLONE_THREAD, which goes to newThread, make a process that shares with its parent:
// not supported.
const forkFlags = 0xff | unix.CLONE_VFORK | unix.CLONE_VM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID |
	unix.CLONE_CHILD_SETTID | unix.CLONE_CHILD_CLEARTID

// fork makes a child process: a new stub whose address space is a copy-on-write copy of the
// parent's. CLONE_VM|CLONE_VFORK (vfork, posix_spawn) becomes a copy too, with the parent held
// until the child execs or exits: the child cannot tell, except that its writes stay its own.
func (t *Task) fork(flags, stack, ptid, ctid, tls uint64) (uint64, error) {
	if flags&^forkFlags != 0 || flags&unix.CLONE_VM != 0 && flags&unix.CLONE_VFORK == 0 {
		t.p.k.countUnimplemented(unix.SYS_CLONE)
		t.p.k.cfg.Log("pid %d: clone flags %#x (sharing without CLONE_THREAD) are not supported", t.p.pid, flags)
		return 0, fmt.Errorf("clone %#x: %w", flags, unix.ENOSYS)
	}
	p, k := t.p, t.p.k
	pid, err := k.allocPid()
	if err != nil {
		return 0, unix.EAGAIN
	}
	stub, th, ghost, err := k.newStub()
	if err != nil {
		k.cfg.Log("pid %d: fork: %v", p.pid, err)
		return 0, unix.EAGAIN
	}
	if stub.VDSO() != p.stub.VDSO() {
		k.releaseStub(stub, ghost)
		k.cfg.Log("pid %d: fork: the new stub's vDSO moved (%#x, was %#x)", p.pid, stub.VDSO(), p.stub.VDSO())
		return 0, unix.EAGAIN
	}
	var childAS *memgrant.AddressSpace
	if ghost != nil {
		// A recycled stub: only what differs from its last process's mappings is mapped.
		childAS, err = p.as.ForkOver(ghost, layoutFor(stub))
	} else {
		childAS, err = p.as.Fork(stub, layoutFor(stub))
	}
	if err != nil {
		// The stub may map frames of either address space until it is gone (ForkOver leaves
		// the ghost to us on error).
		k.releasing.Add(1)
		go func() {
			defer k.releasing.Done()
			stub.Release()
			for _, as := range []*memgrant.AddressSpace{ghost, childAS} {
				if as != nil {
					as.Release()
				}
			}
		}()
		return 0, err
	}
	k.holdContainer(p.c)
	p.mu.Lock()
	child := newProcess(k, pid, p.c, p.cwd)
	child.noNewPrivs.Store(p.noNewPrivs.Load())
	child.creds = p.creds // groups are never changed in place (changeCreds copies)
	child.credsGen.Store(p.credsGen.Load())
	child.undumpable.Store(p.undumpable.Load())
	child.umask, child.brkStart, child.brk = p.umask, p.brkStart, p.brk
	child.sigacts = p.sigacts
	for r, l := range p.rlimits {
		child.rlimits[r] = l
	}
	p.mu.Unlock()
	child.stub, child.as = stub, childAS
	child.startUsage()
	child.watchStub()
	child.fds = p.fds.Fork()
	child.fds.SetLimit(p.fds.Limit())

	ct := &Task{p: child, tid: pid, th: th, fsBase: t.fsBase, comm: t.name(), interrupt: make(chan struct{}, 1)}
	ct.altstack = t.altstack
	ct.home.inherit(&t.home)
	ct.setMask(t.mask()) // a child starts with its parent's signal mask and scheduling
	if t.kt != nil {
		ct.kt = t.kt.Fork(ct)
	}
	regs := *t.th.Regs
	regs.Rax = 0
	if stack != 0 {
		regs.Rsp = stack
	}
	if flags&unix.CLONE_SETTLS != 0 {
		ct.fsBase = tls
	}
	regs.Fs_base = ct.fsBase
	*th.Regs = regs
	if err := th.CopyFPState(t.th); err != nil {
		k.cfg.Log("pid %d: fork: %v", p.pid, err)
	}
	ct.resumeFlags = crossing.ResumeSetFS
	var tid [4]byte
	binary.LittleEndian.PutUint32(tid[:], uint32(pid))
	if flags&unix.CLONE_CHILD_SETTID != 0 {
		k.svc.CopyOut(childAS, ctid, tid[:])
	}
	if flags&unix.CLONE_CHILD_CLEARTID != 0 {
		ct.clearTID = ctid
	}
	if flags&unix.CLONE_PARENT_SETTID != 0 {
		k.svc.CopyOut(p.as, ptid, tid[:])
	}
	child.tasks, child.live = []*Task{ct}, 1
	child.updateSingle()
	// Taken here: the child may exec, and drop the field, before this task looks at it.
	var vforkDone chan struct{}
	if flags&unix.CLONE_VFORK != 0 {
		vforkDone = make(chan struct{})
		child.vforkDone, child.vforkParent = vforkDone, t
	}
	child.pgid, child.sid = p.pgid, p.sid
	k.adopt(child, p)
	ct.start()
	t.quiet = true
	if vforkDone != nil {
		// On the wake word, which releaseVfork pokes: one host call reaches this carrier.
		t.blocking(func() {
			t.park.Until(func() bool {
				select {
				case <-vforkDone:
					return true
				default:
					return false
				}
			})
		})
	}
	return uint64(pid), nil
}

var vforkMu sync.Mutex

// releaseVfork lets a vfork parent go on (once).
func (p *Process) releaseVfork() {
	vforkMu.Lock()
	defer vforkMu.Unlock()
	if p.vforkDone != nil {
		close(p.vforkDone)
		p.vforkDone = nil
		p.vforkParent.park.Wake()
	}
}

// readStrings reads a NULL-terminated array of string pointers (argv, envp).
func (t *Task) readStrings(addr uint64) ([]string, error) {
	var out []string
	total := 0
	for i := uint64(0); addr != 0; i++ {
		var b [8]byte
		if err := t.p.k.svc.CopyIn(t.p.as, b[:], addr+8*i); err != nil {
			return nil, err
		}
		ptr := binary.LittleEndian.Uint64(b[:])
		if ptr == 0 {
			break
		}
		s, err := t.p.k.svc.ReadString(t.p.as, ptr, maxArgBytes)
		if err != nil {
			return nil, err
		}
		if total += len(s) + 1; total > maxArgBytes || i > 1<<17 {
			return nil, unix.E2BIG
		}
		out = append(out, s)
	}
	return out, nil
}

func sysExecve(t *Task, a sysargs) (uint64, error) { return t.execve(atFDCWD, a[0], a[1], a[2]) }
func sysExecveat(t *Task, a sysargs) (uint64, error) {
	if a[4] != 0 {
		return 0, unix.EINVAL
	}
	return t.execve(a[0], a[1], a[2], a[3])
}

// execve replaces the process's image: the same stub, emptied and loaded anew.
func (t *Task) execve(dirfd, pathAddr, argvAddr, envAddr uint64) (uint64, error) {
	p := t.p
	path, err := t.path(pathAddr)
	if err != nil {
		return 0, err
	}
	argv, err := t.readStrings(argvAddr)
	if err != nil {
		return 0, err
	}
	env, err := t.readStrings(envAddr)
	if err != nil {
		return 0, err
	}
	base, err := t.base(dirfd, path)
	if err != nil {
		return 0, err
	}
	img, err := openImage(p.fs, base, path, argv)
	if err != nil {
		return 0, unwrapErrno(err)
	}
	defer img.close()

	if err := t.endOtherTasks(); err != nil {
		return 0, err
	}
	// No way back from here: failures kill the process, as on Linux.
	p.as.ForgetParent()
	// The old image goes and the new one comes in one host batch: no tenant code of the process
	// runs until the execve returns.
	flush := p.as.Batch()
	for _, v := range p.as.VMAs() {
		if err := p.k.svc.Unmap(p.as, v.Start, v.End-v.Start); err != nil {
			flush()
			p.k.cfg.Log("pid %d: execve: unmap: %v", p.pid, err)
			t.exitGroup(ExitStatus{Signal: unix.SIGKILL})
			return 0, nil
		}
	}
	regs, err := p.load(img, img.argv, env)
	if ferr := flush(); err == nil && ferr != nil {
		err = ferr
	}
	if err != nil {
		p.k.cfg.Log("pid %d: execve %s: %v", p.pid, path, err)
		t.exitGroup(ExitStatus{Signal: unix.SIGSEGV})
		return 0, nil
	}
	p.markExeced() // before close-on-exec: a parent that sees those fds close sees the exec
	p.fds.CloseOnExec()
	p.mu.Lock()
	for i := range p.sigacts {
		if p.sigacts[i].handler != sigIgn {
			p.sigacts[i] = sigaction{}
		}
	}
	p.mu.Unlock()
	t.fsBase = 0
	regs.Fs_base = 0
	p.mu.Lock()
	t.comm = commOf(path) // the name execve was given, as Linux takes it (not the file's)
	p.mu.Unlock()
	p.undumpable.Store(false)
	*t.th.Regs = regs
	t.resumeFlags = crossing.ResumeSetFS | crossing.ResumeResetFPU
	p.updateSingle()
	p.releaseVfork()
	return 0, nil
}

// unwrapErrno keeps the errno of an error with context, for the tenant.
func unwrapErrno(err error) error {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.ENOEXEC
}

func sysPipe(t *Task, a sysargs) (uint64, error)  { return t.pipe(a[0], 0) }
func sysPipe2(t *Task, a sysargs) (uint64, error) { return t.pipe(a[0], a[1]) }

// pipe makes a host pipe: the vfs emulates blocking on it, and the kernel gives its vCPU back
// while it waits.
func (t *Task) pipe(addr, flags uint64) (uint64, error) {
	if flags&^(unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_DIRECT) != 0 {
		return 0, unix.EINVAL
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return 0, err
	}
	r := vfs.HostFile(os.NewFile(uintptr(fds[0]), "pipe"), "")
	w := vfs.HostFile(os.NewFile(uintptr(fds[1]), "pipe"), "")
	if flags&unix.O_NONBLOCK != 0 {
		r.SetFlags(r.Flags() | unix.O_NONBLOCK)
		w.SetFlags(w.Flags() | unix.O_NONBLOCK)
	}
	cloexec := flags&unix.O_CLOEXEC != 0
	rfd, err := t.p.fds.Install(r, 0, cloexec)
	if err != nil {
		r.DecRef()
		w.DecRef()
		return 0, err
	}
	wfd, err := t.p.fds.Install(w, 0, cloexec)
	if err != nil {
		t.p.fds.Close(rfd)
		w.DecRef()
		return 0, err
	}
	var b [8]byte
	binary.LittleEndian.PutUint32(b[0:], uint32(rfd))
	binary.LittleEndian.PutUint32(b[4:], uint32(wfd))
	if err := t.p.k.svc.CopyOut(t.p.as, addr, b[:]); err != nil {
		t.p.fds.Close(rfd)
		t.p.fds.Close(wfd)
		return 0, err
	}
	return 0, nil
}

// lookup finds a live process of the sandbox.
func (k *Kernel) lookup(pid int) *Process {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.procs[pid]
}

func sysGetpgid(t *Task, a sysargs) (uint64, error) {
	pid := int(int32(a[0]))
	target := t.p
	if pid != 0 {
		if target = t.p.k.lookup(pid); target == nil {
			return 0, unix.ESRCH
		}
	}
	t.p.k.mu.Lock()
	defer t.p.k.mu.Unlock()
	return uint64(target.pgid), nil
}

func sysGetpgrp(t *Task, a sysargs) (uint64, error) { return sysGetpgid(t, sysargs{}) }

func sysGetppid(t *Task, a sysargs) (uint64, error) {
	t.p.k.mu.Lock()
	defer t.p.k.mu.Unlock()
	if t.p.parent == nil {
		return 0, nil
	}
	return uint64(t.p.parent.pid), nil
}

// kill(pid, sig): one process, a process group, or every process of the container.
func sysKill(t *Task, a sysargs) (uint64, error) {
	pid, sig := int64(int32(a[0])), a[1]
	if sig >= 65 {
		return 0, unix.EINVAL
	}
	k := t.p.k
	var targets []*Process
	k.mu.Lock()
	for _, q := range k.procs {
		if q.c != t.p.c {
			continue
		}
		switch {
		case pid > 0 && int64(q.pid) == pid,
			pid == 0 && q.pgid == t.p.pgid,
			pid == -1 && q != q.c.init,
			pid < -1 && int64(q.pgid) == -pid:
			targets = append(targets, q)
		}
	}
	k.mu.Unlock()
	if len(targets) == 0 {
		return 0, unix.ESRCH
	}
	allowed := targets[:0]
	for _, q := range targets {
		if mayKill(t.p, q) {
			allowed = append(allowed, q)
		}
	}
	if len(allowed) == 0 {
		return 0, unix.EPERM
	}
	if sig == 0 {
		return 0, nil
	}
	for _, q := range allowed {
		if !q.exited() {
			q.postInfo(unix.Signal(sig), nil, sigInfo{code: siUser, pid: t.p.pid}) // the sender, as si_pid
		}
	}
	return 0, nil
}

// endOtherTasks stops every other task of the process (execve keeps only the caller).
func (t *Task) endOtherTasks() error {
	p := t.p
	p.mu.Lock()
	var others []*Task
	for _, x := range p.tasks {
		if x != t {
			others = append(others, x)
		}
	}
	p.mu.Unlock()
	if len(others) == 0 {
		return nil
	}
	for _, x := range others {
		x.killed.Store(true)
		x.kick()
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		p.mu.Lock()
		alone := p.live == 1
		p.mu.Unlock()
		if alone {
			return nil
		}
		if time.Now().After(deadline) {
			return unix.EAGAIN
		}
		t.sleep(time.Millisecond)
	}
}
