package memgrant

import (
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Pages are frames of the grant that hold some contents once (a program file's pages, as
// one ELF segment maps them) for many mappings to share copy-on-write: a program that
// runs again maps the same frames instead of reading and copying its file anew. Pages hold
// one reference to each frame, given back when their creator has released them and no
// mapping made from them is left (a mapping may populate more of its pages later); every
// page table that maps a frame holds its own reference too.
type Pages struct {
	g        *Grant
	frames   []Frame
	released atomic.Bool
	mu       sync.Mutex
	users    int // the creator, until Release, and each VMA made from the pages
}

// NewPages allocates frames for length bytes and fills them once with fill (whose dst
// covers one run of frames at a time, as for Map).
func (g *Grant) NewPages(length uint64, fill FillFunc) (*Pages, error) {
	n := int(pageUp(length) >> pageShift)
	if n == 0 {
		return nil, errf(unix.EINVAL, "pages: zero length")
	}
	runs, err := g.Alloc(n)
	if err != nil {
		return nil, fmt.Errorf("pages of %#x bytes: %w", length, err)
	}
	p := &Pages{g: g, frames: make([]Frame, 0, n), users: 1}
	var off uint64
	for _, r := range runs {
		g.viewRun(r.First, r.Count, unix.MADV_POPULATE_WRITE)
		if err := fill(off, g.runBytes(r.First, r.Count)); err != nil {
			g.UnrefRuns(runs)
			return nil, fmt.Errorf("fill pages at %#x: %w", off, err)
		}
		for i := 0; i < r.Count; i++ {
			p.frames = append(p.frames, r.First+Frame(i))
		}
		off += uint64(r.Count) << pageShift
	}
	return p, nil
}

// Bytes is the memory the pages hold.
func (p *Pages) Bytes() int64 { return int64(len(p.frames)) << pageShift }

// Release is the creator letting go of the pages: their frames go back once no mapping
// made from them is left. Idempotent.
func (p *Pages) Release() {
	if !p.released.Swap(true) {
		p.drop()
	}
}

func (p *Pages) hold() {
	p.mu.Lock()
	p.users++
	p.mu.Unlock()
}

func (p *Pages) drop() {
	p.mu.Lock()
	p.users--
	last := p.users == 0
	p.mu.Unlock()
	if last {
		p.g.unrefFrames(p.frames)
	}
}

// holdSources counts a copy of a VMA as one more user of what its pages come from.
func (v *vma) holdSources() {
	if v.obj != nil {
		v.obj.hold()
	}
	if v.pages != nil {
		v.pages.hold()
	}
}

// frame returns the frame of page index i, if the pages reach that far.
func (p *Pages) frame(i uint64) (Frame, bool) {
	if i >= uint64(len(p.frames)) {
		return 0, false
	}
	return p.frames[i], true
}

// fill copies the pages' contents from off into dst (zeros past their end): the source of
// a mapping's pages that are not shared, such as those repopulated after MADV_DONTNEED.
func (p *Pages) fill(off uint64, dst []byte) error {
	for len(dst) > 0 {
		f, ok := p.frame(off >> pageShift)
		n := min(uint64(len(dst)), PageSize-off%PageSize)
		if ok {
			copy(dst[:n], p.g.FrameBytes(f)[off%PageSize:])
		} else {
			clear(dst[:n])
		}
		dst, off = dst[n:], off+n
	}
	return nil
}

// MapPages maps src privately at addr, like Map with a fill that copies src, except that
// in a mapping without the write right the pages src holds are mapped copy-on-write (a
// write after mprotect copies), and those past its end read as zero. A writable mapping
// gets copies of them at once. src must not be released before MapPages returns.
func (as *AddressSpace) MapPages(addr, length uint64, prot Prot, flags MapFlags, name string, src *Pages) (uint64, error) {
	if flags&MapShared != 0 {
		return 0, errf(unix.EINVAL, "map %#x+%#x: pages are mapped private", addr, length)
	}
	return as.mapWith(addr, length, prot, flags, name, src.fill, src)
}

// sharePages enters into v's page table the frames of v.pages for pages vas (a prefix of
// v's pages, in order, each within src), copy-on-write, with a reference each, and
// returns the host maps. as.mu is held.
func (as *AddressSpace) sharePages(v *vma, vas []uint64) []HostOp {
	var ops []HostOp
	fs := make([]Frame, 0, len(vas))
	for _, va := range vas {
		f, _ := v.pages.frame((v.fillOff + va - v.start) >> pageShift)
		p := pte{frame: f, flags: pteCow}
		as.pt.setPTE(va, p)
		fs = append(fs, f)
		ops = appendMap(ops, va, f, hostProt(v.prot, p))
	}
	as.g.refFrames(fs)
	return ops
}

// splitShared splits page addresses vas of v into those to share from v.pages and the
// rest. A writable mapping shares none: its pages are likely to be written (a program's
// data), and a copy now costs less than a copy-on-write fault later.
func (v *vma) splitShared(vas []uint64) (shared, own []uint64) {
	if v.pages == nil || v.prot&ProtWrite != 0 {
		return nil, vas
	}
	for _, va := range vas {
		if _, ok := v.pages.frame((v.fillOff + va - v.start) >> pageShift); ok {
			shared = append(shared, va)
		} else {
			own = append(own, va)
		}
	}
	return shared, own
}
