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
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/endovisor/endo/crossing"
	"github.com/endovisor/endo/memgrant"
	"github.com/endovisor/endo/sandbox/kernelet"
	"golang.org/x/sys/unix"
)

// Kernel is one sandbox's kernel: the grant, the vCPUs and every tenant process of the pod.
type Kernel struct {
	cfg       Config
	grant     *memgrant.Grant
	sched     *kernelet.Kernelet
	svc       *crossing.Services
	auxv      hostAuxv
	calls     *crossing.Calls // patched call sites; nil with Config.NoCallPatching
	lowWeight bool            // the sandbox's threads run at a low host weight (weight.go)
	homes     atomic.Uint32   // tasks settled so far: the next one's CPU (home.go)
	patched   atomic.Int64    // call sites patched so far
	viaSite   atomic.Int64    // calls served from patched sites, added when their tasks end
	served    atomic.Int64    // system calls served, added when their tasks end
	// Slice-end switches carried out (switchTo): on one runner within a process, and from one
	// process's runner to another's, which wakes a host thread and puts another to sleep.
	switchesWithin, switchesBetween atomic.Int64

	mu         sync.Mutex
	procs      map[int]*Process
	containers map[string]*container
	nextPid    int
	closed     bool
	timed      bool
	unimpl     map[uint64]int
	releasing  sync.WaitGroup // processes whose memory is being given back
	preempting bool           // the preemption ticker runs (guarded by mu)
	probe      *probe
	stolen     stolenBook // the carriers' run-queue wait (probe.go)
	faults     FaultCounts
	pages      pageCache      // program files' pages, shared by the processes that map them
	refilling  sync.WaitGroup // spare stubs being started
	spares     chan spareStub // stubs started ahead, for fork and spawn
	futexes    futexTable
	sleepers   sleepers // the deadlines of tasks asleep in the kernel (sleepers.go)
	timings    Timings
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
	var calls *crossing.Calls
	if !cfg.NoCallPatching {
		if calls, err = crossing.NewCalls(); err != nil {
			g.Close()
			return nil, fmt.Errorf("kernel: %w", err)
		}
	}
	k := &Kernel{
		cfg: cfg, grant: g, sched: sched, svc: crossing.NewServices(), auxv: readHostAuxv(), calls: calls, lowWeight: lowerWeight(),
		procs: map[int]*Process{}, containers: map[string]*container{}, nextPid: 1,
		spares: make(chan spareStub, spareStubs), unimpl: map[uint64]int{},
	}
	k.pages.budget = pageCacheBudget(cfg.MemoryBytes)
	runtimeProcs(cfg.VCPUs)
	sched.OnWait(k.wantPreempt)
	sched.OnKick(kick)
	sched.OnRun(runParked)
	sched.OnKin(sameStub)
	sched.LookEvery(tickEvery)
	return k, nil
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
	k.releasing.Wait()
	k.refilling.Wait()
	for {
		select {
		case s := <-k.spares:
			s.stub.Release()
			if s.ghost != nil {
				s.ghost.Release()
			}
			continue
		default:
		}
		break
	}
	k.sleepers.close()
	k.stolen.closeFiles()
	k.pages.drop()
	k.calls.Close()
	return k.grant.Close()
}

// VCPUs is the kernel's vCPU count.
func (k *Kernel) VCPUs() int { return k.sched.N() }

// SetVCPUs changes the kernel's vCPU count (the pod's CPU limit changed); new processes see it
// in sched_getaffinity (nproc) and /proc/cpuinfo.
func (k *Kernel) SetVCPUs(n int) error {
	if err := k.sched.Resize(n); err != nil {
		return err
	}
	runtimeProcs(n)
	return nil
}

// Timings returns the crossing timings taken at the first process's start.
func (k *Kernel) Timings() Timings {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.timings
}

// FaultCounts are the page faults of tenant code that reached the sandbox: a sandbox that maps
// eagerly sees none for a first touch or a read after fork.
type FaultCounts struct {
	Reads, Writes atomic.Uint64
}

