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
	"golang.org/x/sys/unix"
)

// Process is one tenant process: an address space in a stub, a descriptor table, a file system
// view, and its tasks (threads).
type Process struct {
	k         *Kernel
	pid       int
	container string
	fs        *vfs.FS
	fds       *vfs.FDTable

	stub *crossing.Stub
	as   *memgrant.AddressSpace

	mu       sync.Mutex
	cwd      string
	umask    uint32
	brkStart uint64
	brk      uint64
	sigacts  [65]sigaction
	rlimits  map[int]unix.Rlimit
	tasks    []*Task

	cpu       atomic.Int64 // nanoseconds of tenant and kernel time
	exitOnce  sync.Once
	statusSet bool
	status    ExitStatus
	done      chan struct{}
}

type sigaction struct {
	handler, flags, restorer, mask uint64
}

func newProcess(k *Kernel, pid int, container string, fs *vfs.FS, cwd string) *Process {
	return &Process{
		k: k, pid: pid, container: container, fs: fs, fds: vfs.NewFDTable(), cwd: cwd,
		umask: 0o022, rlimits: defaultRlimits(), done: make(chan struct{}),
	}
}

// start makes the stub, loads the program into it and readies the first task.
func (p *Process) start(img *image, spec ProcessSpec) error {
	if err := p.installStdio(spec); err != nil {
		return err
	}
	stub, th, err := crossing.Spawn(p.k.grant.File())
	if err != nil {
		return fmt.Errorf("start sandbox stub: %w", err)
	}
	p.stub = stub
	reserved := make([]memgrant.Range, 0, len(stub.Reserved()))
	for _, r := range stub.Reserved() {
		reserved = append(reserved, memgrant.Range{Start: r.Start, End: r.End})
	}
	p.as = p.k.grant.NewAddressSpace(stub, memgrant.Layout{
		Min: minAddr, Max: crossing.TenantMax, MmapTop: crossing.TenantMax, Reserved: reserved,
	})
	t := &Task{p: p, tid: p.pid, th: th}
	p.tasks = []*Task{t}
	p.k.timeCrossing(th)

	regs, err := p.load(img, spec.Argv, spec.Env)
	if err != nil {
		return err
	}
	*th.Regs = regs
	t.resumeFlags = crossing.ResumeResetFPU
	return nil
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

// discard frees a process that never ran.
func (p *Process) discard() {
	if p.stub != nil {
		p.stub.Release()
	}
	if p.as != nil {
		p.as.Release()
	}
	p.fds.CloseAll()
	p.fs.Close()
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

// Signal sends a signal to the process from outside (the shim, a terminal). Until signal
// delivery to handlers exists, a signal the tenant did not ignore and whose default action
// terminates ends the process.
func (p *Process) Signal(sig unix.Signal) error {
	if sig <= 0 || int(sig) >= len(p.sigacts) {
		return fmt.Errorf("signal %d: %w", int(sig), unix.EINVAL)
	}
	select {
	case <-p.done:
		return fmt.Errorf("process %d: %w", p.pid, unix.ESRCH)
	default:
	}
	p.mu.Lock()
	act := p.sigacts[sig]
	p.mu.Unlock()
	if sig != unix.SIGKILL && (act.handler == sigIgn || defaultIgnored(sig)) {
		return nil
	}
	p.terminate(ExitStatus{Signal: sig})
	return nil
}

const sigIgn = 1

func defaultIgnored(sig unix.Signal) bool {
	switch sig {
	case unix.SIGCHLD, unix.SIGURG, unix.SIGWINCH, unix.SIGCONT:
		return true
	}
	return false
}

// terminate records how the process ended (the first cause wins) and kills its stub; the task
// loops see the stub gone and finish the exit.
func (p *Process) terminate(st ExitStatus) {
	p.setStatus(st)
	p.stub.Kill()
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

// finish runs once, when the last task has stopped: it frees everything and wakes waiters.
func (p *Process) finish(fallback ExitStatus) {
	p.exitOnce.Do(func() {
		p.setStatus(fallback)
		p.stub.Release()
		p.as.Release()
		p.fds.CloseAll()
		p.fs.Close()
		p.k.forget(p)
		close(p.done)
	})
}

func (p *Process) residentBytes() int64 {
	if p.as == nil {
		return 0
	}
	return p.as.ResidentBytes()
}

func (p *Process) cpuTime() time.Duration { return time.Duration(p.cpu.Load()) }
