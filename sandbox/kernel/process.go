package kernel

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/endovisor/endo/crossing"
	"github.com/endovisor/endo/memgrant"
	"github.com/endovisor/endo/sandbox/kernel/vfs"
	"github.com/endovisor/endo/sandbox/kernelet"
	"golang.org/x/sys/unix"
)

// Process is one tenant process: an address space in a stub, a descriptor table, a file system
// view, and its tasks (threads).
type Process struct {
	k   *Kernel
	pid int

	pdeathsig  atomic.Int32  // prctl PR_SET_PDEATHSIG: the signal it gets when its parent dies
	ending     atomic.Bool   // killed, or its stub gone: every task is to end (wakeToEnd)
	undumpable atomic.Bool   // prctl PR_SET_DUMPABLE 0 (dumpable again after execve)
	noNewPrivs atomic.Bool   // prctl PR_SET_NO_NEW_PRIVS (kept across fork and execve)
	signalfds  []*signalfd   // under mu: the signalfds it made, told of new pending signals
	creds      creds         // under mu: user and group ids (creds.go)
	credsGen   atomic.Uint64 // counts changes of creds; a child starts at its parent's
	c          *container
	fs         *vfs.FS // c.fs
	fds        *vfs.FDTable

	// The process tree, guarded by k.mu.
	parent   *Process
	children map[int]*Process
	pgid     int
	sid      int  // session (session.go)
	execed   bool // it called execve since its fork: its parent may no longer setpgid it
	zombie   bool // exited, not yet reaped by its parent
	// childWaiters are the tasks in wait4 or waitid, woken on their wake words when a child
	// exits, stops or goes on (childChanged), under waitersMu.
	waitersMu    sync.Mutex
	childWaiters []*Task
	// vforkDone is closed when a vfork child execs or exits, and vforkParent, the task that
	// waits for that, is woken (under vforkMu).
	vforkDone   chan struct{}
	vforkParent *Task

	stub *crossing.Stub
	as   *memgrant.AddressSpace

	job jobState // stopped or not, and what the parent may wait for

	mu        sync.Mutex
	cwd       string
	umask     uint32
	brkStart  uint64
	brk       uint64
	sigacts   [65]sigaction
	pending   uint64      // process-directed signals not yet delivered (bit sig-1)
	alarm     realTimer   // ITIMER_REAL and alarm(2) (itimer.go)
	info      [65]sigInfo // the siginfo of each pending signal
	rlimits   map[int]unix.Rlimit
	tasks     []*Task // live tasks
	live      int     // tasks whose goroutine has not ended
	threading int     // new threads being made: patched call sites must trap (calls.go)

	cpu       atomic.Int64  // nanoseconds its carriers ran for it (system time)
	user      atomic.Int64  // nanoseconds its stub ran, once fixed at the end (rusage.go)
	maxRSS    atomic.Int64  // its peak resident bytes, once fixed at the end
	userFixed atomic.Bool   // user and maxRSS are fixed
	stubCPU0  time.Duration // the stub's CPU clock when the process started in it
	reapedMu  sync.Mutex
	reaped    usage         // of its waited-for children and theirs
	faults    atomic.Uint64 // page faults of its tenant code that reached the sandbox
	exitOnce  sync.Once
	statusSet bool
	status    ExitStatus
	done      chan struct{}
}

type sigaction struct {
	handler, flags, restorer, mask uint64
}

func newProcess(k *Kernel, pid int, c *container, cwd string) *Process {
	return &Process{
		k: k, pid: pid, c: c, fs: k.procView(c, pid), fds: vfs.NewFDTable(), cwd: cwd, pgid: pid, sid: pid,
		children: map[int]*Process{}, umask: 0o022, rlimits: defaultRlimits(), done: make(chan struct{}),
	}
}

// start makes the stub, loads the program into it and readies the first task.
func (p *Process) start(img *image, spec ProcessSpec) error {
	if err := p.installStdio(spec); err != nil {
		return err
	}
	stub, th, err := p.k.newEmptyStub()
	if err != nil {
		return fmt.Errorf("start sandbox stub: %w", err)
	}
	p.stub = stub
	p.startUsage()
	p.watchStub()
	p.as = p.k.grant.NewAddressSpace(stub, layoutFor(stub))
	t := &Task{p: p, tid: p.pid, th: th, comm: commOf(img.path), interrupt: make(chan struct{}, 1)}
	p.tasks, p.live = []*Task{t}, 1
	p.k.timeCrossing(th)

	flush := p.as.Batch() // the program's mappings reach the stub in one batch
	regs, err := p.load(img, img.argv, spec.Env)
	if ferr := flush(); err == nil && ferr != nil {
		err = fmt.Errorf("map the program: %w", ferr)
	}
	if err != nil {
		return err
	}
	*th.Regs = regs
	// The stub may have served another process: nothing of its FPU state or FS base stays.
	t.resumeFlags = crossing.ResumeResetFPU | crossing.ResumeSetFS
	return nil
}

// watchStub wakes the process's tasks from their kernel waits when its stub dies (killed by
// the host, or by exit_group of another task): they must not sleep on. It ends with the
// process, since the stub may go on to serve others.
func (p *Process) watchStub() {
	stub := p.stub
	go func() {
		select {
		case <-stub.Exited():
		case <-p.done:
			return
		}
		p.wakeToEnd()
	}()
}