// Faults returns how many read and write faults the kernel has served or refused.
func (k *Kernel) Faults() (reads, writes uint64) {
	return k.faults.Reads.Load(), k.faults.Writes.Load()
}

// Rings returns how the kernelet's rings went (the runners taking turns without the sandbox).
func (k *Kernel) Rings() kernelet.RingStats { return k.sched.RingStats() }

// Switches returns how many slice-end switches there were from a task in tenant code to a parked
// one of the same process (the runner switched registers) and of another process.
func (k *Kernel) Switches() (within, between int64) {
	return k.switchesWithin.Load(), k.switchesBetween.Load()
}

// PatchedCalls returns how many call sites of tenant code were patched, and how many calls of
// tasks that have ended came through patched sites.
func (k *Kernel) PatchedCalls() (sites, calls int64) {
	return k.patched.Load(), k.viaSite.Load()
}

// ServedCalls returns how many system calls of tasks that have ended the sandbox served: the
// calls tenant code made less those its stub took itself (a yield in a ring).
func (k *Kernel) ServedCalls() int64 { return k.served.Load() }

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
		if p.c.id != container {
			continue
		}
		s.Pids++
		s.MemoryBytes += p.residentBytes()
		s.CPUTime += p.cpuTime()
	}
	s.StolenNanos = k.stolenNanos(container)
	return s
}

// SignalContainer sends sig to every live process of a container (Kill with all).
func (k *Kernel) SignalContainer(container string, sig unix.Signal) error {
	k.mu.Lock()
	var targets []*Process
	for _, p := range k.procs {
		if p.c.id == container {
			targets = append(targets, p)
		}
	}
	k.mu.Unlock()
	for _, p := range targets {
		p.Signal(sig)
	}
	return nil
}

// Pids lists the sandbox pids of a container's live processes, in order.
func (k *Kernel) Pids(container string) []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	var pids []int
	for pid, p := range k.procs {
		if p.c.id == container {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids
}

// Spawn starts a tenant process: the first of its container (its init), or another one in a
// running container (exec). Everything that can be checked (the rootfs, the program, its ELF
// headers) is checked before a stub exists, so a bad request leaves nothing behind.
func (k *Kernel) Spawn(spec ProcessSpec) (*Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("no program given")
	}
	c, err := k.acquireContainer(spec)
	if err != nil {
		return nil, err
	}
	cwd := spec.Cwd
	if cwd == "" {
		cwd = "/"
	}
	prog, err := findProgram(c.fs, cwd, spec.Argv[0], spec.Env)
	if err != nil {
		k.releaseContainer(c)
		return nil, err
	}
	img, err := openImage(c.fs, cwd, prog, spec.Argv)
	if err != nil {
		k.releaseContainer(c)
		return nil, err
	}
	defer img.close()

	pid, err := k.allocPid()
	if err != nil {
		k.releaseContainer(c)
		return nil, err
	}
	p := newProcess(k, pid, c, cwd)
	if spec.UID != 0 || spec.GID != 0 || len(spec.Groups) > 0 {
		u, g := spec.UID, spec.GID
		p.creds = creds{ruid: u, euid: u, suid: u, fsuid: u, rgid: g, egid: g, sgid: g, fsgid: g,
			groups: slices.Clone(spec.Groups)}
		p.credsGen.Store(1) // its tasks' carriers take these at their first call
	}
	if err := p.start(img, spec); err != nil {
		p.discard()
		return nil, err
	}
	k.adopt(p, nil)
	p.updateSingle()
	p.tasks[0].start()
	return p, nil
}

func (k *Kernel) allocPid() (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return 0, errors.New("kernel is closed")
	}
	pid := k.nextPid
	k.nextPid++
	return pid, nil
}

