package memgrant

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Discard is madvise(MADV_DONTNEED) over [addr, addr+length):
//
//   - private anonymous pages are dropped (their frames unref'd, so UsedBytes drops, and
//     unmapped on the host): they read as zero again, populated on the next touch. Eager
//     VMAs too: a tenant discards to give memory back, and the pod's limit counts frames;
//   - private copies of file data read the file again: an eager VMA is refilled now into
//     fresh frames (no fault later), a lazy one is dropped and refilled on fault;
//   - shared pages are left alone: like Linux, they keep their data.
//
// Like Linux it works on every mapped part of the range and returns ENOMEM afterwards if
// part of the range was not mapped.
func (as *AddressSpace) Discard(addr, length uint64) error {
	if addr%PageSize != 0 {
		return errf(unix.EINVAL, "discard %#x+%#x: misaligned", addr, length)
	}
	if length == 0 {
		return nil
	}
	length = pageUp(length)
	end := addr + length
	if end < addr {
		return errf(unix.EINVAL, "discard %#x+%#x: wraps", addr, length)
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if err := as.usable(); err != nil {
		return err
	}
	var ops []HostOp
	var old []Frame
	hole := false
	for cur := addr; cur < end; {
		i, v := as.find(cur)
		if v == nil {
			hole = true
			if i == len(as.vmas) || as.vmas[i].start >= end {
				break
			}
			cur = as.vmas[i].start
			continue
		}
		s, e := cur, min(end, v.end)
		cur = e
		if v.obj != nil {
			continue
		}
		runs := as.pt.presentRuns(s, e)
		if len(runs) == 0 {
			continue
		}
		old = append(old, as.pt.clearRange(s, e)...)
		if v.fill != nil && !v.lazy && v.prot != ProtNone {
			// OpMap replaces the old host mappings page for page. If the grant is short
			// or the file fails, the pages are simply dropped: a fault fills them (and
			// reports the trouble) when they are touched, as in a lazy VMA.
			if mops, err := as.populate(v, s, e); err == nil {
				ops = append(ops, mops...)
				continue
			}
		}
		for _, r := range runs {
			ops = append(ops, HostOp{Kind: OpUnmap, Addr: r.Start, Length: r.End - r.Start})
		}
	}
	if err := as.apply(ops); err != nil {
		as.leaked = append(as.leaked, old...)
		return fmt.Errorf("discard %#x+%#x: %w", addr, length, err)
	}
	as.unref(old)
	if hole {
		return errf(unix.ENOMEM, "discard %#x+%#x: part of the range is not mapped", addr, length)
	}
	return nil
}
