package crossing

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Thread is one tenant thread of a stub as the sandbox drives it: a context (its slot in the
// sysmsg file: registers, trap, FPU state). The stub's host threads, its runners, run contexts;
// a runner runs one at a time and may park it and take another of the same stub (Switch) without
// waking anyone. There are always at least as many runners as contexts, so a context off every
// runner finds an idle one when it is resumed.
type Thread struct {
	stub  *Stub
	index int
	base  int // offset of its slot in the sysmsg file

	state, sandboxSleeping, stubSleeping *uint32
	flags, kick, runnerIdx               *uint32
	spin                                 *uint64

	// Regs are the thread's registers as of its last trap; change them before Resume.
	Regs *unix.PtraceRegs

	// SpinWhile, if set, must stay true for the sandbox side to keep spinning: the CPU it
	// spins on is lent, and the lender may want it back before the window ends.
	SpinWhile *atomic.Bool

	// parkedInCall: parked at a patched call, whose thread still holds the context's FPU state
	// and sleeps in stub_call: only that thread, its runner, may resume it.
	parkedInCall atomic.Bool
}

func (s *Stub) newThread(i int) (*Thread, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < 0 || i >= sysmsgMaxThreads || s.threads[i] != nil {
		return nil, fmt.Errorf("stub thread slot %d is taken or out of range", i)
	}
	base := sysmsgThreads + i*sysmsgBlock
	t := &Thread{
		stub: s, index: i, base: base,
		state:           s.u32(base + slotState),
		sandboxSleeping: s.u32(base + slotSandboxSleeping),
		stubSleeping:    s.u32(base + slotStubSleeping),
		flags:           s.u32(base + slotFlags),
		kick:            s.u32(base + slotKick),
		runnerIdx:       s.u32(base + slotRunner),
		spin:            s.u64(base + slotSpin),
		Regs:            s.regsAt(base + slotRegs),
	}
	s.threads[i] = t
	return t, nil
}

// Index is the thread's slot number in its stub; thread 0 is the stub's first.
func (t *Thread) Index() int { return t.index }

// Stub is the process the thread belongs to.
func (t *Thread) Stub() *Stub { return t.stub }

// Tid is the host thread id of the runner that holds the context now, 0 if none does.
//
// Others than the context's carrier (the probe) may ask while the stub is being released: the
// sysmsg mapping the answer is read from must still be there, or it reads 0.
func (t *Thread) Tid() int {
	s := t.stub
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sysmsg == nil {
		return 0
	}
	if r := t.runner(); r >= 0 {
		return s.runnerTid(r)
	}
	return 0
}

// runner is the runner holding the context, or -1. The stub writes the field; a value out of
// range (tenant code can write the sysmsg file) reads as none.
func (t *Thread) runner() int {
	r := atomic.LoadUint32(t.runnerIdx)
	if int(r) >= int(t.stub.nrunners.Load()) {
		return -1
	}
	return int(r)
}

// Dead reports whether the thread has ended (its exit cleared its state word), or its whole
// stub has been released (the state word is gone with the sysmsg mapping).
func (t *Thread) Dead() bool {
	s := t.stub
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.deadLocked()
}

func (t *Thread) deadLocked() bool {
	return t.stub.sysmsg == nil || atomic.LoadUint32(t.state) == stateDead
}

// Release frees the thread's slot for a new thread once the thread has ended.
func (t *Thread) Release() {
	s := t.stub
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.threads[t.index] == t {
		s.threads[t.index] = nil
	}
}

// TrapKind says why a thread stopped.
type TrapKind int

const (
	TrapSyscall TrapKind = iota + 1 // a system call of tenant code (Regs.Orig_rax is the number)
	TrapFault                       // a fault: Signal, Code, Addr, Write
	TrapPreempt                     // the sandbox's preemption signal
	TrapCall                        // a system call from a patched site: no signal frame, no FPU state
)

// Trap describes the thread's last stop.
type Trap struct {
	Kind   TrapKind
	Signal syscall.Signal // the host signal the stub caught
	Code   int32          // its si_code
	Addr   uint64         // the fault address, or the address after the syscall instruction
	Write  bool           // a page fault by a write
}

// Trap reads the reason of the last stop.
func (t *Thread) Trap() Trap {
	s := t.stub
	sig := syscall.Signal(atomic.LoadUint32(s.u32(t.base + slotSigno)))
	tr := Trap{
		Signal: sig,
		Code:   int32(*s.u32(t.base + slotCode)),
		Addr:   *s.u64(t.base + slotAddr),
		Write:  *s.u64(t.base + slotErr)&2 != 0,
	}
	switch sig {
	case 0:
		tr.Kind = TrapCall
		tr.Addr = t.Regs.Rip
	case syscall.SIGSYS:
		tr.Kind = TrapSyscall
	case sigPreempt:
		tr.Kind = TrapPreempt
	default:
		tr.Kind = TrapFault
	}
	return tr
}

// ResumeFlags change how the stub resumes a thread.
type ResumeFlags uint32

const (
	ResumeSetFS    ResumeFlags = slotFSetFS    // load Regs.Fs_base into the FS base
	ResumeResetFPU ResumeFlags = slotFResetFPU // start with a fresh FPU state (exec)
)

// Resume hands the thread back to tenant code with Regs and waits for its next trap. spin is how
// long each side may spin before sleeping, in TSC cycles: the caller (the kernelet) grants it only
// when a CPU is free for the spinning side. It returns ErrStubDead if the thread or its process
// ended meanwhile.
func (t *Thread) Resume(flags ResumeFlags, stubSpin, sandboxSpin uint64) error {
	if !t.post(stateTrapped, uint32(flags), stubSpin) {
		return ErrStubDead
	}
	return t.wait(sandboxSpin)
}

// Settle brings a thread stopped at a patched call (TrapCall) to a stop with its full state, so
// that its FPU state can be read or set: it resumes it at EscalateAddr and waits for the fault
// there. The registers are kept. A thread at any other stop is left as it is.
func (t *Thread) Settle() error {
	if t.Trap().Kind != TrapCall {
		return nil
	}
	rip := t.Regs.Rip
	t.Regs.Rip = stubImage.escalate
	if err := t.Resume(0, 0, 0); err != nil {
		return err
	}
	if tr := t.Trap(); tr.Kind != TrapFault || t.Regs.Rip != stubImage.escalate {
		return fmt.Errorf("stub thread did not settle (trap %d at %#x)", tr.Kind, t.Regs.Rip)
	}
	t.Regs.Rip = rip
	return nil
}

// StopSpinning ends the stub's spin window of the current stop: the task has given up its vCPU,
// so its stub thread must sleep, not spin.
func (t *Thread) StopSpinning() { atomic.StoreUint64(t.spin, 0) }

// Exit ends the context: the thread is gone for its process, and the runner that held it goes
// idle (runners stay for the stub's life). It must be stopped at a trap.
func (t *Thread) Exit() {
	s := t.stub
	r := t.runner()
	atomic.StoreUint32(t.runnerIdx, runNone)
	atomic.StoreUint32(t.state, stateDead)
	futexWake(t.state)
	if r >= 0 {
		atomic.CompareAndSwapUint32(s.runnerU32(r, runCur), uint32(t.index), runNone)
		s.idled(r)
	}
}

// post hands the context back to tenant code from state from (a trap, or parked). A context off
// every runner goes to an idle one. It fails if the context is no longer in that state: its
// process died (the reaper marked it dead), which must not be overwritten, or (parked) it
// trapped after all.
func (t *Thread) post(from, flags uint32, stubSpin uint64) bool {
	s := t.stub
	*t.flags = flags
	*t.spin = stubSpin
	r := t.runner()
	attached := false
	if r < 0 {
		if r = s.attachIdle(t); r < 0 {
			return false
		}
		attached = true
	}
	if from == stateTrapped && !attached {
		// A switch ordered while the context ran, which its runner never saw, must not park
		// the run that starts now: the context it named goes to an idle runner.
		if o := atomic.SwapUint32(s.runnerU32(r, runNext), runNone); o != runNone {
			s.servePending(-1, o)
		}
	}
	if !atomic.CompareAndSwapUint32(t.state, from, stateResume) {
		if attached {
			atomic.StoreUint32(t.runnerIdx, runNone)
			atomic.CompareAndSwapUint32(s.runnerU32(r, runCur), uint32(t.index), runNone)
			s.wakeRunner(r)
		}
		return false
	}
	t.parkedInCall.Store(false)
	s.wakeRunner(r)
	if atomic.SwapUint32(t.stubSleeping, 0) != 0 {
		futexWake(t.stubSleeping) // a patched call's wait (stub_call) sleeps on that word
	}
	if atomic.SwapUint32(t.kick, 0) != 0 {
		// Kicked while in the sandbox: trap again at once (the runner is new, or the signal
		// was never sent).
		unix.Tgkill(s.pid, s.runnerTid(r), sigPreempt)
	}
	return true
}

// inTenant reports whether the context's state means it runs (or waits parked) in tenant code.
func inTenant(st uint32) bool { return st == stateResume || st == stateParked }

// wait spins for up to spin cycles, then sleeps, giving its P back at once (BlockingSyscall6). A
// context parked meanwhile is still in tenant code: its carrier sleeps on until it traps.
//
// The first sleep used to be a raw one of at most 10 ms that kept the P, for a quick trap. But a
// P that is not idle keeps the runtime's monitor polling in the pod's cgroup (block_unsafe.go),
// and the raw sleep held up a GC's stop-the-world until it ended. In sched-fair's lock row (its
// contenders sleep and wake all along), beside two busy loops, the pod's threads woke 35-50 times
// a second without it against 80-130 with it (3 runs each, of which one with it saw no wake-up
// at all; the monitor 18-29 against 35-58, the carriers 5-12 against 26-28). The sibling's share
// moved within the noise: 0.993 against 0.990 (20 interleaved pairs of 10 s runs, lowest 0.975
// against 0.973); sched-perf's rows did too.
func (t *Thread) wait(spin uint64) error {
	if spin > 0 {
		t0 := rdtsc()
		for rdtsc()-t0 < spin {
			if !inTenant(atomic.LoadUint32(t.state)) {
				return t.stopped()
			}
			if t.SpinWhile != nil && !t.SpinWhile.Load() {
				break
			}
			cpuRelax()
		}
	}
	atomic.StoreUint32(t.sandboxSleeping, 1)
	for {
		st := atomic.LoadUint32(t.state)
		if !inTenant(st) {
			break
		}
		futexWaitBlocking(t.state, st)
	}
	atomic.StoreUint32(t.sandboxSleeping, 0)
	return t.stopped()
}

func (t *Thread) stopped() error {
	if atomic.LoadUint32(t.state) == stateDead {
		return ErrStubDead
	}
	atomic.StoreUint32(t.kick, 0) // the carrier sees this stop: a kick before it is served
	return nil
}

// Parked reports whether the context waits parked (its registers saved, on no runner).
func (t *Thread) Parked() bool { return atomic.LoadUint32(t.state) == stateParked }

// Park saves a context stopped at a trap of tenant code (a preemption) off its runner, which goes
// idle: the context waits parked until ResumeParked or a Switch to it, and its carrier may sleep
// in Wait meanwhile. It reports whether it parked the context.
//
// A context stopped at a patched call (TrapCall) parks where it is instead: its FPU state is in
// no slot but in its thread, asleep in stub_call, and only ResumeParked wakes it there. Patched
// calls enter the sandbox so only while the context is its process's only one (SetSingle), so no
// other runner, ring or Switch of its stub wants it meanwhile; a yield between two such processes
// then costs two host switches (stub, carrier, the other's stub) rather than three.
func (t *Thread) Park() bool {
	s := t.stub
	if atomic.LoadUint32(t.state) != stateTrapped {
		return false
	}
	if t.Trap().Kind == TrapCall {
		if t.runner() < 0 {
			return false // its thread would not be the one to resume it
		}
		t.parkedInCall.Store(true)
		if !atomic.CompareAndSwapUint32(t.state, stateTrapped, stateParked) {
			t.parkedInCall.Store(false)
			return false
		}
		return true
	}
	r := t.runner()
	if r >= 0 {
		if !t.saveFP() {
			return false
		}
		atomic.StoreUint32(t.runnerIdx, runNone)
		atomic.CompareAndSwapUint32(s.runnerU32(r, runCur), uint32(t.index), runNone)
	}
	ok := atomic.CompareAndSwapUint32(t.state, stateTrapped, stateParked)
	if r >= 0 {
		s.idled(r)
	}
	return ok
}

// ParkFresh parks a context that has not run yet (a new thread at its first stop) as Park does,
// with the fresh FPU state its first resume would give it (ResumeResetFPU) and the FS base its
// registers hold: a runner can start it without its carrier.
func (t *Thread) ParkFresh() bool {
	s := t.stub
	if atomic.LoadUint32(t.state) != stateTrapped {
		return false
	}
	// An FXSAVE image of x87's and SSE's defaults, without the XSAVE marker: the host's
	// sigreturn puts every other component in its init state.
	area := t.base + blockFPArea
	img := s.sysmsg[area : area+blockFPSize]
	clear(img)
	binary.LittleEndian.PutUint16(img[0:], 0x37f)
	binary.LittleEndian.PutUint32(img[24:], 0x1f80)
	atomic.StoreUint64(s.u64(t.base+slotFPState), uint64(SysmsgBase+area))
	return t.Park()
}

// Wait waits (without resuming anything) for the context's next trap: the carrier of a parked
// context sleeps here until a runner that took it traps. (Before every wait gave its P up at once,
// this one did already: sched-perf's row 4, two processes yielding parked at their patched calls,
// had a p99 of 99-111 µs a round trip with a raw wait first, as a stop-the-world waited for it,
// and 32-41 µs without.)
func (t *Thread) Wait() error { return t.wait(0) }

// ResumeParked runs a parked context on an idle runner. It reports false, leaving the context to
// its carrier, if the context trapped instead (a system call raced its parking, or a kick); a
// context still on its way to being parked (a switch ordered, not yet done) is waited for.
//
// Its caller need not be the context's carrier: it stays off the sysmsg mapping once the stub is
// released (Switch and WaitStopped likewise).
func (t *Thread) ResumeParked(stubSpin uint64) bool {
	release, ok := t.stub.hold()
	if !ok {
		return false
	}
	defer release()
	deadline := time.Now().Add(time.Second)
	for t.waitStopped(time.Until(deadline)) && atomic.LoadUint32(t.state) == stateParked {
		if t.post(stateParked, 0, stubSpin) {
			return true
		}
	}
	return false
}

// runPark is the order to park the context and idle: any value that names no context.
const runPark = runNone - 1

// Switch orders the runner that runs this context to park it and take to (parked, of the same
// stub) instead, at its next stop: a preemption signal is sent for it. Nobody else is woken. With
// to nil the runner only parks the context and idles. It reports false if the context is on no
// runner.
func (t *Thread) Switch(to *Thread) bool {
	s := t.stub
	order := uint32(runPark)
	if to != nil {
		if to.stub != s {
			return false
		}
		order = uint32(to.index)
	}
	release, ok := s.hold()
	if !ok {
		return false
	}
	defer release()
	r := t.runner()
	if r < 0 {
		return false
	}
	next := s.runnerU32(r, runNext)
	atomic.StoreUint32(next, order)
	unix.Tgkill(s.pid, s.runnerTid(r), sigPreempt)
	// The runner carries the order out at its next stop in the stub, which takes the order
	// before it posts anything. A context already stopped in the sandbox leaves the order
	// stale (it must not park the context's next run): it is taken back here, and to runs on an
	// idle runner instead. (A context that stopped and was resumed since has its resume take
	// the order back: post.)
	if atomic.LoadUint32(t.state) != stateResume {
		if atomic.CompareAndSwapUint32(next, order, runNone) && to != nil {
			to.post(stateParked, 0, 0)
		}
	}
	return true
}

// WaitStopped waits, at most limit, until the context no longer runs tenant code on a runner: a
// Switch's park was carried out, or it trapped, or its stub died. It reports whether it did.
// A switch to another process's context waits so, lest both run at once on the one vCPU; so
// does ResumeParked, for a context still on its way to being parked.
// A released stub's contexts count as stopped.
func (t *Thread) WaitStopped(limit time.Duration) bool {
	release, ok := t.stub.hold()
	if !ok {
		return true
	}
	defer release()
	return t.waitStopped(limit)
}

// waitStopped is WaitStopped with the mapping held. A stub that died leaves its contexts' state
// as it was: that counts as stopped too, lest a Release wait out the limit.
func (t *Thread) waitStopped(limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for i := 0; atomic.LoadUint32(t.state) == stateResume; i++ {
		if i < 100 {
			cpuRelax()
			continue
		}
		select {
		case <-t.stub.exited:
			return true
		default:
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Microsecond)
	}
	return true
}

// Kick makes the context stop in the sandbox soon with a preemption trap: at once if it runs,
// as soon as it is resumed if it is stopped, and by a trap made here if it is parked.
func (t *Thread) Kick() {
	s := t.stub
	// Other processes' tasks kick too (a signal sent): the sysmsg mapping must stay meanwhile.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sysmsg == nil {
		return
	}
	atomic.StoreUint32(t.kick, 1)
	for i := 0; i < 100; i++ {
		switch atomic.LoadUint32(t.state) {
		case stateParked:
			if t.parkedInCall.Load() {
				// Its thread sleeps in stub_call: resumed, it takes the kick's signal there
				// (post sends it) and traps with its full state.
				if t.post(stateParked, 0, 0) {
					return
				}
				continue
			}
			atomic.StoreUint32(s.u32(t.base+slotSigno), sigPreempt)
			atomic.StoreUint32(s.u32(t.base+slotCode), 0)
			if atomic.CompareAndSwapUint32(t.state, stateParked, stateTrapped) {
				atomic.StoreUint32(t.kick, 0)
				futexWake(t.state)
				return
			}
		case stateResume:
			if r := t.runner(); r >= 0 {
				unix.Tgkill(s.pid, s.runnerTid(r), sigPreempt)
				return
			}
			runtime.Gosched() // between a runner and parked: look again
		default:
			return // stopped: post sends the signal when it resumes the context
		}
	}
}