// adopt enters a started process in the table, as a child of parent (nil: of nobody in the
// sandbox, like a container's init or an exec'd process).
func (k *Kernel) adopt(p *Process, parent *Process) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.procs[p.pid] = p
	p.parent = parent
	if parent != nil {
		parent.children[p.pid] = p
	}
	if p.c.init == nil {
		p.c.init = p
	}
}

// exited takes a finished process out of the table: its children go to the container's init
// (or, when the init itself is gone, are killed, as in a pid namespace), and it waits as a zombie
// for its parent, if it has one in the sandbox.
func (k *Kernel) exited(p *Process) {
	k.mu.Lock()
	delete(k.procs, p.pid)
	init := p.c.init
	var orphans, moved []*Process
	for pid, ch := range p.children {
		delete(p.children, pid)
		if init != nil && init != p && !init.exited() {
			ch.parent = init
			init.children[pid] = ch
			moved = append(moved, ch)
			if ch.zombie {
				init.childChanged()
			}
		} else {
			ch.parent = nil
			orphans = append(orphans, ch)
		}
	}
	if p.parent != nil {
		p.zombie = true // childExited below sends SIGCHLD, then wakes the parent's wait
	}
	var others []*Process
	if init == p {
		for _, q := range k.procs {
			if q.c == p.c {
				others = append(others, q)
			}
		}
	}
	parent := p.parent
	k.mu.Unlock()
	if parent != nil {
		p.childExited(parent)
	}
	for _, ch := range moved {
		if sig := unix.Signal(ch.pdeathsig.Load()); sig != 0 && !ch.exited() {
			ch.post(sig, nil) // prctl PR_SET_PDEATHSIG
		}
	}
	for _, q := range append(orphans, others...) {
		if !q.zombie {
			q.Signal(unix.SIGKILL)
		}
	}
	if len(orphans) == 0 && len(others) == 0 {
		k.hupOrphanedPgrps(p, parent, moved) // session.go
	}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// spareStubs is how many stubs a kernel keeps started ahead: a fork then costs the address
// space's copy, not a process start.
const spareStubs = 2

type spareStub struct {
	stub  *crossing.Stub
	th    *crossing.Thread
	ghost *memgrant.AddressSpace // what its last process left mapped in it, or nil (recycle)
}

// newStub returns a started stub, stopped at a trap: a spare if there is one (and starts another
// in the background), else a new one. A spare may come with the address space its last process
// left mapped in it (ghost): a fork maps only what differs (memgrant's ForkOver); anything else
// must Empty it first.
func (k *Kernel) newStub() (stub *crossing.Stub, th *crossing.Thread, ghost *memgrant.AddressSpace, err error) {
	select {
	case s := <-k.spares:
		if len(k.spares) == 0 {
			k.refill()
		}
		return s.stub, s.th, s.ghost, nil
	default:
	}
	k.refill()
	stub, th, err = crossing.Spawn(k.grant.File(), k.calls)
	return stub, th, nil, err
}

// newEmptyStub is newStub for a process that does not come from a fork: nothing of an earlier
// process may be left in it.
func (k *Kernel) newEmptyStub() (*crossing.Stub, *crossing.Thread, error) {
	stub, th, ghost, err := k.newStub()
	if err != nil || ghost == nil {
		return stub, th, err
	}
	if err := ghost.Empty(); err != nil {
		k.cfg.Log("empty a spare stub: %v", err)
		k.releaseStub(stub, ghost)
		stub, th, err = crossing.Spawn(k.grant.File(), k.calls)
		return stub, th, err
	}
	return stub, th, nil
}

// releaseStub ends a stub and then gives back the frames an address space of it held (which the
// stub may map until it is gone), in the background.
func (k *Kernel) releaseStub(stub *crossing.Stub, as *memgrant.AddressSpace) {
	k.releasing.Add(1)
	go func() {
		defer k.releasing.Done()
		stub.Release()
		if as != nil {
			as.Release()
		}
	}()
}

// dropGhosts empties the spare stubs that still map what their last processes left: memory is
// short.
func (k *Kernel) dropGhosts() {
	for range cap(k.spares) {
		var s spareStub
		select {
		case s = <-k.spares:
		default:
			return
		}
		if s.ghost != nil {
			if err := s.ghost.Empty(); err != nil {
				k.releaseStub(s.stub, s.ghost)
				continue
			}
			s.ghost = nil
		}
		select {
		case k.spares <- s:
		default:
			k.releaseStub(s.stub, nil)
		}
	}
}

// recycle keeps the stub of an exited process as a spare, with what the process left mapped in
// it (a fork into it maps only what differs); it reports false (and leaves the stub and the
// address space to the caller) when the stub cannot be kept.
func (k *Kernel) recycle(stub *crossing.Stub, th *crossing.Thread, as *memgrant.AddressSpace) bool {
	k.mu.Lock()
	closed := k.closed
	k.mu.Unlock()
	if closed || len(k.spares) == cap(k.spares) {
		stub.Kill()
		return false
	}
	// A fork's child gets its parent's FPU state in its frame: the stop must have one.
	if err := th.Settle(); err != nil {
		k.cfg.Log("recycle stub: %v", err)
		stub.Kill()
		return false
	}
	if as != nil && as.ResidentBytes() > ghostMax {
		// Emptied now, as Linux unmaps an exiting process before its parent hears of it.
		if err := as.Empty(); err != nil {
			k.cfg.Log("recycle stub: %v", err)
			stub.Kill()
			return false
		}
		as = nil
	}
	select {
	case k.spares <- spareStub{stub, th, as}:
	default:
		k.releaseStub(stub, as)
	}
	return true
}

// ghostMax bounds what a spare stub keeps mapped of its last process. A ghost saves a fork the
// mapping of what it shares with the exited process (code, libraries, a shell's heap): a few MiB.
// A big one is unlikely to match the next child, whose fork would then replace it page by page
// (a fork with 64 MiB mapped took 5x native over the last child's 64 MiB, 2.5-3x into an empty
// stub), and its frames would stay out of the pod's memory meanwhile.
const ghostMax = 16 << 20

// refill starts one spare stub in the background, unless the kernel is closing.
func (k *Kernel) refill() {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.refilling.Add(1)
	k.mu.Unlock()
	go func() {
		defer k.refilling.Done()
		s, th, err := crossing.Spawn(k.grant.File(), k.calls)
		if err != nil {
			k.cfg.Log("spare stub: %v", err)
			return
		}
		k.mu.Lock()
		closed := k.closed
		k.mu.Unlock()
		if !closed {
			select {
			case k.spares <- spareStub{s, th, nil}:
				return
			default:
			}
		}
		s.Release()
	}()
}

// timeSlice is how long a task may run tenant code while another waits for a vCPU.
const timeSlice = kernelet.Slice

// tickEvery is how often the preemption ticker looks for slices that have ended. Once a slice,
// with the kernelet told so (LookEvery), still ends slices a slice apart where tasks
// take turns, with half the wake-ups of looking twice a slice. Those wake-ups cost more than
// their CPU time: each one on a CPU where a sibling cgroup runs beside the pod's waiting vCPU
// thread hands that CPU to the pod early (traced: 45-150 a second with 50 busy threads in two
// processes). Beside a sibling cgroup of equal weight, 6 interleaved pairs of 10 s runs each,
// the sibling's share moved within this machine's noise: 0.962 to 0.970 (two processes),
// 0.985 to 0.988 (lock).
const tickEvery = timeSlice

// wantPreempt starts the preemption ticker, which runs while any task waits for a vCPU.
func (k *Kernel) wantPreempt() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.preempting || k.closed {
		return
	}
	k.preempting = true
	go k.preemptLoop()
}

