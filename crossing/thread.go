package crossing

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Thread is one stub thread as the sandbox drives it: its slot in the sysmsg file.
type Thread struct {
	stub  *Stub
	index int
	base  int // offset of its slot in the sysmsg file
	tid   int // host thread id

	state, sandboxSleeping, stubSleeping *uint32
	flags                                *uint32
	spin                                 *uint64

	// Regs are the thread's registers as of its last trap; change them before Resume.
	Regs *unix.PtraceRegs

	// SpinWhile, if set, must stay true for the sandbox side to keep spinning: the CPU it
	// spins on is lent, and the lender may want it back before the window ends.
	SpinWhile *atomic.Bool
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

// Tid is the host thread id, for the preemption signal.
func (t *Thread) Tid() int { return t.tid }

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
	if !t.post(uint32(flags), stubSpin) {
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

// Exit ends the stub thread without waiting.
func (t *Thread) Exit() {
	t.post(slotFExit, 0)
}

// post hands the thread back to the stub. It fails if the thread is no longer stopped at a trap:
// its process died (the reaper marked it dead), which must not be overwritten.
func (t *Thread) post(flags uint32, stubSpin uint64) bool {
	*t.flags = flags
	*t.spin = stubSpin
	if !atomic.CompareAndSwapUint32(t.state, stateTrapped, stateResume) {
		return false
	}
	if atomic.LoadUint32(t.stubSleeping) != 0 {
		futexWake(t.state)
	}
	return true
}

// rawWaitNanos bounds the first sleep of a carrier, which keeps its P: a garbage collection's
// stop-the-world waits for it, so it must end (10 ms is the Go runtime's own preemption
// quantum). It must also outlast the host's scheduler tick (4 ms at HZ=250, 10 ms at HZ=100):
// a timer due before the tick makes the host reprogram the CPU's timer device at every sleep,
// which on a paravirtualised host costs ~3 µs, a fifth of a one-CPU round trip.
const rawWaitNanos = 10_000_000

// wait spins for up to spin cycles, then sleeps: first keeping the P (a quick trap is likely),
// then letting the runtime use it elsewhere.
func (t *Thread) wait(spin uint64) error {
	if spin > 0 {
		t0 := rdtsc()
		for rdtsc()-t0 < spin {
			if atomic.LoadUint32(t.state) != stateResume {
				return t.stopped()
			}
			if t.SpinWhile != nil && !t.SpinWhile.Load() {
				break
			}
			cpuRelax()
		}
	}
	atomic.StoreUint32(t.sandboxSleeping, 1)
	short := unix.Timespec{Nsec: rawWaitNanos}
	for i := 0; atomic.LoadUint32(t.state) == stateResume; i++ {
		if i == 0 {
			futexWaitRaw(t.state, stateResume, &short)
		} else {
			futexWaitBlocking(t.state, stateResume)
		}
	}
	atomic.StoreUint32(t.sandboxSleeping, 0)
	return t.stopped()
}

func (t *Thread) stopped() error {
	if atomic.LoadUint32(t.state) == stateDead {
		return ErrStubDead
	}
	return nil
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

// fpState returns the sandbox's view of the thread's saved FPU state, checked to lie inside the
// thread's own signal stack.
func (t *Thread) fpState() []byte {
	s := t.stub
	ptr := *s.u64(t.base + slotFPState)
	lo := uint64(SysmsgBase + t.base + 0x1000)
	hi := uint64(SysmsgBase + t.base + sysmsgBlock)
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
