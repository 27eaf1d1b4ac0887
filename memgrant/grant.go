package memgrant

import (
	"fmt"
	"math/bits"
	"os"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// PageSize is the size of a frame and of a tenant page.
const PageSize = 4096

// pageShift is log2(PageSize).
const pageShift = 12

// blockFrames is the number of frames in a 2 MiB block: reference counts are kept per
// block and only for blocks that hold an allocated frame, so a large, mostly idle grant
// costs little bookkeeping.
const blockFrames = 512

// Prot is a set of access rights, with the same bits as PROT_*.
type Prot uint8

// Access rights.
const (
	ProtRead  Prot = 1
	ProtWrite Prot = 2
	ProtExec  Prot = 4
	// ProtNone is the empty set of rights.
	ProtNone Prot = 0

	protAll = ProtRead | ProtWrite | ProtExec
)

// String renders the rights the way /proc/PID/maps does (without the p/s column).
func (p Prot) String() string {
	b := []byte("---")
	if p&ProtRead != 0 {
		b[0] = 'r'
	}
	if p&ProtWrite != 0 {
		b[1] = 'w'
	}
	if p&ProtExec != 0 {
		b[2] = 'x'
	}
	return string(b)
}

// Frame is a frame number: its offset in the memory file is Frame*PageSize.
type Frame uint32

// Offset returns the frame's offset in the memory file.
func (f Frame) Offset() uint64 { return uint64(f) << pageShift }

// block is the record of one 2 MiB block of frames.
type block struct {
	refs [blockFrames]uint32
	// viewed marks frames known to be populated in the sandbox's own view, so that big
	// copies fault them in with one madvise only the first time. Cleared on free: a punch
	// removes the sandbox's page table entries too.
	viewed [blockFrames / 64]uint64
}

// Run is Count frames that follow each other in the memory file, from First.
type Run struct {
	First Frame
	Count int
}

// Grant is the memory of one sandbox: a sparse memfd cut into frames, mapped whole into
// the sandbox. All methods are safe for concurrent use.
type Grant struct {
	file    *os.File
	mem     []byte // the sandbox's own MAP_SHARED view of the whole file
	size    int64
	nframes uint32

	mu     sync.Mutex
	closed bool
	used   uint32   // frames allocated; UsedBytes is exact
	blocks []*block // nil for a block with no allocated frame
	bused  []uint16 // allocated frames per block; a block's record is dropped at 0
	free   freeExtents
	// Free frames kept in the host, zeroed by the sandbox instead of punched (warm.go).
	warm    []uint64 // a bit a frame
	warmN   uint32   // frames warm, or being zeroed to be
	warmMax uint32
}

// NewGrant creates the memory file, sized to size rounded down to a whole frame, and maps
// it into the sandbox. The file is sparse: no host memory is used until frames are filled.
func NewGrant(size int64) (*Grant, error) {
	size &^= PageSize - 1
	if size <= 0 {
		return nil, errf(unix.EINVAL, "new grant: size %d is less than one page", size)
	}
	if size>>pageShift > 1<<32-1 {
		return nil, errf(unix.EINVAL, "new grant: size %d has more frames than a Frame can number", size)
	}
	fd, err := unix.MemfdCreate("endo-grant", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("new grant: memfd_create: %w", err)
	}
	file := os.NewFile(uintptr(fd), "endo-grant")
	if err := unix.Ftruncate(fd, size); err != nil {
		file.Close()
		return nil, fmt.Errorf("new grant: ftruncate to %d: %w", size, err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("new grant: mmap %d bytes: %w", size, err)
	}
	n := uint32(size >> pageShift)
	nblocks := (n + blockFrames - 1) / blockFrames
	g := &Grant{
		file:    file,
		mem:     mem,
		size:    size,
		nframes: n,
		blocks:  make([]*block, nblocks),
		bused:   make([]uint16, nblocks),
	}
	g.free.init()
	g.free.insert(0, n)
	g.warm = make([]uint64, (n+63)/64)
	g.warmMax = min(warmFrames, n/warmShare)
	return g, nil
}

// File returns the memory file, to be passed to stubs. The Grant keeps ownership.
func (g *Grant) File() *os.File { return g.file }

// Size returns the size of the memory file in bytes.
func (g *Grant) Size() int64 { return g.size }

// Frames returns the number of frames in the grant.
func (g *Grant) Frames() int { return int(g.nframes) }

// UsedBytes returns the bytes of the frames allocated now (frames * PageSize).
func (g *Grant) UsedBytes() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int64(g.used) << pageShift
}

// Close unmaps the sandbox's view and closes the memory file. It is idempotent. No frame
// may be used after Close.
func (g *Grant) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	var errs []error
	if err := unix.Munmap(g.mem); err != nil {
		errs = append(errs, fmt.Errorf("close grant: munmap: %w", err))
	}
	g.mem = nil
	if err := g.file.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close grant: %w", err))
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// FrameBytes returns the sandbox's own 4 KiB view of frame f. It panics if f is not a
// frame of the grant.
func (g *Grant) FrameBytes(f Frame) []byte {
	if uint32(f) >= g.nframes {
		panic(fmt.Sprintf("memgrant: frame %d out of range (%d frames)", f, g.nframes))
	}
	off := f.Offset()
	return g.mem[off : off+PageSize : off+PageSize]
}

// runBytes returns the sandbox's view of n frames from f, which must be in range.
func (g *Grant) runBytes(f Frame, n int) []byte {
	off := f.Offset()
	end := off + uint64(n)<<pageShift
	return g.mem[off:end:end]
}

// views returns the sandbox's view of each memory-file range.
func (g *Grant) views(runs []Range) [][]byte {
	out := make([][]byte, len(runs))
	for i, r := range runs {
		out[i] = g.mem[r.Start:r.End:r.End]
	}
	return out
}

// Alloc allocates n frames, each with a reference count of 1, as few contiguous runs as
// it can. It is all or nothing: when fewer than n frames are free it returns ErrExhausted
// and changes nothing. Fresh frames read as zero.
func (g *Grant) Alloc(n int) ([]Run, error) {
	if n <= 0 {
		return nil, errf(unix.EINVAL, "alloc %d frames", n)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errf(unix.EBADF, "alloc %d frames: grant closed", n)
	}
	if uint64(n) > uint64(g.nframes-g.used) || g.free.total < uint64(n) {
		return nil, fmt.Errorf("alloc %d frames (%d free): %w", n, g.free.total, ErrExhausted)
	}
	runs := g.free.take(uint32(n))
	for _, r := range runs {
		g.markAllocated(r.First, r.Count)
		g.warmTaken(r)
	}
	g.used += uint32(n)
	return runs, nil
}

// markAllocated sets the reference count of n free frames from f to 1. g.mu is held.
func (g *Grant) markAllocated(f Frame, n int) {
	for n > 0 {
		b := uint32(f) / blockFrames
		i := uint32(f) % blockFrames
		k := min(uint32(n), blockFrames-i)
		blk := g.blocks[b]
		if blk == nil {
			blk = new(block)
			g.blocks[b] = blk
		}
		for j := i; j < i+k; j++ {
			blk.refs[j] = 1
		}
		g.bused[b] += uint16(k)
		f += Frame(k)
		n -= int(k)
	}
}

// refp returns a pointer to frame f's reference count, or nil if f is free or out of
// range. g.mu is held.
func (g *Grant) refp(f Frame) *uint32 {
	if uint32(f) >= g.nframes {
		return nil
	}
	blk := g.blocks[uint32(f)/blockFrames]
	if blk == nil {
		return nil
	}
	r := &blk.refs[uint32(f)%blockFrames]
	if *r == 0 {
		return nil
	}
	return r
}

// Refs returns frame f's reference count (0: free).
func (g *Grant) Refs(f Frame) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.refp(f); r != nil {
		return int(*r)
	}
	return 0
}

