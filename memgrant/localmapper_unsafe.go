package memgrant

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// localRegion is a reservation in this process's address space. It is kept as an
// unsafe.Pointer because the memory is not Go's: the mappings in it are made and removed
// by LocalMapper alone.
type localRegion struct{ p unsafe.Pointer }

func reserveRegion(size uint64) (localRegion, error) {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(size), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return localRegion{}, fmt.Errorf("local mapper: reserve %d bytes: %w", size, err)
	}
	return localRegion{p: p}, nil
}

func (r localRegion) base() uint64 { return uint64(uintptr(r.p)) }

// at returns the host address off bytes into the region.
func (r localRegion) at(off uint64) unsafe.Pointer { return unsafe.Add(r.p, off) }

// apply performs one op that check has accepted, at off bytes into the region.
func (r localRegion) apply(g *Grant, op HostOp, off uint64) error {
	p := r.at(off)
	switch op.Kind {
	case OpMap:
		_, err := unix.MmapPtr(int(g.File().Fd()), int64(op.Offset), p, uintptr(op.Length), int(op.Prot),
			unix.MAP_SHARED|unix.MAP_FIXED|unix.MAP_POPULATE)
		return err
	case OpProtect:
		return unix.Mprotect(unsafe.Slice((*byte)(p), op.Length), int(op.Prot))
	case OpUnmap:
		// Put the reservation back rather than leave a hole that the Go runtime could take.
		_, err := unix.MmapPtr(-1, 0, p, uintptr(op.Length), unix.PROT_NONE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
		return err
	}
	return unix.EINVAL
}

func (r localRegion) release(size uint64) error {
	if err := unix.MunmapPtr(r.p, uintptr(size)); err != nil {
		return fmt.Errorf("local mapper: release region: %w", err)
	}
	return nil
}

// Bytes returns this process's view of tenant addresses [addr, addr+n) in the region, for tests and
// benchmarks that touch tenant memory the way the tenant would. Touching a page that is
// not mapped with enough rights kills the process (SIGSEGV); the caller must know.
func (m *LocalMapper) Bytes(addr, n uint64) ([]byte, error) {
	base := m.tbase
	if addr < base || addr-base > m.size || n > m.size-(addr-base) {
		return nil, errf(unix.EFAULT, "local mapper: %#x+%#x outside region", addr, n)
	}
	return unsafe.Slice((*byte)(m.region.at(addr-base)), n), nil
}

// HostAddr returns the address in this process that tenant address addr of the region
// lives at, for tests that look at the host's own view (/proc/self/maps).
func (m *LocalMapper) HostAddr(addr uint64) (uint64, error) {
	if addr < m.tbase || addr-m.tbase >= m.size {
		return 0, errf(unix.EFAULT, "local mapper: %#x outside region", addr)
	}
	return uint64(uintptr(m.region.at(addr - m.tbase))), nil
}