// preemptLoop makes every holder that the kernelet finds overdue trap (the preemption signal to
// its stub thread): an equal has waited while it ran a whole slice, or it holds a vCPU it may no
// longer use. The trap makes it call Preempted, which gives the vCPU to the best waiting task.
// The waiting check and the clearing of k.preempting are both under k.mu, and a task queues
// before it calls wantPreempt, so no waiter is left without the ticker.
//
// The ticker runs at the sandbox's own low weight, not the carriers' (weight.go): it wakes every
// tickEvery, and at nice 0 each wake-up counted on the pod's side as a runnable thread more.
func (k *Kernel) preemptLoop() {
	next := time.Now()
	for {
		// A raw sleep: a Go timer would wake the runtime's own threads at every tick too.
		next = next.Add(tickEvery)
		if d := time.Until(next); d > 0 {
			ts := unix.NsecToTimespec(int64(d))
			unix.Nanosleep(&ts, nil)
		} else {
			next = time.Now()
		}
		k.mu.Lock()
		if k.sched.Delegate(sameStub, openRing) {
			// Only equal threads of one process want the vCPUs: their runners take turns on
			// their own timers, and this ticker sleeps until the kernelet takes the ring back.
			k.preempting = false
			k.mu.Unlock()
			return
		}
		due, switches, waiting := k.sched.Overdue()
		if !waiting || k.closed {
			k.preempting = false
			k.mu.Unlock()
			for _, sw := range switches {
				switchTo(sw)
			}
			return
		}
		k.mu.Unlock()
		for _, kt := range due {
			kick(kt)
		}
		for _, sw := range switches {
			switchTo(sw)
		}
	}
}