// Ref adds a reference to allocated frame f. Referencing a free frame is a bug in the
// trusted core and panics.
func (g *Grant) Ref(f Frame) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.refp(f)
	if r == nil {
		panic(fmt.Sprintf("memgrant: ref of free frame %d", f))
	}
	if *r == ^uint32(0) {
		panic(fmt.Sprintf("memgrant: reference count of frame %d overflows", f))
	}
	*r++
}

// Unref drops a reference to frame f; at zero the frame is punched back to the host and
// becomes free. Dropping a reference to a free frame is a bug and panics.
func (g *Grant) Unref(f Frame) {
	g.unrefFrames([]Frame{f})
}

// UnrefRuns drops one reference to every frame of runs, punching freed frames back to the
// host with one call per contiguous run.
func (g *Grant) UnrefRuns(runs []Run) {
	var fs []Frame
	for _, r := range runs {
		for i := 0; i < r.Count; i++ {
			fs = append(fs, r.First+Frame(i))
		}
	}
	g.unrefFrames(fs)
}

// allocated reports whether every frame of [f, f+n) is allocated.
func (g *Grant) allocated(f Frame, n int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := 0; i < n; i++ {
		if g.refp(f+Frame(i)) == nil {
			return false
		}
	}
	return true
}

// unrefFrames drops one reference from each frame in fs (fs may be reordered). Frames
// that reach zero are zeroed (warm) or punched outside the lock, then returned to the free
// pool: a frame is never allocatable before that, so fresh frames always read as zero.
func (g *Grant) unrefFrames(fs []Frame) {
	if len(fs) == 0 {
		return
	}
	g.mu.Lock()
	freed := fs[:0:0]
	for _, f := range fs {
		r := g.refp(f)
		if r == nil {
			g.mu.Unlock()
			panic(fmt.Sprintf("memgrant: unref of free frame %d", f))
		}
		*r--
		if *r == 0 {
			freed = append(freed, f)
		}
	}
	closed := g.closed
	g.mu.Unlock()
	if len(freed) == 0 {
		return
	}
	runs := coalesce(freed)
	var warm []bool
	if !closed {
		warm = g.cool(runs)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, r := range runs {
		g.markFree(r.First, r.Count)
		if warm != nil && warm[i] {
			g.setWarm(r)
		}
		g.free.insert(uint32(r.First), uint32(r.Count))
	}
	g.used -= uint32(len(freed))
}

// viewRun makes sure the sandbox's view of the n allocated frames from f is populated,
// with one madvise(advice) unless every frame is known to be populated already.
// Best effort: on failure the sandbox simply takes the faults when it touches them.
func (g *Grant) viewRun(f Frame, n int, advice int) {
	g.mu.Lock()
	all := true
	for i := 0; i < n && all; i++ {
		x := uint32(f) + uint32(i)
		blk := g.blocks[x/blockFrames]
		j := x % blockFrames
		all = blk != nil && blk.viewed[j/64]&(1<<(j%64)) != 0
	}
	g.mu.Unlock()
	if all {
		return
	}
	if unix.Madvise(g.runBytes(f, n), advice) != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := 0; i < n; i++ {
		x := uint32(f) + uint32(i)
		if blk := g.blocks[x/blockFrames]; blk != nil {
			j := x % blockFrames
			blk.viewed[j/64] |= 1 << (j % 64)
		}
	}
}

// punch gives the run's memory back to the host. If the host refuses, the frames are
// zeroed by hand so that the next owner never sees the last owner's data.
func (g *Grant) punch(r Run) {
	off := int64(r.First.Offset())
	n := int64(r.Count) << pageShift
	err := unix.Fallocate(int(g.file.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err != nil {
		clear(g.runBytes(r.First, r.Count))
	}
}

// markFree drops the bookkeeping of n frames from f whose counts reached zero. g.mu is held.
func (g *Grant) markFree(f Frame, n int) {
	for n > 0 {
		b := uint32(f) / blockFrames
		i := uint32(f) % blockFrames
		k := min(uint32(n), blockFrames-i)
		g.bused[b] -= uint16(k)
		if g.bused[b] == 0 {
			g.blocks[b] = nil
		} else {
			blk := g.blocks[b]
			for j := i; j < i+k; j++ {
				blk.viewed[j/64] &^= 1 << (j % 64)
			}
		}
		f += Frame(k)
		n -= int(k)
	}
}

// coalesce sorts fs and returns it as contiguous runs.
func coalesce(fs []Frame) []Run {
	slices.Sort(fs)
	var runs []Run
	for _, f := range fs {
		if n := len(runs); n > 0 && runs[n-1].First+Frame(runs[n-1].Count) == f {
			runs[n-1].Count++
			continue
		}
		runs = append(runs, Run{First: f, Count: 1})
	}
	return runs
}

// freeExtents is the set of free frame ranges, coalesced, indexed by start and by end for
// merging and bucketed by floor(log2(length)) to find a fitting range in O(1).
type freeExtents struct {
	byStart map[uint32]*extent
	byEnd   map[uint32]*extent
	buckets [33][]*extent
	total   uint64
}

type extent struct {
	start, n uint32
	pos      int // index in its bucket
}

func (fe *freeExtents) init() {
	fe.byStart = make(map[uint32]*extent)
	fe.byEnd = make(map[uint32]*extent)
}

func bucketOf(n uint32) int { return bits.Len32(n) - 1 }

func (fe *freeExtents) add(start, n uint32) {
	e := &extent{start: start, n: n}
	b := bucketOf(n)
	e.pos = len(fe.buckets[b])
	fe.buckets[b] = append(fe.buckets[b], e)
	fe.byStart[start] = e
	fe.byEnd[start+n] = e
	fe.total += uint64(n)
}

func (fe *freeExtents) remove(e *extent) {
	b := bucketOf(e.n)
	s := fe.buckets[b]
	last := s[len(s)-1]
	s[e.pos] = last
	last.pos = e.pos
	s[len(s)-1] = nil
	fe.buckets[b] = s[:len(s)-1]
	delete(fe.byStart, e.start)
	delete(fe.byEnd, e.start+e.n)
	fe.total -= uint64(e.n)
}

// insert returns [start, start+n) to the set, merging it with free neighbours.
func (fe *freeExtents) insert(start, n uint32) {
	if l := fe.byEnd[start]; l != nil {
		fe.remove(l)
		start, n = l.start, n+l.n
	}
	if r := fe.byStart[start+n]; r != nil {
		fe.remove(r)
		n += r.n
	}
	fe.add(start, n)
}

// take removes n frames (n <= total) as few runs as it can: one range that fits if there
// is one (preferring the smallest size class, so small requests fill small holes and
// large ranges stay whole), else the largest ranges first.
func (fe *freeExtents) take(n uint32) []Run {
	if e := fe.fit(n); e != nil {
		fe.remove(e)
		if e.n > n {
			fe.add(e.start+n, e.n-n)
		}
		return []Run{{First: Frame(e.start), Count: int(n)}}
	}
	var runs []Run
	for n > 0 {
		var e *extent
		for b := len(fe.buckets) - 1; b >= 0; b-- {
			if s := fe.buckets[b]; len(s) > 0 {
				e = s[len(s)-1]
				break
			}
		}
		fe.remove(e)
		k := min(n, e.n)
		if e.n > k {
			fe.add(e.start+k, e.n-k)
		}
		runs = append(runs, Run{First: Frame(e.start), Count: int(k)})
		n -= k
	}
	return runs
}

// fit finds a free range of at least n frames, or nil.
func (fe *freeExtents) fit(n uint32) *extent {
	b := bucketOf(n)
	// The bucket of n itself holds lengths in [2^b, 2^(b+1)): look at a few of them.
	s := fe.buckets[b]
	for i := len(s) - 1; i >= 0 && i >= len(s)-16; i-- {
		if s[i].n >= n {
			return s[i]
		}
	}
	for k := b + 1; k < len(fe.buckets); k++ {
		if s := fe.buckets[k]; len(s) > 0 {
			return s[len(s)-1]
		}
	}
	return nil
}

// refFrames adds one reference to each frame of fs under one lock. Referencing a free
// frame is a bug in the trusted core and panics.
func (g *Grant) refFrames(fs []Frame) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, f := range fs {
		r := g.refp(f)
		if r == nil {
			panic(fmt.Sprintf("memgrant: ref of free frame %d", f))
		}
		if *r == ^uint32(0) {
			panic(fmt.Sprintf("memgrant: reference count of frame %d overflows", f))
		}
		*r++
	}
}

// copyFrames copies n frames from src to dst (runs that do not overlap). It asks the
// host to copy inside the memory file first: that touches neither side through the
// sandbox's view, which would cost a page fault a page on each side (15-25 µs apiece
// here). memcpy through the view is the fallback.
func (g *Grant) copyFrames(dst, src Frame, n int) {
	roff, woff := int64(src.Offset()), int64(dst.Offset())
	size := n << pageShift
	for done := 0; done < size; {
		k, err := unix.CopyFileRange(int(g.file.Fd()), &roff, int(g.file.Fd()), &woff, size-done, 0)
		if err != nil || k <= 0 {
			copy(g.runBytes(dst, n)[done:], g.runBytes(src, n)[done:])
			return
		}
		done += k
	}
}
