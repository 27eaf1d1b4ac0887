// Package kernel is the kernel proper: the Linux ABI that tenant programs see (processes, files,
// signals, memory system calls). It runs inside the sandbox process and reaches tenant memory and
// stubs only through the endovisor core's service table (crossing.Services over memgrant) and the
// crossing's threads; it never makes a host system call on a path or pointer the tenant chose
// without checking it first, and it never trusts a value read from tenant memory.
package kernel

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/endovisor/endo/crossing"
	"github.com/endovisor/endo/memgrant"
	"github.com/endovisor/endo/sandbox/kernelet"
	"golang.org/x/sys/unix"
)

// Kernel is one sandbox's kernel: the grant, the vCPUs and every tenant process of the pod.
type Kernel struct {
	cfg   Config
	grant *memgrant.Grant
	sched *kernelet.Kernelet
	svc   *crossing.Services
	auxv  hostAuxv

	mu      sync.Mutex
	procs   map[int]*Process
	nextPid int
	closed  bool
	timed   bool
	unimpl  map[uint64]int
	timings Timings
}

// Timings are the crossing's costs measured when the kernel started its first process.
type Timings struct {
	Service   crossing.ServiceTiming
	RoundTrip time.Duration // tenant trap to sandbox and back, cheapest of seven
}

// New creates a kernel: its grant (the pod's memory) and its vCPUs.
func New(cfg Config) (*Kernel, error) {
	if cfg.MemoryBytes <= 0 {
		cfg.MemoryBytes = 2 << 30
	}
	if cfg.VCPUs <= 0 {
		cfg.VCPUs = runtime.NumCPU()
	}
	if cfg.Hostname == "" {
		cfg.Hostname = "endo"
	}
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	g, err := memgrant.NewGrant(cfg.MemoryBytes)
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	sched, err := kernelet.New(cfg.VCPUs)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("kernel: %w", err)
	}
	return &Kernel{
		cfg: cfg, grant: g, sched: sched, svc: crossing.NewServices(), auxv: readHostAuxv(),
		procs: map[int]*Process{}, nextPid: 1, unimpl: map[uint64]int{},
	}, nil
}

// Close kills every process, waits for them, and frees the grant.
func (k *Kernel) Close() error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil
	}
	k.closed = true
	procs := make([]*Process, 0, len(k.procs))
	for _, p := range k.procs {
		procs = append(procs, p)
	}
	k.mu.Unlock()
	for _, p := range procs {
		p.Signal(unix.SIGKILL)
		p.Wait()
	}
	return k.grant.Close()
}

// Timings returns the crossing timings taken at the first process's start.
func (k *Kernel) Timings() Timings {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.timings
}

// Unimplemented counts the system calls tenants made that the kernel does not implement, by name.
func (k *Kernel) Unimplemented() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]int{}
	for nr, n := range k.unimpl {
		name, ok := sysNames[nr]
		if !ok {
			name = fmt.Sprintf("syscall_%d", nr)
		}
		out[name] += n
	}
	return out
}

func (k *Kernel) countUnimplemented(nr uint64) {
	k.mu.Lock()
	k.unimpl[nr]++
	k.mu.Unlock()
}

// Stats returns the accounting of one container.
func (k *Kernel) Stats(container string) Stats {
	k.mu.Lock()
	defer k.mu.Unlock()
	var s Stats
	for _, p := range k.procs {
		if p.container != container {
			continue
		}
		s.Pids++
		s.MemoryBytes += p.residentBytes()
		s.CPUTime += p.cpuTime()
	}
	return s
}

// Pids lists the sandbox pids of a container's live processes, in order.
func (k *Kernel) Pids(container string) []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	var pids []int
	for pid, p := range k.procs {
		if p.container == container {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids
}

// Spawn starts a tenant process. Everything that can be checked (the rootfs, the program, its
// ELF headers) is checked before a stub exists, so a bad request leaves nothing behind.
func (k *Kernel) Spawn(spec ProcessSpec) (*Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("no program given")
	}
	fs, err := newContainerFS(spec)
	if err != nil {
		return nil, err
	}
	cwd := spec.Cwd
	if cwd == "" {
		cwd = "/"
	}
	prog, err := findProgram(fs, cwd, spec.Argv[0], spec.Env)
	if err != nil {
		fs.Close()
		return nil, err
	}
	img, err := openImage(fs, cwd, prog)
	if err != nil {
		fs.Close()
		return nil, err
	}
	defer img.close()

	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		fs.Close()
		return nil, errors.New("kernel is closed")
	}
	pid := k.nextPid
	k.nextPid++
	k.mu.Unlock()

	p := newProcess(k, pid, spec.Container, fs, cwd)
	if err := p.start(img, spec); err != nil {
		p.discard()
		return nil, err
	}
	k.mu.Lock()
	k.procs[pid] = p
	k.mu.Unlock()
	go p.tasks[0].run()
	return p, nil
}

// forget drops an exited process from the table.
func (k *Kernel) forget(p *Process) {
	k.mu.Lock()
	delete(k.procs, p.pid)
	k.mu.Unlock()
}