// threadOf is the stub thread of a kernelet task's owner.
func threadOf(kt *kernelet.Task) *crossing.Thread {
	if t, ok := kt.Owner.(*Task); ok {
		return t.th
	}
	return nil
}

// sameStub says whether two tasks' threads are contexts of one stub: only those can take turns
// on its runners.
func sameStub(a, b *kernelet.Task) bool {
	x, y := threadOf(a), threadOf(b)
	return x != nil && y != nil && x.Stub() == y.Stub()
}

// openRing lets the runners of held take turns with parked in their stub (kernelet.Delegate).
func openRing(held []*kernelet.Task, vcpus []*kernelet.VCPU, parked []*kernelet.Task) (kernelet.RingOps, bool) {
	r := &podRing{runner: map[*kernelet.VCPU]int{}, of: map[*crossing.Thread]*kernelet.Task{}}
	threads := func(kts []*kernelet.Task) []*crossing.Thread {
		ths := make([]*crossing.Thread, len(kts))
		for i, kt := range kts {
			ths[i] = threadOf(kt)
			r.of[ths[i]] = kt
		}
		return ths
	}
	h, p := threads(held), threads(parked)
	if len(h) == 0 || h[0] == nil || len(vcpus) != len(h) {
		return nil, false
	}
	r.stub = h[0].Stub()
	runners, ok := r.stub.OpenRing(h, p)
	if !ok {
		return nil, false
	}
	for i, v := range vcpus {
		r.runner[v] = runners[i]
	}
	return r, true
}

// podRing is the stub's side of a ring (kernelet.RingOps): which runner takes turns with each of
// the ring's vCPUs, and the kernelet's task of each context that has been a member. Its methods
// run under the kernelet's lock.
type podRing struct {
	stub   *crossing.Stub
	runner map[*kernelet.VCPU]int
	of     map[*crossing.Thread]*kernelet.Task
}

func (r *podRing) Close(vcpus []*kernelet.VCPU) []*kernelet.Task {
	runners := make([]int, len(vcpus))
	for i, v := range vcpus {
		runners[i] = -1
		if n, ok := r.runner[v]; ok {
			runners[i] = n
		}
	}
	ths := r.stub.CloseRing(runners)
	out := make([]*kernelet.Task, len(ths))
	for i, th := range ths {
		if kt := r.of[th]; th != nil && kt != nil {
			kt.InTenant.Store(th.Running())
			out[i] = kt
		}
	}
	return out
}

