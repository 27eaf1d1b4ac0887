package memgrant

import (
	"sync"

	"golang.org/x/sys/unix"
)

// LocalMapper is a HostMapper that applies ops to the calling process, inside a region it
// reserved itself with a PROT_NONE mapping, and refuses any op outside that region. Tests
// and benchmarks use it; real tenants are mapped by their stub's control thread.
type LocalMapper struct {
	g     *Grant
	size  uint64
	tbase uint64 // the tenant address of the region's first byte

	mu     sync.Mutex
	region localRegion // the reservation; see localmapper_unsafe.go
	closed bool
	calls  uint64
	ops    uint64
}

// NewLocalMapper reserves size bytes (rounded up to a page) of this process's address
// space for mappings of g's memory file.
func NewLocalMapper(g *Grant, size uint64) (*LocalMapper, error) {
	size = (size + PageSize - 1) &^ (PageSize - 1)
	if size == 0 {
		return nil, errf(unix.EINVAL, "local mapper: zero size")
	}
	r, err := reserveRegion(size)
	if err != nil {
		return nil, err
	}
	return &LocalMapper{g: g, size: size, tbase: r.base(), region: r}, nil
}

// NewLocalMapperAt is NewLocalMapper for tenant addresses [tenantBase, tenantBase+size)
// placed in a reservation of its own wherever the host puts it: so a forked address space
// can live beside its parent in one process, at the same tenant addresses.
func NewLocalMapperAt(g *Grant, size, tenantBase uint64) (*LocalMapper, error) {
	if tenantBase%PageSize != 0 {
		return nil, errf(unix.EINVAL, "local mapper: misaligned tenant base %#x", tenantBase)
	}
	m, err := NewLocalMapper(g, size)
	if err != nil {
		return nil, err
	}
	m.tbase = tenantBase
	return m, nil
}

// Base returns the first tenant address of the region (its host address too, unless it
// was made by NewLocalMapperAt).
func (m *LocalMapper) Base() uint64 { return m.tbase }

// Size returns the size of the reserved region.
func (m *LocalMapper) Size() uint64 { return m.size }

// Stats returns the number of Apply calls and of ops applied so far.
func (m *LocalMapper) Stats() (calls, ops uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls, m.ops
}

// Apply validates and applies ops in order. It stops at the first op that fails.
func (m *LocalMapper) Apply(ops []HostOp) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errf(unix.EBADF, "local mapper: closed")
	}
	m.calls++
	for i, op := range ops {
		if err := m.check(op); err != nil {
			return err
		}
		if err := m.region.apply(m.g, op, op.Addr-m.tbase); err != nil {
			return errf(errnoOf(err), "local mapper: op %d (%v): %v", i, op, err)
		}
		m.ops++
	}
	return nil
}

// check refuses an op that leaves the region or the grant file or is malformed.
func (m *LocalMapper) check(op HostOp) error {
	base := m.tbase
	if op.Addr%PageSize != 0 || op.Length == 0 || op.Length%PageSize != 0 {
		return errf(unix.EINVAL, "local mapper: misaligned op %v", op)
	}
	if op.Addr < base || op.Addr-base > m.size || op.Length > m.size-(op.Addr-base) {
		return errf(unix.EPERM, "local mapper: op %v outside region %#x+%#x", op, base, m.size)
	}
	switch op.Kind {
	case OpMap:
		if op.Offset%PageSize != 0 || op.Offset > uint64(m.g.Size()) || op.Length > uint64(m.g.Size())-op.Offset {
			return errf(unix.EPERM, "local mapper: op %v outside the grant file", op)
		}
		fallthrough
	case OpProtect:
		if op.Prot&^protAll != 0 {
			return errf(unix.EINVAL, "local mapper: op %v: bad rights", op)
		}
	case OpUnmap:
	default:
		return errf(unix.EINVAL, "local mapper: unknown op %v", op)
	}
	return nil
}

// Close releases the whole region. It is idempotent.
func (m *LocalMapper) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return m.region.release(m.size)
}

// errnoOf returns the errno inside err, or EIO.
func errnoOf(err error) unix.Errno {
	if e, ok := err.(unix.Errno); ok {
		return e
	}
	return unix.EIO
}
