package memgrant

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// RemapFlags modify Remap, like MREMAP_*.
type RemapFlags uint32

// Remap flags.
const (
	RemapMayMove   RemapFlags = 1 << iota // move the mapping when it cannot grow in place
	RemapFixed                            // move it to newAddr, replacing what is there (needs RemapMayMove)
	RemapDontUnmap                        // move, but leave the old range mapped and empty (needs RemapMayMove, oldLen == newLen)

	remapKnown = RemapMayMove | RemapFixed | RemapDontUnmap
)

// Remap is mremap(2): it grows or shrinks [old, old+oldLen), which must lie in one VMA,
// to newLen and returns where the mapping now is. Shrinking unmaps the tail; growing
// happens in place when the room after the VMA is free, else (RemapMayMove) the mapping
// moves: page-table entries and frames move, nothing is copied, and the host maps the
// same frames at the new place. A grown part is populated now if the VMA is eager and the
// whole stays within EagerLimit, else on fault. oldLen 0 makes a second mapping of the
// same pages of a shared mapping, as Linux does.
func (as *AddressSpace) Remap(old, oldLen, newLen uint64, flags RemapFlags, newAddr uint64) (uint64, error) {
	if flags&^remapKnown != 0 {
		return 0, errf(unix.EINVAL, "remap %#x: unknown flags %#x", old, uint32(flags))
	}
	if flags&(RemapFixed|RemapDontUnmap) != 0 && flags&RemapMayMove == 0 {
		return 0, errf(unix.EINVAL, "remap %#x: fixed or dont-unmap without may-move", old)
	}
	if flags&RemapDontUnmap != 0 && oldLen != newLen {
		return 0, errf(unix.EINVAL, "remap %#x: dont-unmap changes the length", old)
	}
	if old%PageSize != 0 || newLen == 0 {
		return 0, errf(unix.EINVAL, "remap %#x+%#x to %#x: misaligned or empty", old, oldLen, newLen)
	}
	if oldLen > as.l.Max-as.l.Min || newLen > as.l.Max-as.l.Min {
		return 0, errf(unix.ENOMEM, "remap %#x+%#x to %#x: longer than the address space", old, oldLen, newLen)
	}
	oldLen, newLen = pageUp(oldLen), pageUp(newLen)
	fixed := flags&RemapFixed != 0
	if fixed {
		if newAddr%PageSize != 0 {
			return 0, errf(unix.EINVAL, "remap %#x: misaligned new address %#x", old, newAddr)
		}
		if newAddr < as.l.Min || newAddr+newLen < newAddr || newAddr+newLen > as.l.Max {
			return 0, errf(unix.EINVAL, "remap %#x: new range %#x+%#x outside [%#x, %#x)", old, newAddr, newLen, as.l.Min, as.l.Max)
		}
		if newAddr < old+max(oldLen, PageSize) && old < newAddr+newLen {
			return 0, errf(unix.EINVAL, "remap %#x+%#x: new range %#x+%#x overlaps it", old, oldLen, newAddr, newLen)
		}
		if as.overlapsReserved(newAddr, newAddr+newLen) {
			return 0, errf(unix.ENOMEM, "remap %#x: new range %#x+%#x over a reserved range", old, newAddr, newLen)
		}
	}

	as.mu.Lock()
	defer as.mu.Unlock()
	if err := as.usable(); err != nil {
		return 0, err
	}
	_, v := as.find(old)
	if v == nil || oldLen > v.end-old {
		return 0, errf(unix.EFAULT, "remap %#x+%#x: not within one mapping", old, oldLen)
	}
	if oldLen == 0 && v.obj == nil {
		return 0, errf(unix.EINVAL, "remap %#x: a second mapping of private memory", old)
	}

	var ops []HostOp
	var freed []Frame
	// cut removes [s, e) the way Unmap does, into ops and freed.
	cut := func(s, e uint64) {
		if runs := as.pt.presentRuns(s, e); len(runs) > 0 {
			ops = append(ops, HostOp{Kind: OpUnmap, Addr: runs[0].Start, Length: runs[len(runs)-1].End - runs[0].Start})
		}
		freed = append(freed, as.removeRange(s, e)...)
	}
	finish := func(addr uint64) (uint64, error) {
		if err := as.apply(ops); err != nil {
			as.leaked = append(as.leaked, freed...)
			return 0, fmt.Errorf("remap %#x+%#x to %#x: %w", old, oldLen, newLen, err)
		}
		as.unref(freed)
		return addr, nil
	}

	if !fixed && flags&RemapDontUnmap == 0 && oldLen != 0 {
		if newLen <= oldLen {
			cut(old+newLen, old+oldLen)
			return finish(old)
		}
		// Grow in place when the mapping ends here and the room after it is free.
		oend, nend := old+oldLen, old+newLen
		if oend == v.end && nend > oend && nend <= as.l.Max && !as.overlapsVMA(oend, nend) && !as.overlapsReserved(oend, nend) {
			v.end = nend
			ops = append(ops, as.growOps(v, oend)...)
			i, _ := as.find(old)
			as.merge(i, i+1)
			return finish(old)
		}
		if flags&RemapMayMove == 0 {
			return 0, errf(unix.ENOMEM, "remap %#x+%#x to %#x: no room to grow in place", old, oldLen, newLen)
		}
	}

	dst := newAddr
	if fixed {
		cut(dst, dst+newLen)
		if newLen < oldLen {
			cut(old+newLen, old+oldLen)
			oldLen = newLen
		}
	} else {
		var err error
		if dst, err = as.findFree(0, newLen); err != nil {
			return 0, fmt.Errorf("remap %#x+%#x to %#x: %w", old, oldLen, newLen, err)
		}
	}
	if oldLen == 0 {
		as.splitAt(old)
		_, v = as.find(old)
		q := *v
		q.holdSources()
		q.start, q.end = dst, dst+newLen
		as.insert(&q)
		ops = append(ops, as.growOps(&q, dst)...)
		return finish(dst)
	}
	ops = append(ops, as.move(old, oldLen, dst, newLen, flags&RemapDontUnmap != 0)...)
	return finish(dst)
}

