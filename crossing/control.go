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
	batch := make([]memgrant.HostOp, 0, cmdMaxOps)
	for _, op := range ops {
		for op.Length > 0 {
			part := op
			if part.Length > maxOpLength {
				part.Length = maxOpLength
			}
			batch = append(batch, part)
			if len(batch) == cmdMaxOps {
				if err := s.runBatch(batch); err != nil {
					return err
				}
				batch = batch[:0]
			}
			op.Addr += part.Length
			op.Offset += part.Length
			op.Length -= part.Length
		}
	}
	if len(batch) > 0 {
		return s.runBatch(batch)
	}
	return nil
}

func (s *Stub) runBatch(ops []memgrant.HostOp) error {
	select {
	case <-s.exited:
		return ErrStubDead
	default:
	}
	cmd := s.sysmsg[sysmsgCmd : sysmsgCmd+0x1000]
	for i, op := range ops {
		o := cmdOps + i*cmdOpSize
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
		binary.LittleEndian.PutUint64(cmd[o:], kind)
		binary.LittleEndian.PutUint64(cmd[o+8:], op.Addr)
		binary.LittleEndian.PutUint64(cmd[o+16:], op.Length)
		binary.LittleEndian.PutUint64(cmd[o+24:], uint64(op.Prot))
		binary.LittleEndian.PutUint64(cmd[o+32:], op.Offset)
	}
	atomic.StoreUint32(s.u32(sysmsgCmd+cmdNops), uint32(len(ops)))
	s.seq++
	atomic.StoreUint32(s.u32(sysmsgCmd+cmdSeq), s.seq)
	futexWake(s.u32(sysmsgCmd + cmdSeq))

	// Only the control thread can write to the ack pipe: tenant threads' filter forbids write.
	var ack [16]byte
	if _, err := io.ReadFull(s.ack, ack[:]); err != nil {
		return fmt.Errorf("stub %d control thread: %w", s.pid, ErrStubDead)
	}
	seq := binary.LittleEndian.Uint32(ack[0:])
	idx := binary.LittleEndian.Uint32(ack[4:])
	res := int64(binary.LittleEndian.Uint64(ack[8:]))
	if seq != s.seq {
		return fmt.Errorf("stub %d control thread: ack %d for batch %d", s.pid, seq, s.seq)
	}
	if res != 0 {
		op := memgrant.HostOp{}
		if int(idx) < len(ops) {
			op = ops[idx]
		}
		return fmt.Errorf("stub %d: host op %d at %#x+%#x: %w", s.pid, op.Kind, op.Addr, op.Length, unix.Errno(-res))
	}
	return nil
}