// readMaps lists the stub's mappings at start: everything there is the stub's own.
func readMaps(pid int) ([]Range, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("stub maps: %w", err)
	}
	defer f.Close()
	var rs []Range
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		field, _, _ := strings.Cut(sc.Text(), " ")
		lo, hi, ok := strings.Cut(field, "-")
		if !ok {
			continue
		}
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("stub maps: bad line %q", sc.Text())
		}
		rs = append(rs, Range{a, b})
	}
	return rs, sc.Err()
}

// The FPU state of a stopped thread lies in the host's signal frame on its signal stack, which is
// part of the sysmsg file: fxsave's 512 bytes, and with XSAVE its extended area after them.
const (
	fxsaveSize      = 512
	fpXstateMagic1  = 0x46505853
	swReservedMagic = 464 // sw_reserved.magic1; extended_size follows it
)

// fpState returns the sandbox's view of the context's saved FPU state, checked to lie inside its
// own FPU area or inside the signal stack of one runner.
func (t *Thread) fpState() []byte {
	s := t.stub
	ptr := atomic.LoadUint64(s.u64(t.base + slotFPState))
	var lo, hi uint64
	if area := uint64(SysmsgBase + t.base + blockFPArea); ptr == area {
		lo, hi = area, area+blockFPSize
	} else {
		first := uint64(SysmsgBase + sysmsgThreads)
		if ptr < first {
			return nil
		}
		b := (ptr - first) / sysmsgBlock
		if b >= sysmsgMaxThreads {
			return nil
		}
		lo = first + b*sysmsgBlock + blockSigstack
		hi = first + (b+1)*sysmsgBlock
	}
	if ptr < lo || ptr+fxsaveSize > hi {
		return nil
	}
	off := int(ptr - SysmsgBase)
	size := uint64(fxsaveSize)
	if *s.u32(off + swReservedMagic) == fpXstateMagic1 {
		size = uint64(*s.u32(off + swReservedMagic + 4))
	}
	if size < fxsaveSize || ptr+size > hi {
		return nil
	}
	return s.sysmsg[off : off+int(size)]
}

