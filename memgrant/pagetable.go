package memgrant

import "slices"

// chunkShift is log2 of the span of one page-table chunk (2 MiB, 512 pages).
const chunkShift = 21

const chunkPages = 1 << (chunkShift - pageShift)

// pte is one software page-table entry.
type pte struct {
	frame Frame
	flags uint32
}

// pte flags.
const (
	ptePresent = 1 << iota
	// pteCow marks a private page whose frame may be shared with another address space
	// since a Fork: the host maps it without the write right, and a write copies it first.
	pteCow
)

func (p pte) present() bool { return p.flags&ptePresent != 0 }

func (p pte) cow() bool { return p.flags&pteCow != 0 }

// hostProt returns the rights the host mapping of page p gets in a VMA with rights prot:
// a copy-on-write page loses the write right (and keeps read, which write implies on x86).
func hostProt(prot Prot, p pte) Prot {
	if p.cow() && prot&ProtWrite != 0 {
		return prot&^ProtWrite | ProtRead
	}
	return prot
}

// ptChunk holds the entries of one 2 MiB-aligned span of tenant addresses.
type ptChunk struct {
	ptes    [chunkPages]pte
	present int
}

// pageTable is a two-level software page table: 2 MiB chunk → 512 entries. Chunks are
// made on first use and dropped when their last page goes.
type pageTable struct {
	chunks map[uint64]*ptChunk
	pages  int // present pages
	peak   int // the most pages present at once
}

func (pt *pageTable) init() { pt.chunks = make(map[uint64]*ptChunk) }

// get returns the entry for page address va.
func (pt *pageTable) get(va uint64) pte {
	c := pt.chunks[va>>chunkShift]
	if c == nil {
		return pte{}
	}
	return c.ptes[(va>>pageShift)%chunkPages]
}

// set makes va present with frame f.
func (pt *pageTable) set(va uint64, f Frame) { pt.setPTE(va, pte{frame: f, flags: ptePresent}) }

// setPTE makes va present with entry p (whose present flag is forced on).
func (pt *pageTable) setPTE(va uint64, p pte) {
	k := va >> chunkShift
	c := pt.chunks[k]
	if c == nil {
		c = new(ptChunk)
		pt.chunks[k] = c
	}
	e := &c.ptes[(va>>pageShift)%chunkPages]
	if !e.present() {
		c.present++
		pt.pages++
		pt.peak = max(pt.peak, pt.pages)
	}
	p.flags |= ptePresent
	*e = p
}

// clear makes va not present and returns what it held.
func (pt *pageTable) clear(va uint64) pte {
	k := va >> chunkShift
	c := pt.chunks[k]
	if c == nil {
		return pte{}
	}
	e := &c.ptes[(va>>pageShift)%chunkPages]
	old := *e
	if old.present() {
		*e = pte{}
		pt.pages--
		if c.present--; c.present == 0 {
			delete(pt.chunks, k)
		}
	}
	return old
}

// chunkKeys returns, in order, the keys of the chunks that may hold pages of [s, e). It
// walks the range when that is short and the map when the range is huge, so a sparse
// terabyte reservation costs what it holds, not what it spans.
func (pt *pageTable) chunkKeys(s, e uint64) []uint64 {
	if s >= e {
		return nil
	}
	first, last := s>>chunkShift, (e-1)>>chunkShift
	var keys []uint64
	if last-first < uint64(2*len(pt.chunks)+8) {
		for k := first; k <= last; k++ {
			if pt.chunks[k] != nil {
				keys = append(keys, k)
			}
		}
		return keys
	}
	for k := range pt.chunks {
		if k >= first && k <= last {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// forEachPresent calls fn for every present page of [s, e), in address order. fn must not
// change the page table.
func (pt *pageTable) forEachPresent(s, e uint64, fn func(va uint64, p pte)) {
	for _, k := range pt.chunkKeys(s, e) {
		c := pt.chunks[k]
		cs := k << chunkShift
		lo, hi := max(s, cs), min(e, cs+1<<chunkShift)
		for va := lo; va < hi; va += PageSize {
			if p := c.ptes[(va>>pageShift)%chunkPages]; p.present() {
				fn(va, p)
			}
		}
	}
}

// forEachPresentPtr is forEachPresent with a pointer to each entry, so fn may change an
// entry's frame or flags, though not whether it is present.
func (pt *pageTable) forEachPresentPtr(s, e uint64, fn func(va uint64, p *pte)) {
	for _, k := range pt.chunkKeys(s, e) {
		c := pt.chunks[k]
		cs := k << chunkShift
		lo, hi := max(s, cs), min(e, cs+1<<chunkShift)
		for va := lo; va < hi; va += PageSize {
			if p := &c.ptes[(va>>pageShift)%chunkPages]; p.present() {
				fn(va, p)
			}
		}
	}
}

// presentRuns returns the runs of present pages in [s, e) as address ranges.
func (pt *pageTable) presentRuns(s, e uint64) []Range {
	var rs []Range
	pt.forEachPresent(s, e, func(va uint64, _ pte) {
		if n := len(rs); n > 0 && rs[n-1].End == va {
			rs[n-1].End += PageSize
			return
		}
		rs = append(rs, Range{Start: va, End: va + PageSize})
	})
	return rs
}

// clearRange makes every page of [s, e) not present and returns the frames they held.
func (pt *pageTable) clearRange(s, e uint64) []Frame {
	var fs []Frame
	var vas []uint64
	pt.forEachPresent(s, e, func(va uint64, p pte) {
		fs = append(fs, p.frame)
		vas = append(vas, va)
	})
	for _, va := range vas {
		pt.clear(va)
	}
	return fs
}
