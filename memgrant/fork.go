package memgrant

import (
	"errors"
	"fmt"
	"maps"
	"sync"

	"golang.org/x/sys/unix"
)

// shmObject holds the frames of one shared anonymous mapping (MAP_SHARED|MAP_ANONYMOUS),
// by page index, so that every address space that maps it (across Fork) finds the same
// frame for the same page, including pages first touched after the Fork. It holds one
// reference to each of its frames, apart from the page tables' own, and gives them back
// when the last VMA that maps it goes.
type shmObject struct {
	mu     sync.Mutex
	users  int              // VMAs, in any address space, that map the object
	frames map[uint64]Frame // page index → frame
}

func newShmObject() *shmObject { return &shmObject{users: 1, frames: make(map[uint64]Frame)} }

// hold counts one more VMA that maps the object.
func (o *shmObject) hold() {
	o.mu.Lock()
	o.users++
	o.mu.Unlock()
}

// drop counts one VMA less; the last one gives the object's frames back. Page tables
// that still map them hold their own references.
func (o *shmObject) drop(g *Grant) {
	o.mu.Lock()
	o.users--
	var fs []Frame
	if o.users == 0 {
		for _, f := range o.frames {
			fs = append(fs, f)
		}
		o.frames = nil
	}
	o.mu.Unlock()
	g.unrefFrames(fs)
}

// get returns the frames of pages idx, allocating the missing ones (zeroed) in one go.
// It takes no reference for the caller. All or nothing: ErrExhausted changes nothing.
func (o *shmObject) get(g *Grant, idx []uint64) ([]Frame, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Frame, len(idx))
	var missing []int
	for i, x := range idx {
		if f, ok := o.frames[x]; ok {
			out[i] = f
		} else {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	runs, err := g.Alloc(len(missing))
	if err != nil {
		return nil, err
	}
	ri, rk := 0, 0
	for _, i := range missing {
		f := runs[ri].First + Frame(rk)
		if rk++; rk == runs[ri].Count {
			ri, rk = ri+1, 0
		}
		o.frames[idx[i]] = f
		out[i] = f
	}
	return out, nil
}

// dropVMA forgets v: a VMA of a shared mapping lets go of its object, one made from
// Pages of them.
func (as *AddressSpace) dropVMA(v *vma) {
	if v.obj != nil {
		v.obj.drop(as.g)
		v.obj = nil
	}
	if v.pages != nil {
		v.pages.drop()
		v.pages = nil
	}
}

// populateShared enters the object's frames for pages vas of shared VMA v, taking a
// reference for the page table, and returns the OpMaps. On error nothing has changed.
// as.mu is held.
func (as *AddressSpace) populateShared(v *vma, vas []uint64) ([]HostOp, error) {
	idx := make([]uint64, len(vas))
	for i, va := range vas {
		idx[i] = (v.fillOff + va - v.start) >> pageShift
	}
	fs, err := v.obj.get(as.g, idx)
	if err != nil {
		return nil, err
	}
	as.g.refFrames(fs)
	ops := make([]HostOp, 0, 1)
	for i, va := range vas {
		as.pt.set(va, fs[i])
		ops = appendMap(ops, va, fs[i], v.prot)
	}
	return ops, nil
}

// appendMap adds the mapping of frame f at va with rights prot to ops, extending the last
// OpMap when va and f follow it both in addresses and in the file.
func appendMap(ops []HostOp, va uint64, f Frame, prot Prot) []HostOp {
	if n := len(ops); n > 0 {
		last := &ops[n-1]
		if last.Kind == OpMap && last.Prot == prot && last.Addr+last.Length == va && last.Offset+last.Length == f.Offset() {
			last.Length += PageSize
			return ops
		}
	}
	return append(ops, HostOp{Kind: OpMap, Addr: va, Length: PageSize, Prot: prot, Offset: f.Offset()})
}

// appendRange adds [va, va+PageSize) to op kind k with rights prot, extending the last op
// when it is of the same kind and rights and ends at va.
func appendRange(ops []HostOp, k HostOpKind, va uint64, prot Prot) []HostOp {
	if n := len(ops); n > 0 {
		last := &ops[n-1]
		if last.Kind == k && last.Prot == prot && last.Addr+last.Length == va {
			last.Length += PageSize
			return ops
		}
	}
	return append(ops, HostOp{Kind: k, Addr: va, Length: PageSize, Prot: prot})
}

// protectOps returns the OpProtects that give the present pages of [s, e) rights prot,
// copy-on-write pages excepted from the write right. as.mu is held.
func (as *AddressSpace) protectOps(s, e uint64, prot Prot) []HostOp {
	var ops []HostOp
	as.pt.forEachPresent(s, e, func(va uint64, p pte) {
		ops = appendRange(ops, OpProtect, va, hostProt(prot, p))
	})
	return ops
}

// Fork returns a copy-on-write copy of as whose host side is m: a new, empty stub address
// space whose Layout l must hold every mapping of as (the same Min and Max, typically, and
// the new stub's own Reserved ranges). Private mappings are shared copy-on-write: the
// parent's pages lose the write right on the host, the child maps the same frames without
// it, and the first write to either side copies the page (HandleFault). Shared anonymous
// mappings share their frames for real. The child's host mappings are made now, batched
// over runs of contiguous frames, so reads after Fork take no fault on either side.
//
// If the child's host mapper fails, Fork returns the broken child with the error: its
// stub may map some of the frames, so the caller must Release it once the stub is gone.
func (as *AddressSpace) Fork(m HostMapper, l Layout) (*AddressSpace, error) {
	return as.fork(m, l, nil)
}

// ForkOver is Fork into the host process that prev, an address space it held before, left as it
// was (its process exited and Empty was not called): on the host only the pages that differ are
// mapped over or unmapped, which for the next child of the same parent is few of them. Then
// prev is released. On error prev is the caller's still, to release once the host process is
// gone (its host state is unknown).
func (as *AddressSpace) ForkOver(prev *AddressSpace, l Layout) (*AddressSpace, error) {
	prev.mu.Lock()
	err := prev.usable()
	m := prev.m
	prev.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("fork over an old address space: %w", err)
	}
	child, err := as.fork(m, l, prev)
	if err == nil {
		prev.Release()
	}
	return child, err
}

