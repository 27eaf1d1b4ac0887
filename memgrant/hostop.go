package memgrant

import "fmt"

// HostOpKind says what a HostOp does to the stub's host address space.
type HostOpKind uint8

// Host operations.
const (
	// OpMap maps Length bytes of the memory file from Offset at Addr with Prot
	// (MAP_SHARED|MAP_FIXED|MAP_POPULATE), replacing whatever was there.
	OpMap HostOpKind = iota + 1
	// OpProtect changes the rights of [Addr, Addr+Length), which memgrant only issues
	// over pages it mapped with OpMap.
	OpProtect
	// OpUnmap removes every mapping in [Addr, Addr+Length). A mapper may leave an
	// inaccessible reservation there instead of a hole.
	OpUnmap
)

func (k HostOpKind) String() string {
	switch k {
	case OpMap:
		return "map"
	case OpProtect:
		return "protect"
	case OpUnmap:
		return "unmap"
	}
	return fmt.Sprintf("HostOpKind(%d)", uint8(k))
}

// HostOp is one command for the stub's control thread; a batch is applied in order.
type HostOp struct {
	Kind   HostOpKind
	Addr   uint64 // page aligned tenant address
	Length uint64 // page multiple
	Prot   Prot   // OpMap, OpProtect
	Offset uint64 // OpMap: offset in the grant file
}

func (op HostOp) String() string {
	s := fmt.Sprintf("%s %#x+%#x", op.Kind, op.Addr, op.Length)
	if op.Kind != OpUnmap {
		s += " " + op.Prot.String()
	}
	if op.Kind == OpMap {
		s += fmt.Sprintf(" @%#x", op.Offset)
	}
	return s
}

// HostMapper applies host operations to one tenant address space (a stub). Apply either
// applies every op in order or returns an error; after an error the host state of the
// address space is unknown and memgrant treats the address space as broken.
type HostMapper interface {
	Apply(ops []HostOp) error
}

// withoutReplaced drops the unmaps of ops that a later map of the same batch replaces whole
// (OpMap replaces whatever was there), when no op in between touches their range: each host
// call costs the host a TLB flush, and execve's batch unmapped most of what it mapped again.
func withoutReplaced(ops []HostOp) []HostOp {
	out := ops[:0:0]
	for i, op := range ops {
		if op.Kind != OpUnmap || !replacedLater(op, ops[i+1:]) {
			out = append(out, op)
		}
	}
	return out
}

// replacedLater reports whether the first op of later that touches u's range is a map that
// covers it whole.
func replacedLater(u HostOp, later []HostOp) bool {
	end := u.Addr + u.Length
	for _, op := range later {
		if op.Addr >= end || op.Addr+op.Length <= u.Addr {
			continue
		}
		return op.Kind == OpMap && op.Addr <= u.Addr && op.Addr+op.Length >= end
	}
	return false
}
