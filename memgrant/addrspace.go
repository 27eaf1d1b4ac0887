package memgrant

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// DefaultEagerLimit is the EagerLimit used when a Layout leaves it zero.
const DefaultEagerLimit = 64 << 20

// faultWindow is the span populated around a lazy fault: the 2 MiB-aligned block that
// holds the page, cut to the VMA. One host mmap for the lot costs far less than the
// page faults it saves.
const faultWindow = 1 << chunkShift

// stackWindow is the span populated around a lazy fault in a stack (MapGrowsDown, MapStack):
// a stack is touched from its top down, a little at a time, and a thread's rarely goes deep.
// With the 2 MiB window every thread's first touch of its stack filled 512 pages (a
// pthread_create took ~2 ms, 0.2 ms with a 64 KiB stack) and held them.
const stackWindow = 64 << 10

// Range is the address range [Start, End).
type Range struct{ Start, End uint64 }

// Layout says where a tenant address space may put mappings.
type Layout struct {
	Min, Max   uint64  // tenant addresses allowed: [Min, Max), page aligned
	MmapTop    uint64  // non-fixed mappings are placed top-down below this (0: Max)
	Reserved   []Range // ranges that belong to the stub (code, sysmsg, vdso): never mappable
	EagerLimit uint64  // a mapping up to this size is populated at once, larger ones lazily (0: DefaultEagerLimit)
}

// MapFlags modify Map.
type MapFlags uint32

// Map flags.
const (
	MapFixed          MapFlags = 1 << iota // place exactly at addr, replacing what is there
	MapFixedNoReplace                      // place exactly at addr, EEXIST if anything is there
	MapShared                              // shared anonymous memory: frames shared across Fork, never copy-on-write
	MapGrowsDown                           // a stack; growth is the kernel's job, the flag is kept
	MapNoReserve                           // populate on fault rather than at once (MAP_NORESERVE)
	MapStack                               // a thread's stack (MAP_STACK): lazy faults fill a stackWindow

	mapKnown = MapFixed | MapFixedNoReplace | MapShared | MapGrowsDown | MapNoReserve | MapStack
)

// FillFunc fills dst with the bytes at offset off of a mapping's source. Bytes it leaves
// untouched read as zero (fresh frames are zero), so a short file needs no special case.
type FillFunc = func(off uint64, dst []byte) error

// VMA describes one mapping, as VMAs returns it.
type VMA struct {
	Start, End uint64
	Prot       Prot
	Flags      MapFlags
	Name       string
	Lazy       bool   // populated on fault rather than at Map
	File       bool   // a private copy of data from a FillFunc
	FileOffset uint64 // for File: the source offset of Start
	Resident   uint64 // pages present now
}

type vma struct {
	start, end uint64
	prot       Prot
	flags      MapFlags
	name       string
	lazy       bool
	fill       FillFunc
	fillOff    uint64     // for fill: the source offset of start; for obj: the object offset of start
	obj        *shmObject // the frames of a shared anonymous mapping
	pages      *Pages     // frames that private pages share copy-on-write (MapPages)
}

// AddressSpace is one tenant address space: its VMAs, its software page table and the
// frames it holds, and the HostMapper that mirrors them into the stub. All methods are
// safe for concurrent use.
type AddressSpace struct {
	g *Grant
	m HostMapper
	l Layout

	mu        sync.Mutex
	vmas      []*vma // sorted, disjoint
	pt        pageTable
	faults    uint64
	cowFaults uint64
	hot       forkHot // pages written soon after a fork: copied at the next one
	cowNext   uint64  // the page after the last copy-on-write break, and the window
	cowWin    int     // that broke it: see breakCow
	broken    error   // the first failed Apply; the host state is unknown from then on
	leaked    []Frame // frames that may still be mapped in a broken stub; freed by Release
	released  bool

	batching    bool               // host ops are held for one batch (Batch)
	batch       []HostOp           // the held ops, in order
	batchFrames []Frame            // frames the held ops unmap, referenced until the batch is applied
	batchKept   map[uint64]hostPTE // the read-only pages the host mapped when the batch began
}

// hostPTE is what the host maps at a page: a frame with rights.
type hostPTE struct {
	frame Frame
	prot  Prot
}

// NewAddressSpace returns an empty address space whose host side is m. It panics on a
// layout that cannot hold a page (a bug of the caller).
func (g *Grant) NewAddressSpace(m HostMapper, l Layout) *AddressSpace {
	if l.Min%PageSize != 0 || l.Max%PageSize != 0 || l.Min >= l.Max {
		panic(fmt.Sprintf("memgrant: bad layout [%#x, %#x)", l.Min, l.Max))
	}
	if l.MmapTop == 0 || l.MmapTop > l.Max {
		l.MmapTop = l.Max
	}
	l.MmapTop &^= PageSize - 1
	if l.EagerLimit == 0 {
		l.EagerLimit = DefaultEagerLimit
	}
	l.Reserved = append([]Range(nil), l.Reserved...)
	for i, r := range l.Reserved {
		l.Reserved[i] = Range{Start: r.Start &^ (PageSize - 1), End: pageUp(r.End)}
	}
	as := &AddressSpace{g: g, m: m, l: l}
	as.pt.init()
	return as
}

