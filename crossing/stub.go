package crossing

import (
	"bytes"
	"debug/elf"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// stubBlob is the stub program, built from stub/stub.c by stub/build.sh and committed;
// TestStubBlobMatchesSource rebuilds it and compares.
//
//go:embed stub/stub.bin
var stubBlob []byte

// addrNoRandomize is personality(2)'s ADDR_NO_RANDOMIZE.
const addrNoRandomize = 0x0040000

// ErrStubDead reports that a stub process (or the thread) is gone.
var ErrStubDead = errors.New("stub process is gone")

var stubImage struct {
	once     sync.Once
	text     Range
	call     uint64 // stub_call: where patched call sites enter
	escalate uint64 // stub_escalate
	fd       int    // a sealed memfd with the blob, kept for the sandbox's lifetime
	err      error
}

// loadStubImage finds the stub's text range in the blob and puts the blob in a memfd to exec.
func loadStubImage() error {
	stubImage.once.Do(func() {
		f, err := elf.NewFile(bytes.NewReader(stubBlob))
		if err != nil {
			stubImage.err = fmt.Errorf("stub blob: %w", err)
			return
		}
		syms, err := f.Symbols()
		if err != nil {
			stubImage.err = fmt.Errorf("stub blob symbols: %w", err)
			return
		}
		for _, s := range syms {
			switch s.Name {
			case "__stub_text_start":
				stubImage.text.Start = s.Value
			case "__stub_text_end":
				stubImage.text.End = s.Value
			case "stub_call":
				stubImage.call = s.Value
			case "stub_escalate":
				stubImage.escalate = s.Value
			}
		}
		if stubImage.call == 0 || stubImage.escalate == 0 {
			stubImage.err = fmt.Errorf("stub blob: no stub_call or stub_escalate symbol")
			return
		}
		if stubImage.text.Start != StubBase || stubImage.text.End <= stubImage.text.Start {
			stubImage.err = fmt.Errorf("stub blob: text range %#x-%#x is not at %#x",
				stubImage.text.Start, stubImage.text.End, uint64(StubBase))
			return
		}
		fd, err := unix.MemfdCreate("endo-stub", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			stubImage.err = fmt.Errorf("stub memfd: %w", err)
			return
		}
		if _, err := unix.Write(fd, stubBlob); err != nil {
			unix.Close(fd)
			stubImage.err = fmt.Errorf("stub memfd write: %w", err)
			return
		}
		seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			unix.Close(fd)
			stubImage.err = fmt.Errorf("stub memfd seal: %w", err)
			return
		}
		// Far above the descriptors exec will place at 3..5, so the dup2s cannot close it.
		high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 200)
		unix.Close(fd)
		if err != nil {
			stubImage.err = fmt.Errorf("stub memfd dup: %w", err)
			return
		}
		stubImage.fd = high
	})
	return stubImage.err
}

// StubText is the range of the stub's code, from which its filters allow the handler's calls.
func StubText() (Range, error) {
	if err := loadStubImage(); err != nil {
		return Range{}, err
	}
	return stubImage.text, nil
}

// Stub is one stub process: one tenant address space.
type Stub struct {
	pid    int
	proc   *os.Process
	sysmsg []byte
	ack    *os.File

	cmdMu sync.Mutex
	seq   uint32

	vdso     uint64
	reserved []Range

	exited     chan struct{}
	exitStatus syscall.WaitStatus
	waitErr    error

	mu      sync.Mutex
	threads [sysmsgMaxThreads]*Thread
	// live is held for reading by whoever reads the sysmsg mapping for a context it does not
	// carry and may wait there (the preemption ticker's switches, the resume of a parked
	// context by another task's goroutine); they cannot hold mu instead, which post takes.
	// Release takes it to unmap.
	live   sync.RWMutex
	killed atomic.Bool // Kill was called: the stub is going, it must not be reused

	// Runners are the stub's host threads that run tenant contexts: runner i lives in block i.
	// They are made as contexts need them and last as long as the stub.
	nrunners atomic.Int32
	tids     [sysmsgMaxThreads]atomic.Int32
	idleSeq  atomic.Uint64
	idleAt   [sysmsgMaxThreads]atomic.Uint64 // when each runner last went idle (idleSeq)

	// Where runners and the control thread were put (affinity.go: placed).
	runnerCPU  [sysmsgMaxThreads]atomic.Int32
	controlTid int
	controlCPU atomic.Int32
}