func (r *podRing) Detach(kt *kernelet.Task) *kernelet.VCPU {
	th := threadOf(kt)
	if th == nil {
		return nil
	}
	n := th.TakeTurns(false)
	for v, m := range r.runner {
		if m == n && n >= 0 {
			delete(r.runner, v)
			return v
		}
	}
	return nil
}

func (r *podRing) Attach(kt *kernelet.Task, v *kernelet.VCPU) bool {
	th := threadOf(kt)
	if th == nil || th.Stub() != r.stub {
		return false
	}
	n := th.TakeTurns(true)
	if n < 0 {
		return false
	}
	r.runner[v] = n
	r.of[th] = kt
	return true
}

func (r *podRing) Park(kt *kernelet.Task) bool {
	th := threadOf(kt)
	if th == nil || !r.stub.RingPush(th) {
		return false
	}
	r.of[th] = kt
	return true
}

func (r *podRing) Grow(v *kernelet.VCPU) *kernelet.Task {
	for {
		th := r.stub.RingPop()
		if th == nil {
			return nil
		}
		kt := r.of[th]
		if kt == nil {
			continue // not the sandbox's member (tenant code wrote the ring): left parked
		}
		kt.InTenant.Store(true)
		if !th.ResumeParked(0) {
			// It trapped meanwhile: its carrier wants a vCPU, and finds v free.
			kt.InTenant.Store(false)
			return nil
		}
		r.runner[v] = th.TakeTurns(true)
		return kt
	}
}

func (r *podRing) Shrink(v *kernelet.VCPU) {
	if n, ok := r.runner[v]; ok {
		r.stub.RingKick(n) // the runner stays named for v: its member's trap detaches it
	}
}

// switchStopLimit bounds how long a switch between processes waits for the one to stop.
const switchStopLimit = 100 * time.Millisecond

// switchTo carries out a hand-over the kernelet made at a slice's end from a task in tenant code
// to a parked one. Between threads of one process the runner switches registers itself and no
// host thread is woken; otherwise the one is parked and an idle runner of the other's process
// takes it.
func switchTo(sw kernelet.Switch) {
	from, ok1 := sw.From.Owner.(*Task)
	to, ok2 := sw.To.Owner.(*Task)
	if !ok1 || !ok2 {
		return
	}
	sw.To.InTenant.Store(true)
	k := from.p.k
	if from.p.stub == to.p.stub && from.th.Switch(to.th) {
		k.switchesWithin.Add(1)
		return
	}
	k.switchesBetween.Add(1)
	if !from.th.Switch(nil) {
		from.preempt() // it trapped meanwhile: its carrier finds it holds no vCPU
	}
	// The other process's runner starts only once this one has stopped: both running tenant
	// code at once would be one more runnable thread than the pod has vCPUs, for as long as the
	// signal takes (up to milliseconds on a busy host: with 50 busy threads in two processes a
	// sample in eight saw 3 or 4 runnable, and the pod took up to 1.26 CPUs where a sibling of
	// equal weight had a fair share of 1).
	if !from.th.WaitStopped(switchStopLimit) {
		k.cfg.Log("pid %d tid %d: still runs %v after a switch's park order", from.p.pid, from.tid, switchStopLimit)
	}
	to.th.ResumeParked(0)
}

// runParked resumes a parked task the kernelet has given a vCPU, on an idle runner of its stub;
// if the task trapped meanwhile, its carrier takes the vCPU instead.
func runParked(kt *kernelet.Task, _ *kernelet.VCPU) {
	t, ok := kt.Owner.(*Task)
	if !ok {
		return
	}
	kt.InTenant.Store(true)
	t.th.ResumeParked(0)
}

// kick makes a holder the kernelet wants off its vCPU trap at once. A task in kernel code gets
// the signal when it resumes tenant code, and traps then.
func kick(kt *kernelet.Task) {
	if t, ok := kt.Owner.(*Task); ok {
		t.preempt()
	}
}