// Grant returns the grant that the address space's frames come from.
func (as *AddressSpace) Grant() *Grant { return as.g }

// Layout returns the address space's layout, with defaults filled in.
func (as *AddressSpace) Layout() Layout { return as.l }

func pageUp(x uint64) uint64 { return (x + PageSize - 1) &^ (PageSize - 1) }

// usable returns why the address space takes no more changes, or nil. as.mu is held.
func (as *AddressSpace) usable() error {
	if as.released {
		return errf(unix.EIO, "address space released")
	}
	if as.broken != nil {
		return fmt.Errorf("memgrant: address space broken by host mapper (%v): %w", as.broken, unix.EIO)
	}
	return nil
}

// find returns the VMA that holds addr and its index, or the index of the first VMA
// above addr and nil.
func (as *AddressSpace) find(addr uint64) (int, *vma) {
	i := sort.Search(len(as.vmas), func(i int) bool { return as.vmas[i].end > addr })
	if i < len(as.vmas) && as.vmas[i].start <= addr {
		return i, as.vmas[i]
	}
	return i, nil
}

func (as *AddressSpace) overlapsVMA(s, e uint64) bool {
	i, _ := as.find(s)
	return i < len(as.vmas) && as.vmas[i].start < e
}

func (as *AddressSpace) overlapsReserved(s, e uint64) bool {
	for _, r := range as.l.Reserved {
		if r.Start < e && s < r.End {
			return true
		}
	}
	return false
}

// findFree finds room for length bytes: at hint if that is free, else the highest gap
// below MmapTop. as.mu is held.
func (as *AddressSpace) findFree(hint, length uint64) (uint64, error) {
	if hint != 0 {
		h := hint &^ (PageSize - 1)
		if h >= as.l.Min && h+length > h && h+length <= as.l.Max &&
			!as.overlapsVMA(h, h+length) && !as.overlapsReserved(h, h+length) {
			return h, nil
		}
	}
	end := as.l.MmapTop
	for end >= length && end-length >= as.l.Min {
		s := end - length
		next := end
		if i, _ := as.find(s); i < len(as.vmas) && as.vmas[i].start < end {
			next = as.vmas[i].start
		}
		for _, r := range as.l.Reserved {
			if r.Start < end && s < r.End && r.Start < next {
				next = r.Start
			}
		}
		if next == end {
			return s, nil
		}
		end = next
	}
	return 0, errf(unix.ENOMEM, "no room for %#x bytes below %#x", length, as.l.MmapTop)
}

// splitAt makes addr a VMA boundary if a VMA spans it. as.mu is held.
func (as *AddressSpace) splitAt(addr uint64) {
	i, v := as.find(addr)
	if v == nil || v.start == addr {
		return
	}
	r := *v
	r.start = addr
	r.fillOff += addr - v.start
	r.holdSources()
	v.end = addr
	as.vmas = append(as.vmas, nil)
	copy(as.vmas[i+2:], as.vmas[i+1:])
	as.vmas[i+1] = &r
}

// span splits the VMAs at s and e and returns the index range of those inside [s, e).
func (as *AddressSpace) span(s, e uint64) (int, int) {
	as.splitAt(s)
	as.splitAt(e)
	i, _ := as.find(s)
	j := i
	for j < len(as.vmas) && as.vmas[j].end <= e {
		j++
	}
	return i, j
}

// removeRange removes every VMA and page of [s, e) and returns the frames they held,
// still referenced: the caller unrefs them once the host no longer maps them.
func (as *AddressSpace) removeRange(s, e uint64) []Frame {
	i, j := as.span(s, e)
	if i == j {
		return nil
	}
	for _, v := range as.vmas[i:j] {
		as.dropVMA(v)
	}
	as.vmas = append(as.vmas[:i], as.vmas[j:]...)
	return as.pt.clearRange(s, e)
}

func (as *AddressSpace) insert(v *vma) int {
	i, _ := as.find(v.start)
	as.vmas = append(as.vmas, nil)
	copy(as.vmas[i+1:], as.vmas[i:])
	as.vmas[i] = v
	return i
}

// mergeable reports whether b can be folded into a, like Linux merges neighbouring
// anonymous VMAs with the same rights and flags (copies of file data are never merged:
// their sources cannot be compared; pieces of a shared object only where they follow
// each other in it).
func mergeable(a, b *vma) bool {
	return a.end == b.start && a.prot == b.prot && a.flags == b.flags && a.name == b.name &&
		a.lazy == b.lazy && a.fill == nil && b.fill == nil &&
		a.obj == b.obj && (a.obj == nil || a.fillOff+(a.end-a.start) == b.fillOff)
}

// merge folds together the mergeable neighbours among vmas[i-1 : j+1]. as.mu is held.
func (as *AddressSpace) merge(i, j int) {
	lo, hi := max(i-1, 0), min(j+1, len(as.vmas))
	out := as.vmas[:lo]
	for _, v := range as.vmas[lo:hi] {
		if n := len(out); n > lo && mergeable(out[n-1], v) {
			out[n-1].end = v.end
			as.dropVMA(v)
			continue
		}
		out = append(out, v)
	}
	as.vmas = append(out, as.vmas[hi:]...)
}