func (s *Stub) runnerU32(r, off int) *uint32 { return s.u32(sysmsgThreads + r*sysmsgBlock + off) }

func (s *Stub) runnerTid(r int) int { return int(s.tids[r].Load()) }

// Runners lists the host thread ids of the stub's runners.
func (s *Stub) Runners() []int {
	n := int(s.nrunners.Load())
	tids := make([]int, n)
	for i := range tids {
		tids[i] = s.runnerTid(i)
	}
	return tids
}

// initRunner readies block r's runner fields for a runner that starts holding context c.
func (s *Stub) initRunner(r, c int) {
	atomic.StoreUint32(s.runnerU32(r, runNext), runNone)
	atomic.StoreUint32(s.runnerU32(r, runCur), uint32(c))
}

// attachIdle gives context t to an idle runner (one holding no context) and returns it, or -1.
//
// The runner that went idle last goes first: runners that take turns stay the same few host
// threads (Linux spreads them over its CPUs once and for all), and a long-idle one is not woken
// wherever its waker runs, next to a busy one.
func (s *Stub) attachIdle(t *Thread) int {
	n := int(s.nrunners.Load())
	for {
		best, stamp := -1, uint64(0)
		for r := 0; r < n; r++ {
			if atomic.LoadUint32(s.runnerU32(r, runCur)) == runNone {
				if st := s.idleAt[r].Load(); best < 0 || st > stamp {
					best, stamp = r, st
				}
			}
		}
		if best < 0 {
			return -1
		}
		if atomic.CompareAndSwapUint32(s.runnerU32(best, runCur), runNone, uint32(t.index)) {
			atomic.StoreUint32(t.runnerIdx, uint32(best))
			return best
		}
	}
}

// wakeRunner tells runner r that what it waits for may have changed.
func (s *Stub) wakeRunner(r int) {
	w := s.runnerU32(r, runWord)
	atomic.AddUint32(w, 1)
	if atomic.LoadUint32(s.runnerU32(r, runSleeping)) != 0 {
		futexWake(w)
	}
}

// idled carries out a switch ordered to runner r that its stub will not see, now that r holds
// no context (the one it was to leave stopped in the sandbox and left it), and wakes r if that
// gave it one. A runner left with none needs no wake: asleep, it sleeps on until a context is
// posted to it (which wakes it); spinning, it sees its context go and sleeps. Woken, it only went
// back to sleep, one host switch more at every park (a yield between two processes is one).
func (s *Stub) idled(r int) {
	s.idleAt[r].Store(s.idleSeq.Add(1))
	if o := atomic.SwapUint32(s.runnerU32(r, runNext), runNone); o != runNone {
		s.servePending(r, o)
	}
	if atomic.LoadUint32(s.runnerU32(r, runCur)) != runNone {
		s.wakeRunner(r)
	}
}

// servePending runs the context a stale switch order named (a value out of range orders no
// context) on an idle runner, preferably r (-1: any).
func (s *Stub) servePending(r int, order uint32) {
	if order >= sysmsgMaxThreads {
		return
	}
	s.mu.Lock()
	to := s.threads[order]
	s.mu.Unlock()
	if to == nil {
		return
	}
	if r >= 0 && !to.parkedInCall.Load() && atomic.CompareAndSwapUint32(s.runnerU32(r, runCur), runNone, order) {
		atomic.StoreUint32(to.runnerIdx, uint32(r))
		if !atomic.CompareAndSwapUint32(to.state, stateParked, stateResume) {
			atomic.StoreUint32(to.runnerIdx, runNone)
			atomic.CompareAndSwapUint32(s.runnerU32(r, runCur), order, runNone)
		}
		return
	}
	to.post(stateParked, 0, 0)
}