func (as *AddressSpace) fork(m HostMapper, l Layout, prev *AddressSpace) (*AddressSpace, error) {
	if l.Min%PageSize != 0 || l.Max%PageSize != 0 || l.Min >= l.Max {
		return nil, errf(unix.EINVAL, "fork: bad layout [%#x, %#x)", l.Min, l.Max)
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if err := as.usable(); err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	child := as.g.NewAddressSpace(m, l)
	for _, v := range as.vmas {
		if v.start < child.l.Min || v.end > child.l.Max || child.overlapsReserved(v.start, v.end) {
			return nil, errf(unix.EINVAL, "fork: mapping %#x-%#x %q does not fit the child's layout", v.start, v.end, v.name)
		}
	}

	// One pass: mark the parent's private pages copy-on-write (protecting on the host
	// those that could be written), and build the child's table and host maps.
	var pops, cops []HostOp
	frames := make([]Frame, 0, as.pt.pages)
	hot := as.hot.take()
	var copies []hotCopy
	child.vmas = make([]*vma, 0, len(as.vmas))
	for _, v := range as.vmas {
		c := *v
		c.holdSources()
		child.vmas = append(child.vmas, &c)
		shared := v.obj != nil
		as.pt.forEachPresentPtr(v.start, v.end, func(va uint64, p *pte) {
			if !shared && v.prot&ProtWrite != 0 && hot[va] {
				copies = append(copies, hotCopy{va, p.frame, hostProt(v.prot, pte{frame: p.frame})})
				return
			}
			if !shared && !p.cow() {
				p.flags |= pteCow
				if v.prot&ProtWrite != 0 {
					pops = appendRange(pops, OpProtect, va, hostProt(v.prot, *p))
				}
			}
			child.pt.setPTE(va, *p)
			frames = append(frames, p.frame)
			cops = appendMap(cops, va, p.frame, hostProt(v.prot, *p))
		})
	}
	as.g.refFrames(frames)
	if err := child.copyHot(copies, prev); err != nil {
		child.Release()
		return nil, fmt.Errorf("fork: %w", err)
	}
	child.hot.parent = &as.hot
	for _, c := range copies {
		cops = appendMap(cops, c.va, child.pt.get(c.va).frame, c.prot)
	}

	// The parent loses the write right before the child sees the frames: a parent write
	// that lands before the protect is a write from before the Fork.
	if err := as.apply(pops); err != nil {
		child.Release()
		return nil, fmt.Errorf("fork: protect the parent: %w", err)
	}
	child.mu.Lock()
	defer child.mu.Unlock()
	if prev != nil {
		cops = child.diffOps(prev)
	}
	if err := child.apply(cops); err != nil {
		return child, fmt.Errorf("fork: map the child: %w", err)
	}
	return child, nil
}

// diffOps returns the host ops that turn what prev (an address space the same host process held
// before) left mapped into what as maps: pages with the same frame and rights stay, others are
// mapped over, and prev's other pages are unmapped. as.mu is held.
func (as *AddressSpace) diffOps(prev *AddressSpace) []HostOp {
	prev.mu.Lock()
	defer prev.mu.Unlock()
	var unmaps, maps []HostOp
	for _, v := range prev.vmas {
		prev.pt.forEachPresentPtr(v.start, v.end, func(va uint64, p *pte) {
			if !as.pt.get(va).present() {
				unmaps = appendRange(unmaps, OpUnmap, va, 0)
			}
		})
	}
	for _, v := range as.vmas {
		as.pt.forEachPresentPtr(v.start, v.end, func(va uint64, p *pte) {
			prot := hostProt(v.prot, *p)
			if q := prev.pt.get(va); q.present() && q.frame == p.frame {
				if _, pv := prev.find(va); pv != nil && hostProt(pv.prot, q) == prot {
					return
				}
			}
			maps = appendMap(maps, va, p.frame, prot)
		})
	}
	return append(unmaps, maps...)
}

// cowAroundMax is the most pages a copy-on-write fault breaks at once. A host mmap costs
// ~10 µs however small, so a tenant writing its way through shared memory (a child
// filling a buffer after fork) is served in growing batches, like readahead: the window
// doubles while faults come in address order, and drops back to one page otherwise, so
// a child that writes a few pages and execs copies no more than it writes. A trap into the
// sandbox and back costs more than the host fault it replaces, so the batch must be large
// for a sequential writer to beat Linux: measured here for a child writing 64 MiB, 16 pages
// gave 19-24 µs a page (native 15-17), 64 pages 11.5-12.3 µs. At most 256 KiB is copied
// ahead of the writes.
const cowAroundMax = 64

// breakCow gives page va of v (copy-on-write entry p) back its write right, with the
// following copy-on-write pages of v when faults come in order (cowAroundMax): a frame
// that other holders still share is copied to a fresh one first; the last holder just
// takes it back. as.mu is held.
func (as *AddressSpace) breakCow(v *vma, va uint64, p pte) error {
	as.cowFaults++
	as.hot.note(va)
	if va == as.cowNext && as.cowWin > 0 {
		as.cowWin = min(2*as.cowWin, cowAroundMax)
	} else {
		as.cowWin = 1
	}
	err := as.breakCowRange(v, va, min(v.end, va+uint64(as.cowWin)<<pageShift))
	if errors.Is(err, ErrExhausted) && as.cowWin > 1 {
		as.cowWin = 1
		err = as.breakCowRange(v, va, va+PageSize)
	}
	if err != nil {
		return fmt.Errorf("copy-on-write at %#x: %w", va, err)
	}
	return nil
}

// breakCowRange breaks copy-on-write for the pages from s up to e or the first page that
// is not copy-on-write. as.mu is held.
func (as *AddressSpace) breakCowRange(v *vma, s, e uint64) error {
	type page struct {
		va   uint64
		p    pte
		copy bool
	}
	var pages []page
	ncopy := 0
	for va := s; va < e; va += PageSize {
		p := as.pt.get(va)
		if !p.present() || !p.cow() {
			break
		}
		// The count is stable while as.mu is held: only this address space could add a
		// reference to a frame only it holds (Fork, PinSlices), and it is busy here.
		c := as.g.Refs(p.frame) > 1
		if c {
			ncopy++
		}
		pages = append(pages, page{va, p, c})
	}
	var fresh []Frame
	if ncopy > 0 {
		runs, err := as.g.Alloc(ncopy)
		if err != nil {
			return err
		}
		for _, r := range runs {
			for i := 0; i < r.Count; i++ {
				fresh = append(fresh, r.First+Frame(i))
			}
		}
	}
	var ops []HostOp
	var old []Frame
	var cp []Run // copies pending, as runs of (fresh frame, count) with old[...] as sources
	k := 0
	for _, pg := range pages {
		if !pg.copy {
			as.pt.setPTE(pg.va, pte{frame: pg.p.frame})
			ops = appendRange(ops, OpProtect, pg.va, v.prot)
			continue
		}
		nf := fresh[k]
		k++
		// One host copy for each stretch that is contiguous on both sides.
		if n := len(cp); n > 0 && cp[n-1].First+Frame(cp[n-1].Count) == nf &&
			old[len(old)-1]+1 == pg.p.frame {
			cp[n-1].Count++
		} else {
			cp = append(cp, Run{First: nf, Count: 1})
		}
		as.pt.setPTE(pg.va, pte{frame: nf})
		ops = appendMap(ops, pg.va, nf, v.prot)
		old = append(old, pg.p.frame)
	}
	for i, j := 0, 0; i < len(cp); j, i = j+cp[i].Count, i+1 {
		as.g.copyFrames(cp[i].First, old[j], cp[i].Count)
	}
	as.cowNext = s + uint64(len(pages))<<pageShift
	if err := as.apply(ops); err != nil {
		as.leaked = append(as.leaked, old...)
		return err
	}
	as.unref(old)
	return nil
}

// CowFaults returns the number of copy-on-write breaks so far (by a tenant write fault
// through HandleFault or a sandbox write such as CopyOut), copies and take-backs alike.
func (as *AddressSpace) CowFaults() uint64 {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.cowFaults
}

// forkHot remembers the pages that a process and its children wrote soon after a fork of
// the process: a process that forks once usually forks again (a shell, a server), and its
// children write the same few pages (the stack around the fork call, the C library's data).
// The next Fork copies those pages for the child at once and leaves the parent's writable,
// so neither side takes a copy-on-write fault for them: a fault costs 15-25 µs on a
// paravirtualised host and a round trip to the sandbox, a page copy well under one.
type forkHot struct {
	mu     sync.Mutex
	pages  map[uint64]bool
	parent *forkHot // a child notes its writes in its parent's set too
}

// forkHotMax bounds the pages a Fork copies at once.
const forkHotMax = 16

// note records a copy-on-write break at va, here and in the parent's set.
func (h *forkHot) note(va uint64) {
	for _, x := range []*forkHot{h, h.parent} {
		if x == nil {
			continue
		}
		x.mu.Lock()
		if x.pages == nil {
			x.pages = make(map[uint64]bool)
		}
		if len(x.pages) < forkHotMax {
			x.pages[va] = true
		}
		x.mu.Unlock()
	}
}

// take returns a copy of the set. Pages stay in it: once copied at fork they no longer fault,
// so the set could not learn them again.
func (h *forkHot) take() map[uint64]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.pages)
}