// allowed reports whether rights prot permit a read (any right, as on x86) or a write.
func allowed(prot Prot, write bool) bool {
	if write {
		return prot&ProtWrite != 0
	}
	return prot != ProtNone
}

// Map creates an anonymous private mapping (fill == nil: zeroed), a private copy of data
// (fill), or with MapShared a shared anonymous mapping (fill must be nil: file-backed
// shared mappings are not supported), and returns its address. Without MapFixed/MapFixedNoReplace, addr is a hint.
// Under MapFixed it replaces what is there, like Linux, but only once the new pages are
// ready: a failed Map leaves the old mapping intact.
func (as *AddressSpace) Map(addr, length uint64, prot Prot, flags MapFlags, name string, fill func(off uint64, dst []byte) error) (uint64, error) {
	return as.mapWith(addr, length, prot, flags, name, fill, nil)
}

// mapWith is Map, with pages (nil, or the source of fill) to share copy-on-write.
func (as *AddressSpace) mapWith(addr, length uint64, prot Prot, flags MapFlags, name string, fill FillFunc, pages *Pages) (uint64, error) {
	if prot&^protAll != 0 {
		return 0, errf(unix.EINVAL, "map %#x+%#x: bad rights %#x", addr, length, uint8(prot))
	}
	if flags&^mapKnown != 0 {
		return 0, errf(unix.EINVAL, "map %#x+%#x: unknown flags %#x", addr, length, uint32(flags))
	}
	if flags&MapShared != 0 && fill != nil {
		return 0, errf(unix.EINVAL, "map %#x+%#x: file-backed shared mappings are not supported", addr, length)
	}
	if length == 0 {
		return 0, errf(unix.EINVAL, "map %#x: zero length", addr)
	}
	if length > as.l.Max-as.l.Min {
		return 0, errf(unix.ENOMEM, "map %#x+%#x: longer than the address space", addr, length)
	}
	length = pageUp(length)

	as.mu.Lock()
	defer as.mu.Unlock()
	if err := as.usable(); err != nil {
		return 0, err
	}
	fixed := flags&(MapFixed|MapFixedNoReplace) != 0
	start := addr
	if fixed {
		if addr%PageSize != 0 {
			return 0, errf(unix.EINVAL, "map %#x+%#x: misaligned fixed address", addr, length)
		}
		if addr < as.l.Min || addr+length < addr || addr+length > as.l.Max {
			return 0, errf(unix.ENOMEM, "map %#x+%#x: outside [%#x, %#x)", addr, length, as.l.Min, as.l.Max)
		}
		if as.overlapsReserved(addr, addr+length) {
			if flags&MapFixedNoReplace != 0 {
				return 0, errf(unix.EEXIST, "map %#x+%#x: over a reserved range", addr, length)
			}
			return 0, errf(unix.ENOMEM, "map %#x+%#x: over a reserved range", addr, length)
		}
		if flags&MapFixedNoReplace != 0 && as.overlapsVMA(addr, addr+length) {
			return 0, errf(unix.EEXIST, "map %#x+%#x: over an existing mapping", addr, length)
		}
	} else {
		var err error
		if start, err = as.findFree(addr, length); err != nil {
			return 0, fmt.Errorf("map %#x bytes: %w", length, err)
		}
	}
	end := start + length
	v := &vma{start: start, end: end, prot: prot, flags: flags &^ (MapFixed | MapFixedNoReplace),
		name: name, lazy: length > as.l.EagerLimit || flags&MapNoReserve != 0, fill: fill, pages: pages}

	// The new pages first: if that fails, nothing has changed.
	var ops []HostOp
	var sharedVAs []uint64 // pages to share from v.pages, entered once the range is clear
	eager := !v.lazy && prot != ProtNone
	if flags&MapShared != 0 {
		v.obj = newShmObject()
	}
	if eager && v.obj != nil {
		// The object's frames first, then the page table's references to them.
		fs, err := v.obj.get(as.g, rangeIndexes(length))
		if err != nil {
			v.obj.drop(as.g)
			return 0, fmt.Errorf("map %#x+%#x: %w", start, length, err)
		}
		as.g.refFrames(fs)
		for i, f := range fs {
			ops = appendMap(ops, start+uint64(i)<<pageShift, f, prot)
		}
	} else if eager {
		shared, own := v.splitShared(rangePages(start, end))
		if len(own) > 0 {
			runs, err := as.g.Alloc(len(own))
			if err != nil {
				return 0, fmt.Errorf("map %#x+%#x: %w", start, length, err)
			}
			ops = planMaps(own, runs, prot)
			if err := as.fillOps(v, ops); err != nil {
				as.g.UnrefRuns(runs)
				return 0, err
			}
		}
		sharedVAs = shared
	}
	var old []Frame
	if fixed {
		old = as.removeRange(start, end)
		if len(old) > 0 && !eager {
			// Eager maps replace the host mapping of the whole range; others must clear it.
			ops = append([]HostOp{{Kind: OpUnmap, Addr: start, Length: length}}, ops...)
		}
	}
	if pages != nil {
		pages.hold()
	}
	i := as.insert(v)
	as.merge(i, i+1)
	as.commit(ops)
	ops = append(ops, as.sharePages(v, sharedVAs)...)
	if err := as.apply(ops); err != nil {
		as.leaked = append(as.leaked, old...)
		return 0, fmt.Errorf("map %#x+%#x: %w", start, length, err)
	}
	as.unref(old)
	return start, nil
}