// Spawn starts a stub process whose memory comes from grant and which maps the call table calls
// (nil: none, and no call site of its tenants may be patched). The stub's first thread is
// returned stopped at its first trap, ready for BootThread.
func Spawn(grant *os.File, calls *Calls) (*Stub, *Thread, error) {
	if err := loadStubImage(); err != nil {
		return nil, nil, err
	}
	tenantProg, err := tenantFilter(stubImage.text)
	if err != nil {
		return nil, nil, err
	}
	controlProg, err := controlFilter(stubImage.text)
	if err != nil {
		return nil, nil, err
	}

	mfd, err := unix.MemfdCreate("endo-sysmsg", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("sysmsg memfd: %w", err)
	}
	sysmsgFile := os.NewFile(uintptr(mfd), "endo-sysmsg")
	defer sysmsgFile.Close()
	if err := unix.Ftruncate(mfd, sysmsgSize); err != nil {
		return nil, nil, fmt.Errorf("sysmsg size: %w", err)
	}
	mem, err := unix.Mmap(mfd, 0, sysmsgSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("sysmsg map: %w", err)
	}
	s := &Stub{sysmsg: mem, exited: make(chan struct{})}
	fail := func(err error) (*Stub, *Thread, error) {
		s.Kill()
		if s.proc == nil {
			unix.Munmap(mem)
		}
		return nil, nil, err
	}
	setup := mem[sysmsgSetup:sysmsgCmd]
	if err := putFprog(setup, setupTenantFprog, setupTenantProg, tenantProg); err != nil {
		return fail(err)
	}
	if err := putFprog(setup, setupControlFprog, setupControlProg, controlProg); err != nil {
		return fail(err)
	}

	// Thread 0 is the stub's main thread, run by runner 0: it is "resumed" until its boot ping
	// arrives.
	t, err := s.newThread(0)
	if err != nil {
		return fail(err)
	}
	s.initRunner(0, 0)
	atomic.StoreUint32(t.runnerIdx, 0)
	atomic.StoreUint32(t.state, stateResume)

	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return fail(fmt.Errorf("stub ack pipe: %w", err))
	}
	s.ack = os.NewFile(uintptr(p[0]), "endo-stub-ack")
	ackW := os.NewFile(uintptr(p[1]), "endo-stub-ack-w")
	// Every stub of a sandbox must have its vDSO at the same address: tenants keep pointers into
	// it across fork. Without address randomization the kernel places it the same way each time;
	// the personality is inherited from the thread that starts the stub.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unix.RawSyscall(unix.SYS_PERSONALITY, addrNoRandomize, 0, 0)
	files := []*os.File{nil, nil, nil, sysmsgFile, grant, ackW}
	if calls != nil {
		files = append(files, calls.file)
	}
	proc, err := os.StartProcess(fmt.Sprintf("/proc/self/fd/%d", stubImage.fd), []string{"endo-stub"},
		&os.ProcAttr{
			Files: files,
			Env:   []string{},
			Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
		})
	ackW.Close()
	if err != nil {
		s.ack.Close()
		return fail(fmt.Errorf("start stub: %w", err))
	}
	s.proc, s.pid = proc, proc.Pid
	s.tids[0].Store(int32(proc.Pid))
	s.nrunners.Store(1)
	go s.reap()

	// The first trap is the boot ping; wait for it with a deadline, so that a stub that
	// dies or hangs at start is an error, not a hang.
	booted := make(chan error, 1)
	go func() { booted <- t.wait(0) }()
	select {
	case err = <-booted:
	case <-time.After(10 * time.Second):
		err = errors.New("timed out")
	}
	if err != nil {
		s.Kill()
		<-s.exited
		return nil, nil, fmt.Errorf("stub did not start (%v, %s)", err, describeWait(s.exitStatus))
	}
	s.vdso = *s.u64(sysmsgInfo + infoVdso)
	if s.reserved, err = readMaps(s.pid); err != nil {
		return fail(err)
	}
	if s.controlTid, err = findControl(s.pid); err != nil {
		return fail(err)
	}
	return s, t, nil
}

