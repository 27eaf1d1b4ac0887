package crossing

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/endovisor/endo/memgrant"
	"golang.org/x/sys/unix"
)

// maxOpLength keeps every command under the control filter's 4 GiB length check.
const maxOpLength = 1 << 30

// Apply makes the stub's control thread carry out ops in order: the host side of a memgrant
// address space. It implements memgrant.HostMapper.
func (s *Stub) Apply(ops []memgrant.HostOp) error {
	s.cmdMu.Lock()
	defer s.cmdMu.Unlock()
	batch := make([]cmdOp, 0, cmdMaxOps)
	for _, op := range ops {
		var kind uint64
		switch op.Kind {
		case memgrant.OpMap:
			kind = opMap
		case memgrant.OpProtect:
			kind = opProtect
		case memgrant.OpUnmap:
			kind = opUnmap
		default:
			return fmt.Errorf("stub %d: unknown host op %d", s.pid, op.Kind)
		}
		if op.Addr+op.Length > TenantMax || op.Addr+op.Length < op.Addr {
			return fmt.Errorf("stub %d: host op at %#x+%#x beyond the tenant range", s.pid, op.Addr, op.Length)
		}
		for op.Length > 0 {
			n := min(op.Length, maxOpLength)
			batch = append(batch, cmdOp{kind, op.Addr, n, uint64(op.Prot), op.Offset})
			if len(batch) == cmdMaxOps {
				if _, err := s.runBatch(batch); err != nil {
					return err
				}
				batch = batch[:0]
			}
			op.Addr += n
			op.Offset += n
			op.Length -= n
		}
	}
	if len(batch) > 0 {
		_, err := s.runBatch(batch)
		return err
	}
	return nil
}

// cmdOp is one command as the control thread reads it.
type cmdOp struct{ kind, addr, length, prot, off uint64 }

// runBatch posts ops to the control thread and waits for its ack; it returns the ack's value
// (the new thread's tid for opClone).
func (s *Stub) runBatch(ops []cmdOp) (int64, error) {
	select {
	case <-s.exited:
		return 0, fmt.Errorf("stub %d: %w (%s, %v)", s.pid, ErrStubDead, describeWait(s.exitStatus), s.waitErr)
	default:
	}
	cmd := s.sysmsg[sysmsgCmd : sysmsgCmd+0x1000]
	for i, op := range ops {
		o := cmdOps + i*cmdOpSize
		binary.LittleEndian.PutUint64(cmd[o:], op.kind)
		binary.LittleEndian.PutUint64(cmd[o+8:], op.addr)
		binary.LittleEndian.PutUint64(cmd[o+16:], op.length)
		binary.LittleEndian.PutUint64(cmd[o+24:], op.prot)
		binary.LittleEndian.PutUint64(cmd[o+32:], op.off)
	}
	atomic.StoreUint32(s.u32(sysmsgCmd+cmdNops), uint32(len(ops)))
	s.seq++
	atomic.StoreUint32(s.u32(sysmsgCmd+cmdSeq), s.seq)
	futexWake(s.u32(sysmsgCmd + cmdSeq))

	// Only the control thread can write to the ack pipe: tenant threads' filter forbids write.
	var ack [16]byte
	if _, err := io.ReadFull(s.ack, ack[:]); err != nil {
		return 0, fmt.Errorf("stub %d control thread: %w (%s)", s.pid, ErrStubDead, describeWait(s.WaitStatus()))
	}
	seq := binary.LittleEndian.Uint32(ack[0:])
	idx := binary.LittleEndian.Uint32(ack[4:])
	res := int64(binary.LittleEndian.Uint64(ack[8:]))
	if seq != s.seq {
		return 0, fmt.Errorf("stub %d control thread: ack %d for batch %d", s.pid, seq, s.seq)
	}
	if res < 0 {
		op := cmdOp{}
		if int(idx) < len(ops) {
			op = ops[idx]
		}
		return 0, fmt.Errorf("stub %d: host op %d at %#x+%#x: %w", s.pid, op.kind, op.addr, op.length, unix.Errno(-res))
	}
	return res, nil
}

// awaitNanos bounds how long the control thread waits for a new runner's first trap before it
// acks anyway (tenant code can write the state word it waits on).
const awaitNanos = 100_000_000

// NewThread makes a new tenant thread in the stub, stopped at its first trap (the boot ping),
// ready for its registers. An idle runner will run it if there is one; otherwise the control
// thread starts a new runner, which boots holding it.
func (s *Stub) NewThread() (*Thread, error) {
	s.cmdMu.Lock()
	defer s.cmdMu.Unlock()
	s.mu.Lock()
	i, contexts := -1, 1 // with the new one
	for j := 0; j < sysmsgMaxThreads; j++ {
		if s.threads[j] != nil {
			contexts++
		} else if i < 0 && j > 0 {
			i = j
		}
	}
	s.mu.Unlock()
	if i < 0 {
		return nil, fmt.Errorf("stub %d: all %d thread slots in use: %w", s.pid, sysmsgMaxThreads, unix.EAGAIN)
	}
	t, err := s.newThread(i)
	if err != nil {
		return nil, err
	}
	atomic.StoreUint64(s.u64(t.base+slotFPState), 0)
	n := int(s.nrunners.Load())
	if contexts <= n {
		// As many runners as contexts: its resume finds an idle one. Stopped as if at a boot
		// ping meanwhile.
		*t.Regs = unix.PtraceRegs{Orig_rax: unix.SYS_GETPID}
		atomic.StoreUint32(s.u32(t.base+slotSigno), uint32(unix.SIGSYS))
		atomic.StoreUint32(t.runnerIdx, runNone)
		atomic.StoreUint32(t.state, stateTrapped)
		return t, nil
	}
	r := n
	s.initRunner(r, i)
	atomic.StoreUint32(t.runnerIdx, uint32(r))
	atomic.StoreUint32(t.state, stateResume)
	block := uint64(SysmsgBase + sysmsgThreads + r*sysmsgBlock)
	// The control thread acks once the new runner has trapped (or after awaitNanos), not
	// right after the clone: each of the three threads then wakes the next and sleeps, and the
	// caller's carrier is not runnable beside a runner still on its way to its first trap. The
	// runner's trap wakes the state word's sleeper, which is the control thread until the ack.
	// Traced over 50 clones beside two busy loops, the ack used to wake the caller while the
	// runner was still runnable in 50 of them (both then waited for a CPU, up to a host tick,
	// and the probe saw three); with the await, in none.
	atomic.StoreUint32(t.sandboxSleeping, 1)
	state := uint64(SysmsgBase + t.base + slotState)
	tid, err := s.runBatch([]cmdOp{{kind: opClone, addr: block + runAlive,
		length: block + blockSigstack, prot: 0, off: sysmsgBlock - blockSigstack},
		{kind: opAwait, addr: state, length: stateResume, prot: 0, off: awaitNanos}})
	if err != nil {
		t.Release()
		return nil, err
	}
	s.tids[r].Store(int32(tid))
	s.nrunners.Store(int32(r + 1))
	// The new runner reads its signal stack from the command page: it must have trapped (and so
	// be done with it) before the page is written again, which cmdMu holds off.
	if err := t.wait(0); err != nil {
		t.Release()
		return nil, fmt.Errorf("stub %d: new thread did not start: %w", s.pid, err)
	}
	return t, nil
}