// wakeToEnd wakes the tasks that wait in the kernel so that they end: each through the kernelet,
// as a futex wake does, its carrier woken once it has a vCPU. A process of fifty waiting threads
// that is killed must not make fifty host threads runnable at once.
func (p *Process) wakeToEnd() {
	p.ending.Store(true)
	p.mu.Lock()
	tasks := append([]*Task(nil), p.tasks...)
	kts := make([]*kernelet.Task, len(tasks))
	for i, t := range tasks {
		kts[i] = t.kt // set under p.mu (Task.run)
	}
	p.mu.Unlock()
	for i, t := range tasks {
		t.wakePlaced(kts[i])
	}
}

// installStdio gives the tenant fds 0, 1 and 2.
func (p *Process) installStdio(spec ProcessSpec) error {
	for fd, f := range []struct {
		host *os.File
		name string
	}{{spec.Stdin, "stdin"}, {spec.Stdout, "stdout"}, {spec.Stderr, "stderr"}} {
		var file *vfs.File
		if f.host != nil {
			// The File owns what it wraps; the caller keeps its own descriptor.
			dup, err := unix.FcntlInt(f.host.Fd(), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
			file = vfs.HostFile(os.NewFile(uintptr(dup), f.name), "")
		} else {
			var err error
			if file, err = p.fs.Open("/", "/dev/null", unix.O_RDWR, 0); err != nil {
				return fmt.Errorf("open /dev/null for %s: %w", f.name, err)
			}
		}
		if err := p.fds.InstallAt(fd, file, false); err != nil {
			return fmt.Errorf("install %s: %w", f.name, err)
		}
	}
	return nil
}

// layoutFor is the tenant part of a stub's address space: everything below TenantMax that the
// stub does not hold itself.
func layoutFor(stub *crossing.Stub) memgrant.Layout {
	reserved := make([]memgrant.Range, 0, len(stub.Reserved()))
	for _, r := range stub.Reserved() {
		reserved = append(reserved, memgrant.Range{Start: r.Start, End: r.End})
	}
	return memgrant.Layout{Min: minAddr, Max: crossing.TenantMax, MmapTop: crossing.TenantMax, Reserved: reserved}
}

// discard frees a process that never ran.
func (p *Process) discard() {
	if p.stub != nil {
		p.stub.Release()
	}
	if p.as != nil {
		p.as.Release()
	}
	p.fds.CloseAll()
	p.k.releaseContainer(p.c)
}

// Pid is the process's pid inside the sandbox.
func (p *Process) Pid() int { return p.pid }

// Wait blocks until the process has exited and everything it held is freed.
func (p *Process) Wait() ExitStatus {
	<-p.done
	return p.status
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// terminate records how the process ended (the first cause wins) and kills its stub; the task
// loops see the stub gone and finish the exit.
func (p *Process) terminate(st ExitStatus) {
	p.setStatus(st)
	p.stub.Kill()
	// Tasks waiting in the kernel (a pipe read, a sleep) must see it too.
	p.wakeToEnd()
}

// setStatus records how the process ended, unless a cause was recorded already.
func (p *Process) setStatus(st ExitStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.statusSet {
		p.status, p.statusSet = st, true
	}
}

func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// taskDone is called by each task as it ends; the last one finishes the process.
func (p *Process) taskDone(t *Task, ended ExitStatus) {
	p.mu.Lock()
	p.live--
	last := p.live == 0
	for i, x := range p.tasks {
		if x == t {
			p.tasks = append(p.tasks[:i], p.tasks[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	if !last {
		if t.alone {
			t.releaseThread()
		}
		p.updateSingle()
		return
	}
	p.finish(ended)
}

// finish runs once, when the last task has stopped: it frees everything and wakes waiters.
func (p *Process) finish(fallback ExitStatus) {
	p.exitOnce.Do(func() {
		p.setStatus(fallback)
		p.alarm.stop()
		p.endUsage()
		// A stub whose process simply exited serves the next fork or spawn: starting a stub
		// costs milliseconds, emptying one a single round trip of its control thread, done
		// before the parent sees the exit so that its next fork finds the stub waiting.
		th, reuse := p.stub.Reusable()
		if !reuse {
			p.stub.Kill()
		}
		p.fds.CloseAll()
		p.releaseVfork()
		if !reuse || !p.k.recycle(p.stub, th, p.as) {
			// The frames go back once the stub can no longer touch them. A parent need not
			// wait for that to see a small child exit; a big one's memory is back first, as
			// Linux unmaps an exiting process before its parent hears of it.
			if p.residentBytes() > ghostMax {
				p.stub.Release()
				p.as.Release()
			} else {
				p.k.releasing.Add(1)
				go func() {
					defer p.k.releasing.Done()
					p.stub.Release()
					p.as.Release()
				}()
			}
		}
		p.k.exited(p)
		p.k.releaseContainer(p.c)
		close(p.done)
	})
}

func (p *Process) residentBytes() int64 {
	if p.as == nil {
		return 0
	}
	return p.as.ResidentBytes()
}

// cpuTime is the process's user and system time so far.
func (p *Process) cpuTime() time.Duration {
	u := p.usage()
	return u.user + u.sys
}