// ForgetParent stops the address space from noting its writes for its parent (it runs
// another program now: execve).
func (as *AddressSpace) ForgetParent() {
	as.mu.Lock()
	as.hot.parent = nil
	as.mu.Unlock()
}

type hotCopy struct {
	va    uint64
	frame Frame
	prot  Prot
}

// copyHot gives the child its own copies of pages cs (its page table is still private to
// the caller). A page that prev, the address space the child's host process held before,
// had as its own at the same address with the same rights takes that frame back: the host
// maps it there already, so the child's host process needs no map for it (a host map is a
// round trip to the stub and ~10 µs of the host's time; the next child of a forking parent
// writes the pages its sibling wrote). child.mu need not be held.
func (child *AddressSpace) copyHot(cs []hotCopy, prev *AddressSpace) error {
	if len(cs) == 0 {
		return nil
	}
	fresh := cs
	if prev != nil {
		fresh = nil
		prev.mu.Lock()
		for _, c := range cs {
			if f, ok := prev.ownFrame(c.va, c.prot); ok {
				child.g.refFrames([]Frame{f})
				child.g.copyFrames(f, c.frame, 1)
				child.pt.setPTE(c.va, pte{frame: f})
				continue
			}
			fresh = append(fresh, c)
		}
		prev.mu.Unlock()
		if len(fresh) == 0 {
			return nil
		}
	}
	runs, err := child.g.Alloc(len(fresh))
	if err != nil {
		return err
	}
	i := 0
	for _, r := range runs {
		for k := 0; k < r.Count; k++ {
			f := r.First + Frame(k)
			child.g.copyFrames(f, fresh[i].frame, 1)
			child.pt.setPTE(fresh[i].va, pte{frame: f})
			i++
		}
	}
	return nil
}

// ownFrame returns the frame of page va when it is as's alone (a private page, no other holder)
// and the host maps it with rights prot. as.mu is held.
func (as *AddressSpace) ownFrame(va uint64, prot Prot) (Frame, bool) {
	p := as.pt.get(va)
	if !p.present() || p.cow() {
		return 0, false
	}
	_, v := as.find(va)
	if v == nil || v.obj != nil || hostProt(v.prot, p) != prot || as.g.Refs(p.frame) != 1 {
		return 0, false
	}
	return p.frame, true
}