// rangeIndexes returns the page indexes 0..length/PageSize-1.
func rangeIndexes(length uint64) []uint64 {
	idx := make([]uint64, length>>pageShift)
	for i := range idx {
		idx[i] = uint64(i)
	}
	return idx
}

// rangePages returns the page addresses of [s, e).
func rangePages(s, e uint64) []uint64 {
	vas := make([]uint64, 0, (e-s)>>pageShift)
	for va := s; va < e; va += PageSize {
		vas = append(vas, va)
	}
	return vas
}

// planMaps pairs sorted page addresses with frames from runs, in order, and returns one
// OpMap for each stretch that is contiguous both in addresses and in the file.
func planMaps(vas []uint64, runs []Run, prot Prot) []HostOp {
	var ops []HostOp
	ri, rk := 0, 0
	for _, va := range vas {
		f := runs[ri].First + Frame(rk)
		if rk++; rk == runs[ri].Count {
			ri, rk = ri+1, 0
		}
		if n := len(ops); n > 0 {
			last := &ops[n-1]
			if last.Addr+last.Length == va && last.Offset+last.Length == f.Offset() {
				last.Length += PageSize
				continue
			}
		}
		ops = append(ops, HostOp{Kind: OpMap, Addr: va, Length: PageSize, Prot: prot, Offset: f.Offset()})
	}
	return ops
}

// fillOps fills the frames of the OpMaps in ops from v's source, if it has one.
func (as *AddressSpace) fillOps(v *vma, ops []HostOp) error {
	if v.fill == nil {
		return nil
	}
	for _, op := range ops {
		if op.Kind != OpMap {
			continue
		}
		dst := as.g.runBytes(Frame(op.Offset>>pageShift), int(op.Length>>pageShift))
		// One call to fault the run into the sandbox's view instead of a fault a page
		// (15-25 µs each here).
		as.g.viewRun(Frame(op.Offset>>pageShift), int(op.Length>>pageShift), unix.MADV_POPULATE_WRITE)
		off := v.fillOff + (op.Addr - v.start)
		if err := v.fill(off, dst); err != nil {
			return fmt.Errorf("fill %#x+%#x of %q from offset %#x: %w", op.Addr, op.Length, v.name, off, err)
		}
	}
	return nil
}

// commit enters the OpMaps of ops into the page table. as.mu is held.
func (as *AddressSpace) commit(ops []HostOp) {
	for _, op := range ops {
		if op.Kind != OpMap {
			continue
		}
		f := Frame(op.Offset >> pageShift)
		for i := uint64(0); i < op.Length; i += PageSize {
			as.pt.set(op.Addr+i, f)
			f++
		}
	}
}

// populate allocates, fills and enters frames for the pages of [s, e) in v that are not
// present, and returns the OpMaps that mirror them. On error nothing has changed.
func (as *AddressSpace) populate(v *vma, s, e uint64) ([]HostOp, error) {
	var vas []uint64
	for va := s; va < e; va += PageSize {
		if !as.pt.get(va).present() {
			vas = append(vas, va)
		}
	}
	if len(vas) == 0 {
		return nil, nil
	}
	if v.obj != nil {
		ops, err := as.populateShared(v, vas)
		if err != nil {
			return nil, fmt.Errorf("populate %#x-%#x: %w", s, e, err)
		}
		return ops, nil
	}
	shared, own := v.splitShared(vas)
	var ops []HostOp
	if len(own) > 0 {
		runs, err := as.g.Alloc(len(own))
		if err != nil {
			return nil, fmt.Errorf("populate %#x-%#x: %w", s, e, err)
		}
		ops = planMaps(own, runs, v.prot)
		if err := as.fillOps(v, ops); err != nil {
			as.g.UnrefRuns(runs)
			return nil, err
		}
		as.commit(ops)
	}
	return append(ops, as.sharePages(v, shared)...), nil
}

// faultIn populates the fault window around page in v (falling back to the page alone
// when the grant is short) and mirrors it to the host. as.mu is held.
func (as *AddressSpace) faultIn(v *vma, page uint64) error {
	window := uint64(faultWindow)
	if v.flags&(MapGrowsDown|MapStack) != 0 {
		window = stackWindow
	}
	ws := max(v.start, page&^(window-1))
	we := min(v.end, (page&^(window-1))+window)
	ops, err := as.populate(v, ws, we)
	if errors.Is(err, ErrExhausted) && we-ws > PageSize {
		ops, err = as.populate(v, page, page+PageSize)
	}
	if err != nil {
		return err
	}
	as.faults++
	return as.apply(ops)
}

// apply checks ops against the layout and the page table, then hands them to the host
// mapper. An OpMap must cover pages this address space holds, frame for frame: Apply is
// never asked to map a frame the address space does not own. A mapper error breaks the
// address space. as.mu is held.
func (as *AddressSpace) apply(ops []HostOp) error {
	if len(ops) == 0 {
		return nil
	}
	for _, op := range ops {
		if err := as.check(op); err != nil {
			return err
		}
	}
	if as.batching {
		as.batch = append(as.batch, ops...)
		return nil
	}
	if err := as.m.Apply(ops); err != nil {
		as.broken = err
		return fmt.Errorf("host mapper: %w", err)
	}
	return nil
}