func describeWait(ws syscall.WaitStatus) string {
	switch {
	case ws.Signaled():
		return "killed by " + ws.Signal().String()
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	}
	return "still running"
}

// reap waits for the stub process and then wakes every sandbox thread waiting on it.
func (s *Stub) reap() {
	ws, err := waitExit(s.pid)
	s.proc.Release() // reaped here: the Process must not wait for it too
	if err == nil {
		s.exitStatus = ws
	} else {
		s.waitErr = err
	}
	s.mu.Lock()
	for _, t := range s.threads {
		if t != nil {
			atomic.StoreUint32(t.state, stateDead)
			futexWake(t.state)
		}
	}
	s.mu.Unlock()
	s.ack.Close()
	close(s.exited)
}

// SetSingle tells the stub's patched call sites whether thread 0 is its tenant's only thread: only
// then do they enter the sandbox without a signal (through thread 0's slot); otherwise they trap.
// It must be cleared before a second thread starts.
func (s *Stub) SetSingle(single bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sysmsg == nil {
		return
	}
	v := uint32(0)
	if single {
		v = 1
	}
	atomic.StoreUint32(s.u32(sysmsgCmd+cmdSingle), v)
}

// Pid is the host pid of the stub process.
func (s *Stub) Pid() int { return s.pid }

// VDSO is the address of the host vDSO in the stub, which tenants may use as their own: its
// calls either never enter the kernel or trap like any other call.
func (s *Stub) VDSO() uint64 { return s.vdso }

// Reserved lists the ranges of the stub's address space that tenant mappings must avoid.
func (s *Stub) Reserved() []Range { return s.reserved }

// Exited is closed once the stub process has been reaped.
func (s *Stub) Exited() <-chan struct{} { return s.exited }

// Kill ends the stub process; Exited tells when it is gone. The sysmsg mapping is released
// once it is.
func (s *Stub) Kill() {
	s.killed.Store(true)
	if s.proc != nil {
		s.proc.Signal(syscall.SIGKILL)
	}
}

// Reusable returns the stub's first thread when the stub can serve another process of the same
// sandbox: it is alive and not being killed, and that thread is its only one and is stopped at a
// trap (its process ended with exit or exit_group). The caller must then empty the stub's
// tenant mappings before it runs anything else.
func (s *Stub) Reusable() (*Thread, bool) {
	if s.killed.Load() {
		return nil, false
	}
	select {
	case <-s.exited:
		return nil, false
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.threads[0]
	// A stub that has had threads keeps their runners: it is not reused.
	if t == nil || s.sysmsg == nil || atomic.LoadUint32(t.state) != stateTrapped ||
		s.nrunners.Load() != 1 || t.runner() != 0 {
		return nil, false
	}
	for _, o := range s.threads[1:] {
		if o != nil && !o.deadLocked() {
			return nil, false
		}
	}
	return t, true
}

// Release waits for the stub to be gone and frees the sandbox's side of it.
func (s *Stub) Release() {
	if s.proc == nil {
		return
	}
	s.Kill()
	<-s.exited
	s.live.Lock()
	defer s.live.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sysmsg != nil {
		unix.Munmap(s.sysmsg)
		s.sysmsg = nil
		for i := range s.threads {
			s.threads[i] = nil
		}
	}
}

// hold keeps the sysmsg mapping until the returned function is called; ok is false (nothing is
// held) once the stub is released. Holders must not hold it twice: a Release waiting for it
// would keep the second from coming.
func (s *Stub) hold() (release func(), ok bool) {
	s.live.RLock()
	if s.sysmsg == nil {
		s.live.RUnlock()
		return nil, false
	}
	return s.live.RUnlock, true
}

// WaitStatus is how the stub process ended; valid once Exited is closed.
func (s *Stub) WaitStatus() syscall.WaitStatus {
	<-s.exited
	return s.exitStatus
}