// move moves the VMA piece [old, old+oldLen) and its pages to dst, grown to newLen, and
// returns the host ops: the frames mapped at dst, then the old range unmapped. With
// dontUnmap the old VMA stays, empty. as.mu is held; [dst, dst+newLen) is free.
func (as *AddressSpace) move(old, oldLen, dst, newLen uint64, dontUnmap bool) []HostOp {
	i, _ := as.span(old, old+oldLen)
	p := as.vmas[i]
	q := p
	if dontUnmap {
		c := *p
		c.holdSources()
		q = &c
		p.lazy = true // its pages come back on fault
	} else {
		as.vmas = append(as.vmas[:i], as.vmas[i+1:]...)
	}
	q.start, q.end = dst, dst+newLen

	var ops []HostOp
	type moved struct {
		va uint64
		p  pte
	}
	var ms []moved
	as.pt.forEachPresent(old, old+oldLen, func(va uint64, p pte) { ms = append(ms, moved{va, p}) })
	for _, m := range ms {
		as.pt.clear(m.va)
	}
	for _, m := range ms {
		va := dst + (m.va - old)
		as.pt.setPTE(va, m.p)
		ops = appendMap(ops, va, m.p.frame, hostProt(q.prot, m.p))
	}
	if len(ms) > 0 {
		s, e := ms[0].va, ms[len(ms)-1].va+PageSize
		ops = append(ops, HostOp{Kind: OpUnmap, Addr: s, Length: e - s})
	}
	j := as.insert(q)
	ops = append(ops, as.growOps(q, dst+oldLen)...)
	as.merge(j, j+1)
	if dontUnmap {
		k, _ := as.find(old)
		as.merge(k, k+1)
	}
	return ops
}

// growOps populates [from, v.end) of v, which has just grown, if v is eager and still
// within EagerLimit; otherwise v becomes lazy. Population is best effort: what cannot be
// populated now (grant short) is populated on fault. as.mu is held.
func (as *AddressSpace) growOps(v *vma, from uint64) []HostOp {
	if v.end-v.start > as.l.EagerLimit {
		v.lazy = true
	}
	if v.lazy || v.prot == ProtNone || from >= v.end {
		return nil
	}
	ops, err := as.populate(v, from, v.end)
	if err != nil {
		return nil
	}
	return ops
}