func (as *AddressSpace) check(op HostOp) error {
	end := op.Addr + op.Length
	if op.Addr%PageSize != 0 || op.Length == 0 || op.Length%PageSize != 0 || end < op.Addr ||
		op.Addr < as.l.Min || end > as.l.Max || as.overlapsReserved(op.Addr, end) {
		return errf(unix.EFAULT, "refused host op %v: outside the layout", op)
	}
	if op.Kind != OpMap {
		return nil
	}
	if op.Offset%PageSize != 0 || op.Offset > uint64(as.g.size) || op.Length > uint64(as.g.size)-op.Offset {
		return errf(unix.EFAULT, "refused host op %v: outside the grant", op)
	}
	f := Frame(op.Offset >> pageShift)
	for va := op.Addr; va < end; va += PageSize {
		if p := as.pt.get(va); !p.present() || p.frame != f+Frame((va-op.Addr)>>pageShift) {
			return errf(unix.EFAULT, "refused host op %v: page %#x not held", op, va)
		}
	}
	if !as.g.allocated(f, int(op.Length>>pageShift)) {
		return errf(unix.EFAULT, "refused host op %v: frames not allocated", op)
	}
	return nil
}

// Unmap removes every mapping in [addr, addr+length), splitting VMAs at the edges, and
// gives back the frames once the host no longer maps them.
func (as *AddressSpace) Unmap(addr, length uint64) error {
	if addr%PageSize != 0 || length == 0 {
		return errf(unix.EINVAL, "unmap %#x+%#x: misaligned or empty", addr, length)
	}
	length = pageUp(length)
	end := addr + length
	if end < addr || addr < as.l.Min || end > as.l.Max {
		return errf(unix.EINVAL, "unmap %#x+%#x: outside [%#x, %#x)", addr, length, as.l.Min, as.l.Max)
	}
	if as.overlapsReserved(addr, end) {
		return errf(unix.EINVAL, "unmap %#x+%#x: over a reserved range", addr, length)
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if err := as.usable(); err != nil {
		return err
	}
	runs := as.pt.presentRuns(addr, end)
	old := as.removeRange(addr, end)
	if len(runs) == 0 {
		return nil
	}
	// One host call from the first present page to the last: the holes between hold
	// nothing of the stub's (reserved ranges were refused above).
	s, e := runs[0].Start, runs[len(runs)-1].End
	if err := as.apply([]HostOp{{Kind: OpUnmap, Addr: s, Length: e - s}}); err != nil {
		as.leaked = append(as.leaked, old...)
		return fmt.Errorf("unmap %#x+%#x: %w", addr, length, err)
	}
	as.unref(old)
	return nil
}

// Protect sets the rights of [addr, addr+length), which must be wholly mapped (ENOMEM
// otherwise, like Linux). Giving rights to a PROT_NONE part of an eager mapping
// populates it.
func (as *AddressSpace) Protect(addr, length uint64, prot Prot) error {
	if addr%PageSize != 0 || prot&^protAll != 0 {
		return errf(unix.EINVAL, "protect %#x+%#x %v: misaligned or bad rights", addr, length, prot)
	}
	if length == 0 {
		return nil
	}
	length = pageUp(length)
	end := addr + length
	if end < addr {
		return errf(unix.ENOMEM, "protect %#x+%#x: wraps", addr, length)
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if err := as.usable(); err != nil {
		return err
	}
	for cur := addr; cur < end; {
		_, v := as.find(cur)
		if v == nil {
			return errf(unix.ENOMEM, "protect %#x+%#x: %#x is not mapped", addr, length, cur)
		}
		cur = v.end
	}
	i, j := as.span(addr, end)
	var ops []HostOp
	var perr error
	for _, v := range as.vmas[i:j] {
		if v.prot != prot {
			ops = append(ops, as.protectOps(v.start, v.end, prot)...)
			v.prot = prot
		}
		if !v.lazy && prot != ProtNone {
			mops, err := as.populate(v, v.start, v.end)
			if err != nil {
				perr = fmt.Errorf("protect %#x+%#x: %w", addr, length, err)
				break
			}
			ops = append(ops, mops...)
		}
	}
	as.merge(i, j)
	// Apply what was done even after a failure, so the host matches the table.
	if err := as.apply(ops); err != nil {
		return fmt.Errorf("protect %#x+%#x: %w", addr, length, err)
	}
	return perr
}

// HandleFault resolves a tenant fault at addr. It returns true when the tenant may retry
// (the page is now mapped), false when the fault is real (no VMA, or no right) and the
// tenant must get SIGSEGV. An error (grant exhausted, host mapper failure) comes with
// false. A write to a copy-on-write page gets its own copy of the frame, or the frame
// back with the write right when no one else holds it any more (CowFaults counts both).
func (as *AddressSpace) HandleFault(addr uint64, write bool) (bool, error) {
	as.mu.Lock()
	defer as.mu.Unlock()
	if err := as.usable(); err != nil {
		return false, err
	}
	page := addr &^ (PageSize - 1)
	_, v := as.find(page)
	if v == nil || !allowed(v.prot, write) {
		return false, nil
	}
	if p := as.pt.get(page); p.present() {
		if write && p.cow() {
			if err := as.breakCow(v, page, p); err != nil {
				return false, fmt.Errorf("fault at %#x: %w", addr, err)
			}
			return true, nil
		}
		// Another thread got here first, or the host lost the page: map it again,
		// which is harmless in the first case and repairs the second.
		op := HostOp{Kind: OpMap, Addr: page, Length: PageSize, Prot: hostProt(v.prot, p), Offset: p.frame.Offset()}
		if err := as.apply([]HostOp{op}); err != nil {
			return false, fmt.Errorf("fault at %#x: %w", addr, err)
		}
		return true, nil
	}
	if err := as.faultIn(v, page); err != nil {
		return false, fmt.Errorf("fault at %#x: %w", addr, err)
	}
	return true, nil
}

// walk calls fn for each piece of [addr, addr+length) in page order, with the frame and
// the bytes' offset and count in it, after checking rights (read, or write) like the
// kernel's access_ok plus page rights and populating lazy pages. as.mu is held.
func (as *AddressSpace) walk(addr, length uint64, write bool, fn func(f Frame, off, n uint64)) error {
	if length == 0 {
		return nil
	}
	end := addr + length
	if end < addr {
		return errf(unix.EFAULT, "access %#x+%#x: wraps", addr, length)
	}
	if err := as.usable(); err != nil {
		return err
	}
	var v *vma
	for cur := addr; cur < end; {
		if v == nil || cur >= v.end {
			if _, v = as.find(cur); v == nil {
				return errf(unix.EFAULT, "access %#x+%#x: %#x is not mapped", addr, length, cur)
			}
			if !allowed(v.prot, write) {
				return errf(unix.EFAULT, "access %#x+%#x: no %s right at %#x (%v)", addr, length, rightName(write), cur, v.prot)
			}
		}
		page := cur &^ (PageSize - 1)
		p := as.pt.get(page)
		if !p.present() {
			if err := as.faultIn(v, page); err != nil {
				return fmt.Errorf("access %#x+%#x: %w", addr, length, err)
			}
			p = as.pt.get(page)
		}
		if write && p.cow() {
			// The sandbox writes for the tenant: the tenant's own copy, as its write would.
			// Exactly the pages written: the sandbox knows them, no need to guess.
			as.cowFaults++
			as.hot.note(page)
			if err := as.breakCowRange(v, page, page+PageSize); err != nil {
				return fmt.Errorf("access %#x+%#x: copy-on-write: %w", addr, length, err)
			}
			p = as.pt.get(page)
		}
		off := cur - page
		n := min(PageSize-off, end-cur)
		fn(p.frame, off, n)
		cur += n
	}
	return nil
}

func rightName(write bool) string {
	if write {
		return "write"
	}
	return "read"
}

// CopyIn copies tenant memory at addr into dst. It needs a read right on every page.
// On EFAULT part of dst may have been filled.
func (as *AddressSpace) CopyIn(dst []byte, addr uint64) error {
	as.mu.Lock()
	defer as.mu.Unlock()
	if len(dst) >= bigCopy {
		// Pieces before a fault are copied too, as the small path does.
		runs, err := as.fileRuns(addr, uint64(len(dst)), false, nil)
		as.prefault(runs, unix.MADV_POPULATE_READ)
		for _, b := range as.g.views(runs) {
			dst = dst[copy(dst, b):]
		}
		return err
	}
	return as.walk(addr, uint64(len(dst)), false, func(f Frame, off, n uint64) {
		copy(dst[:n], as.g.FrameBytes(f)[off:])
		dst = dst[n:]
	})
}

// CopyOut copies src into tenant memory at addr. It needs a write right on every page.
// On EFAULT part of src may have been copied.
func (as *AddressSpace) CopyOut(addr uint64, src []byte) error {
	as.mu.Lock()
	defer as.mu.Unlock()
	if len(src) >= bigCopy {
		// Pieces before a fault are copied too, as the small path does.
		runs, err := as.fileRuns(addr, uint64(len(src)), true, nil)
		as.prefault(runs, unix.MADV_POPULATE_WRITE)
		for _, b := range as.g.views(runs) {
			src = src[copy(b, src):]
		}
		return err
	}
	return as.walk(addr, uint64(len(src)), true, func(f Frame, off, n uint64) {
		copy(as.g.FrameBytes(f)[off:], src[:n])
		src = src[n:]
	})
}

// bigCopy is the copy size from which CopyIn/CopyOut first fault the frames into the
// sandbox's own view with one madvise per run (once per frame allocation): the stub's
// mapping populated the frames, but the sandbox's view takes a fault a page (a write
// fault for each page, a read fault for each 16) unless told.
const bigCopy = 4 * PageSize

// prefault populates the sandbox's view of bufs. Best effort: a failure only means the
// copy takes the faults itself.
func (as *AddressSpace) prefault(runs []Range, advice int) {
	for _, r := range runs {
		first := Frame(r.Start >> pageShift)
		last := Frame((r.End - 1) >> pageShift)
		as.g.viewRun(first, int(last-first)+1, advice)
	}
}

// Slices returns the sandbox-side byte slices that cover [addr, addr+length), merged
// where frames follow each other, for zero-copy readv/writev into tenant memory.
// write=true requires the write right. The slices stay valid only until the range is
// next unmapped or replaced: the caller must keep the address space from changing that
// range while it uses them (or use PinSlices).
func (as *AddressSpace) Slices(addr, length uint64, write bool) ([][]byte, error) {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.slices(addr, length, write, nil)
}

// PinSlices is Slices with a reference taken on every frame covered, so the memory stays
// this tenant's own until release is called, whatever the address space does meanwhile.
func (as *AddressSpace) PinSlices(addr, length uint64, write bool) (bufs [][]byte, release func(), err error) {
	as.mu.Lock()
	defer as.mu.Unlock()
	var pinned []Frame
	bufs, err = as.slices(addr, length, write, func(f Frame) {
		as.g.Ref(f)
		pinned = append(pinned, f)
	})
	if err != nil {
		as.g.unrefFrames(pinned)
		return nil, nil, err
	}
	var once sync.Once
	return bufs, func() { once.Do(func() { as.g.unrefFrames(pinned) }) }, nil
}

func (as *AddressSpace) slices(addr, length uint64, write bool, pin func(Frame)) ([][]byte, error) {
	runs, err := as.fileRuns(addr, length, write, pin)
	if err != nil {
		return nil, err
	}
	return as.g.views(runs), nil
}

// fileRuns returns the memory-file ranges that back [addr, addr+length), merged where
// frames follow each other. as.mu is held.
func (as *AddressSpace) fileRuns(addr, length uint64, write bool, pin func(Frame)) ([]Range, error) {
	var out []Range
	err := as.walk(addr, length, write, func(f Frame, off, n uint64) {
		if pin != nil {
			pin(f)
		}
		o := f.Offset() + off
		if k := len(out); k > 0 && out[k-1].End == o {
			out[k-1].End += n
			return
		}
		out = append(out, Range{Start: o, End: o + n})
	})
	return out, err
}

// ReadString reads a NUL-terminated string at addr. The string and its NUL must fit in
// max bytes (ENAMETOOLONG otherwise); an unreadable byte before the NUL gives EFAULT.
func (as *AddressSpace) ReadString(addr uint64, max int) (string, error) {
	as.mu.Lock()
	defer as.mu.Unlock()
	var buf []byte
	for len(buf) < max {
		cur := addr + uint64(len(buf))
		if cur < addr {
			return "", errf(unix.EFAULT, "read string at %#x: wraps", addr)
		}
		n := min(PageSize-cur%PageSize, uint64(max-len(buf)))
		found := false
		err := as.walk(cur, n, false, func(f Frame, off, k uint64) {
			b := as.g.FrameBytes(f)[off : off+k]
			for i, c := range b {
				if c == 0 {
					buf = append(buf, b[:i]...)
					found = true
					return
				}
			}
			buf = append(buf, b...)
		})
		if err != nil {
			return "", fmt.Errorf("read string at %#x: %w", addr, err)
		}
		if found {
			return string(buf), nil
		}
	}
	return "", errf(unix.ENAMETOOLONG, "read string at %#x: no NUL in %d bytes", addr, max)
}

// VMAs returns a snapshot of the mappings, sorted by address.
func (as *AddressSpace) VMAs() []VMA {
	as.mu.Lock()
	defer as.mu.Unlock()
	out := make([]VMA, 0, len(as.vmas))
	for _, v := range as.vmas {
		var resident uint64
		as.pt.forEachPresent(v.start, v.end, func(uint64, pte) { resident++ })
		e := VMA{Start: v.start, End: v.end, Prot: v.prot, Flags: v.flags, Name: v.name,
			Lazy: v.lazy, Resident: resident}
		if v.fill != nil {
			e.File, e.FileOffset = true, v.fillOff
		}
		out = append(out, e)
	}
	return out
}

// Translate returns the frame mapped at addr, if the page is present.
func (as *AddressSpace) Translate(addr uint64) (Frame, bool) {
	as.mu.Lock()
	defer as.mu.Unlock()
	p := as.pt.get(addr &^ (PageSize - 1))
	return p.frame, p.present()
}

// SharedFrame returns the frame under addr when addr lies in shared anonymous memory (MapShared),
// which every address space mapping it reaches through the same frame; false otherwise, or when
// the page is not present.
func (as *AddressSpace) SharedFrame(addr uint64) (Frame, bool) {
	as.mu.Lock()
	defer as.mu.Unlock()
	if _, v := as.find(addr); v == nil || v.flags&MapShared == 0 {
		return 0, false
	}
	p := as.pt.get(addr &^ (PageSize - 1))
	return p.frame, p.present()
}

// ResidentBytes returns the bytes of the pages present in the address space.
func (as *AddressSpace) ResidentBytes() int64 {
	as.mu.Lock()
	defer as.mu.Unlock()
	return int64(as.pt.pages) << pageShift
}

// PeakResidentBytes returns the most bytes of pages the address space had present at once.
func (as *AddressSpace) PeakResidentBytes() int64 {
	as.mu.Lock()
	defer as.mu.Unlock()
	return int64(as.pt.peak) << pageShift
}

// Faults returns the number of on-demand populations done so far, by HandleFault or by a
// copy that met a lazy page. Reads after an eager Map take none.
func (as *AddressSpace) Faults() uint64 {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.faults
}

// Empty unmaps from the host everything the address space mapped there, in one batch, and then
// releases the address space: its host process can serve a new one. The host's own reserved
// ranges are not touched. On error the host may still map some frames: the caller must end the
// host process before the frames go back with Release.
func (as *AddressSpace) Empty() error {
	as.mu.Lock()
	if err := as.usable(); err != nil {
		as.mu.Unlock()
		return err
	}
	ops := make([]HostOp, 0, len(as.vmas))
	for _, v := range as.vmas {
		ops = append(ops, HostOp{Kind: OpUnmap, Addr: v.start, Length: v.end - v.start})
	}
	err := as.apply(ops)
	as.mu.Unlock()
	if err != nil {
		return fmt.Errorf("empty address space: %w", err)
	}
	as.Release()
	return nil
}

// Batch holds the address space's host operations from now until the returned flush applies
// them as one host batch: one round trip of the stub's control thread instead of one a call
// (execve's unmaps and its loader's maps took ~15 here, 50-250 µs each). Frames that held
// operations unmap stay referenced until then. Only for an address space whose tenant runs no
// code meanwhile: its host mappings lag its page table. flush reports a failed batch (the
// address space is broken then, as after any failed host operation).
//
// Read-only pages that the host maps at the start and that the batch leaves mapped the same (a
// program executed anew: its text and read-only data come from the same cached frames at the
// same place) are not touched on the host at all. Writable pages are left out: a page the
// tenant may write is never mapped anew to the frame it had.
func (as *AddressSpace) Batch() (flush func() error) {
	as.mu.Lock()
	as.batching = true
	as.batchKept = map[uint64]hostPTE{}
	for _, v := range as.vmas {
		if v.prot&ProtWrite != 0 {
			continue
		}
		as.pt.forEachPresentPtr(v.start, v.end, func(va uint64, p *pte) {
			as.batchKept[va] = hostPTE{p.frame, hostProt(v.prot, *p)}
		})
	}
	as.mu.Unlock()
	return func() error {
		as.mu.Lock()
		defer as.mu.Unlock()
		if !as.batching {
			return nil
		}
		ops, frames := withoutReplaced(as.batchWithoutKept()), as.batchFrames
		as.batching, as.batch, as.batchFrames, as.batchKept = false, nil, nil, nil
		if as.released {
			return errf(unix.EIO, "address space released")
		}
		if len(ops) > 0 {
			if err := as.m.Apply(ops); err != nil {
				as.broken = err
				as.leaked = append(as.leaked, frames...)
				return fmt.Errorf("host mapper: %w", err)
			}
		}
		as.g.unrefFrames(frames)
		return nil
	}
}

// batchWithoutKept returns the held ops less their parts on the read-only pages the host maps as
// the page table does again (batchKept): those stay mapped as they are. as.mu is held.
func (as *AddressSpace) batchWithoutKept() []HostOp {
	kept := map[uint64]bool{}
	for va, h := range as.batchKept {
		p := as.pt.get(va)
		if !p.present() || p.frame != h.frame {
			continue
		}
		if _, v := as.find(va); v != nil && hostProt(v.prot, p) == h.prot {
			kept[va] = true
		}
	}
	if len(kept) == 0 {
		return as.batch
	}
	var out []HostOp
	for _, op := range as.batch {
		if op.Kind == OpProtect {
			out = append(out, op)
			continue
		}
		// The op's runs of pages that are not kept.
		start := op.Addr
		for va := op.Addr; va <= op.Addr+op.Length; va += PageSize {
			if va < op.Addr+op.Length && !kept[va] {
				continue
			}
			if va > start {
				part := op
				part.Addr, part.Length = start, va-start
				if op.Kind == OpMap {
					part.Offset = op.Offset + (start - op.Addr)
				}
				out = append(out, part)
			}
			start = va + PageSize
		}
	}
	return out
}

// unref gives frames back once the host no longer maps them: now, or after the held batch.
// as.mu is held.
func (as *AddressSpace) unref(frames []Frame) {
	if as.batching {
		as.batchFrames = append(as.batchFrames, frames...)
		return
	}
	as.g.unrefFrames(frames)
}

// Release drops every frame of the address space (process exit). Call it only once the
// stub no longer maps them (it has exited, or its mappings were removed): Release issues
// no host op. The address space takes no more changes afterwards. Idempotent.
func (as *AddressSpace) Release() {
	as.mu.Lock()
	if as.released {
		as.mu.Unlock()
		return
	}
	as.released = true
	frames := as.pt.clearRange(0, ^uint64(0))
	frames = append(frames, as.leaked...)
	frames = append(frames, as.batchFrames...)
	as.leaked, as.batch, as.batchFrames = nil, nil, nil
	for _, v := range as.vmas {
		as.dropVMA(v)
	}
	as.vmas = nil
	as.mu.Unlock()
	as.g.unrefFrames(frames)
}