// CopyFPState gives the thread the FPU state of from (fork: the child goes on with the parent's
// vector registers, which code may hold across the system call).
func (t *Thread) CopyFPState(from *Thread) error {
	dst, src := t.fpState(), from.fpState()
	if dst == nil || src == nil || len(dst) != len(src) {
		return fmt.Errorf("stub thread FPU state not found (%d, %d bytes)", len(dst), len(src))
	}
	copy(dst, src)
	return nil
}

// FPState returns a copy of the FPU state the thread trapped with (nil if none is found).
func (t *Thread) FPState() []byte {
	b := t.fpState()
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// SetFPState gives the thread, when it resumes, the FPU state in b (from FPState, kept by the
// tenant across a signal handler). The software-reserved words that tell the host kernel the
// frame's layout stay the stub's own; the host checks the rest when the stub returns from its
// handler.
func (t *Thread) SetFPState(b []byte) error {
	dst := t.fpState()
	if dst == nil || len(b) != len(dst) {
		return fmt.Errorf("stub thread FPU state: %d bytes for %d", len(b), len(dst))
	}
	copy(dst[:swReservedMagic], b[:swReservedMagic])
	if len(dst) > fxsaveSize {
		// The XSAVE area, less the trailing magic word.
		copy(dst[fxsaveSize:len(dst)-4], b[fxsaveSize:len(b)-4])
	}
	return nil
}

// saveFP moves the FPU state of a context stopped on a runner into its own FPU area, where any
// runner that takes it finds it.
func (t *Thread) saveFP() bool {
	s := t.stub
	area := uint64(SysmsgBase + t.base + blockFPArea)
	if atomic.LoadUint64(s.u64(t.base+slotFPState)) == area {
		return true
	}
	if atomic.LoadUint64(s.u64(t.base+slotFPState)) == 0 {
		return true // none in a frame (a new context): the resume resets it
	}
	fp := t.fpState()
	if fp == nil || len(fp) > blockFPSize {
		return false
	}
	copy(s.sysmsg[t.base+blockFPArea:], fp)
	atomic.StoreUint64(s.u64(t.base+slotFPState), area)
	return true
}
