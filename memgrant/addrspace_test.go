package memgrant

import (
	"bytes"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

type testAS struct {
	g  *Grant
	lm *LocalMapper
	as *AddressSpace
}

// newTestAS builds a grant, a local region of regionSize and an address space over the
// whole region, released and closed at the end of the test.
func newTestAS(t testing.TB, grantSize int64, regionSize uint64, l Layout) testAS {
	t.Helper()
	g := newGrant(t, grantSize)
	lm, err := NewLocalMapper(g, regionSize)
	require.NoError(t, err)
	if l.Min == 0 {
		l.Min = lm.Base()
	}
	if l.Max == 0 {
		l.Max = lm.Base() + lm.Size()
	}
	as := g.NewAddressSpace(lm, l)
	t.Cleanup(func() {
		as.Release()
		require.NoError(t, lm.Close())
	})
	return testAS{g: g, lm: lm, as: as}
}

// local returns this process's view of tenant memory, as the tenant would touch it.
func (x testAS) local(t testing.TB, addr, n uint64) []byte {
	t.Helper()
	b, err := x.lm.Bytes(addr, n)
	require.NoError(t, err)
	return b
}

func pattern(off uint64, dst []byte) error {
	for i := range dst {
		dst[i] = byte((off + uint64(i)) * 7 >> 3)
	}
	return nil
}

func patternAt(off uint64) byte { return byte(off * 7 >> 3) }

func threadMinflt(t testing.TB) int64 {
	var ru unix.Rusage
	require.NoError(t, unix.Getrusage(unix.RUSAGE_THREAD, &ru))
	return ru.Minflt
}

func TestMapEagerTakesNoFault(t *testing.T) {
	const size = 16 << 20
	x := newTestAS(t, 64<<20, 64<<20, Layout{EagerLimit: 32 << 20})
	addr, err := x.as.Map(0, size, ProtRead|ProtWrite, 0, "heap", pattern)
	require.NoError(t, err)
	require.Equal(t, int64(size), x.g.UsedBytes())
	calls, ops := x.lm.Stats()
	require.Equal(t, uint64(1), calls)
	require.Equal(t, uint64(1), ops, "one host mmap for one contiguous run")

	// Data written by the sandbox after mapping is seen by the tenant too.
	require.NoError(t, x.as.CopyOut(addr+size-5, []byte("hello")))

	mem := x.local(t, addr, size)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := threadMinflt(t)
	var bad uint64
	for off := uint64(0); off < size; off += PageSize {
		if mem[off] != patternAt(off) {
			bad++
		}
		mem[off+1] = 0xEE // writes take no fault either
	}
	faults := threadMinflt(t) - before
	require.Zero(t, bad, "tenant sees the filled data")
	require.LessOrEqual(t, faults, int64(faultSlack), "touching %d eagerly mapped pages took %d faults", size/PageSize, faults)
	require.Equal(t, "hello", string(mem[size-5:]))
	require.Zero(t, x.as.Faults())

	// And what the tenant wrote is what the sandbox reads.
	got := make([]byte, 2)
	require.NoError(t, x.as.CopyIn(got, addr+PageSize))
	require.Equal(t, []byte{patternAt(PageSize), 0xEE}, got)
	t.Logf("touching %d pages after an eager map: %d minor faults", size/PageSize, faults)
}

func TestMapFixedReplacesPart(t *testing.T) {
	x := newTestAS(t, 16<<20, 16<<20, Layout{})
	addr, err := x.as.Map(0, 8*PageSize, ProtRead|ProtWrite, 0, "a", pattern)
	require.NoError(t, err)
	mid := addr + 3*PageSize
	zeros := func(off uint64, dst []byte) error {
		for i := range dst {
			dst[i] = 'z'
		}
		return nil
	}
	got, err := x.as.Map(mid, 2*PageSize, ProtRead, MapFixed, "b", zeros)
	require.NoError(t, err)
	require.Equal(t, mid, got)
	require.Equal(t, int64(8*PageSize), x.g.UsedBytes(), "the replaced frames were given back")

	vmas := x.as.VMAs()
	require.Len(t, vmas, 3)
	require.Equal(t, VMA{Start: addr, End: mid, Prot: ProtRead | ProtWrite, Name: "a", File: true, Resident: 3}, vmas[0])
	require.Equal(t, VMA{Start: mid, End: mid + 2*PageSize, Prot: ProtRead, Name: "b", File: true, Resident: 2}, vmas[1])
	require.Equal(t, VMA{Start: mid + 2*PageSize, End: addr + 8*PageSize, Prot: ProtRead | ProtWrite, Name: "a",
		File: true, FileOffset: 5 * PageSize, Resident: 3}, vmas[2])

	mem := x.local(t, addr, 8*PageSize)
	require.Equal(t, patternAt(3*PageSize-1), mem[3*PageSize-1])
	require.Equal(t, byte('z'), mem[3*PageSize])
	require.Equal(t, byte('z'), mem[5*PageSize-1])
	require.Equal(t, patternAt(5*PageSize), mem[5*PageSize])

	require.ErrorIs(t, x.as.CopyOut(mid, []byte{1}), unix.EFAULT, "the new part is read-only")

	_, err = x.as.Map(addr, PageSize, ProtRead, MapFixedNoReplace, "c", nil)
	require.ErrorIs(t, err, unix.EEXIST)
	_, err = x.as.Map(addr+1, PageSize, ProtRead, MapFixed, "c", nil)
	require.ErrorIs(t, err, unix.EINVAL)
	require.Len(t, x.as.VMAs(), 3, "failed maps change nothing")
}

func TestMapFixedLazyOverEagerClearsHost(t *testing.T) {
	x := newTestAS(t, 16<<20, 16<<20, Layout{EagerLimit: 4 * PageSize})
	addr, err := x.as.Map(x.lm.Base(), 4*PageSize, ProtRead|ProtWrite, 0, "a", pattern)
	require.NoError(t, err)
	require.Equal(t, x.lm.Base(), addr)
	// A lazy mapping over it: the old host pages must go, and the frames with them.
	_, err = x.as.Map(addr, 8*PageSize, ProtRead|ProtWrite, MapFixed, "b", nil)
	require.NoError(t, err)
	require.Zero(t, x.g.UsedBytes())
	_, present := x.as.Translate(addr)
	require.False(t, present)
	ok, err := x.as.HandleFault(addr+PageSize, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, byte(0), x.local(t, addr, PageSize)[0], "the new mapping is zeroed")
}

func TestUnmapMiddleSplits(t *testing.T) {
	x := newTestAS(t, 16<<20, 16<<20, Layout{})
	addr, err := x.as.Map(0, 8*PageSize, ProtRead|ProtWrite, 0, "a", pattern)
	require.NoError(t, err)
	require.NoError(t, x.as.Unmap(addr+2*PageSize, 3*PageSize))
	require.Equal(t, int64(5*PageSize), x.g.UsedBytes())

	vmas := x.as.VMAs()
	require.Len(t, vmas, 2)
	require.Equal(t, addr+2*PageSize, vmas[0].End)
	require.Equal(t, addr+5*PageSize, vmas[1].Start)
	require.Equal(t, uint64(5*PageSize), vmas[1].FileOffset)

	buf := make([]byte, 10)
	require.ErrorIs(t, x.as.CopyIn(buf, addr+3*PageSize), unix.EFAULT)
	require.ErrorIs(t, x.as.CopyIn(buf, addr+2*PageSize-5), unix.EFAULT, "a copy running into the hole fails")
	require.NoError(t, x.as.CopyIn(buf, addr+5*PageSize))
	require.Equal(t, patternAt(5*PageSize), buf[0])
	require.Equal(t, patternAt(7*PageSize), x.local(t, addr, 8*PageSize)[7*PageSize])

	// Unmapping nothing is fine; bad arguments are EINVAL.
	require.NoError(t, x.as.Unmap(addr+3*PageSize, PageSize))
	require.ErrorIs(t, x.as.Unmap(addr+1, PageSize), unix.EINVAL)
	require.ErrorIs(t, x.as.Unmap(addr, 0), unix.EINVAL)

	// Unmapping a range wider than everything frees all.
	require.NoError(t, x.as.Unmap(x.lm.Base(), x.lm.Size()))
	require.Empty(t, x.as.VMAs())
	require.Zero(t, x.g.UsedBytes())
}

func TestProtectSplitsAndPopulates(t *testing.T) {
	x := newTestAS(t, 16<<20, 16<<20, Layout{})
	addr, err := x.as.Map(0, 8*PageSize, ProtRead|ProtWrite, 0, "a", nil)
	require.NoError(t, err)
	require.NoError(t, x.as.Protect(addr+3*PageSize, 2*PageSize, ProtRead))
	vmas := x.as.VMAs()
	require.Len(t, vmas, 3)
	require.Equal(t, ProtRead, vmas[1].Prot)
	require.Equal(t, ProtRead|ProtWrite, vmas[2].Prot)

	require.ErrorIs(t, x.as.CopyOut(addr+3*PageSize-1, []byte{1, 2}), unix.EFAULT)
	require.NoError(t, x.as.CopyOut(addr+5*PageSize, []byte{1, 2}))
	buf := make([]byte, 3)
	require.NoError(t, x.as.CopyIn(buf, addr+3*PageSize))
	require.Equal(t, byte(0), x.local(t, addr, 8*PageSize)[4*PageSize], "read-only pages stay readable")

	ok, err := x.as.HandleFault(addr+3*PageSize, true)
	require.NoError(t, err)
	require.False(t, ok, "a write to a read-only page is a real fault")
	ok, err = x.as.HandleFault(addr+3*PageSize, false)
	require.NoError(t, err)
	require.True(t, ok)

	require.ErrorIs(t, x.as.Protect(addr+7*PageSize, 2*PageSize, ProtRead), unix.ENOMEM, "range runs past the mapping")
	require.ErrorIs(t, x.as.Protect(addr+1, PageSize, ProtRead), unix.EINVAL)

	// PROT_NONE eager mappings take no frame until they get rights.
	used := x.g.UsedBytes()
	none, err := x.as.Map(0, 4*PageSize, ProtNone, 0, "guard", nil)
	require.NoError(t, err)
	require.Equal(t, used, x.g.UsedBytes())
	ok, err = x.as.HandleFault(none, false)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, x.as.Protect(none+PageSize, PageSize, ProtRead|ProtWrite))
	require.Equal(t, used+PageSize, x.g.UsedBytes())
	require.NoError(t, x.as.CopyOut(none+PageSize, []byte("x")))
	require.Equal(t, byte('x'), x.local(t, none, 4*PageSize)[PageSize])

	// Taking rights away keeps the frames; the data survives a round trip.
	require.NoError(t, x.as.Protect(none+PageSize, PageSize, ProtNone))
	require.Equal(t, used+PageSize, x.g.UsedBytes())
	require.ErrorIs(t, x.as.CopyIn(buf[:1], none+PageSize), unix.EFAULT)
	require.NoError(t, x.as.Protect(none+PageSize, PageSize, ProtRead))
	require.NoError(t, x.as.CopyIn(buf[:1], none+PageSize))
	require.Equal(t, byte('x'), buf[0])
}

func TestCopyAcrossPages(t *testing.T) {
	x := newTestAS(t, 16<<20, 16<<20, Layout{})
	addr, err := x.as.Map(0, 4*PageSize, ProtRead|ProtWrite, 0, "a", nil)
	require.NoError(t, err)
	src := make([]byte, 2*PageSize+100)
	for i := range src {
		src[i] = byte(i*31 + 7)
	}
	at := addr + PageSize - 50
	require.NoError(t, x.as.CopyOut(at, src))
	dst := make([]byte, len(src))
	require.NoError(t, x.as.CopyIn(dst, at))
	require.Equal(t, src, dst)
	require.True(t, bytes.Equal(src, x.local(t, at, uint64(len(src)))), "the tenant sees the copy")

	require.ErrorIs(t, x.as.CopyOut(addr+4*PageSize-10, make([]byte, 20)), unix.EFAULT, "past the end")
	require.ErrorIs(t, x.as.CopyIn(make([]byte, 8), ^uint64(0)-3), unix.EFAULT, "wraps")
	require.ErrorIs(t, x.as.CopyIn(make([]byte, 8), 0), unix.EFAULT, "outside the layout")
	require.NoError(t, x.as.CopyIn(nil, 0), "an empty copy checks nothing")

	ro, err := x.as.Map(0, PageSize, ProtRead, 0, "ro", nil)
	require.NoError(t, err)
	require.ErrorIs(t, x.as.CopyOut(ro, []byte{1}), unix.EFAULT)
	wo, err := x.as.Map(0, PageSize, ProtWrite, 0, "wo", nil)
	require.NoError(t, err)
	require.NoError(t, x.as.CopyIn(make([]byte, 1), wo), "write implies read, as on x86")
}

func TestReservedRangesRefused(t *testing.T) {
	g := newGrant(t, 16<<20)
	lm, err := NewLocalMapper(g, 1<<20)
	require.NoError(t, err)
	defer lm.Close()
	base := lm.Base()
	stub := Range{Start: base + 128*PageSize, End: base + 130*PageSize}
	as := g.NewAddressSpace(lm, Layout{Min: base, Max: base + lm.Size(), Reserved: []Range{stub}})
	defer as.Release()

	_, err = as.Map(stub.Start-PageSize, 2*PageSize, ProtRead, MapFixed, "x", nil)
	require.ErrorIs(t, err, unix.ENOMEM)
	_, err = as.Map(stub.Start, PageSize, ProtRead, MapFixedNoReplace, "x", nil)
	require.ErrorIs(t, err, unix.EEXIST)
	require.ErrorIs(t, as.Unmap(stub.Start, PageSize), unix.EINVAL)
	require.ErrorIs(t, as.CopyIn(make([]byte, 1), stub.Start), unix.EFAULT)

	// Non-fixed maps, hinted at the stub or not, never land on it, and fill the rest.
	var n int
	for {
		a, err := as.Map(stub.Start, 8*PageSize, ProtRead, 0, "fill", nil)
		if err != nil {
			require.ErrorIs(t, err, unix.ENOMEM)
			break
		}
		require.False(t, a < stub.End && stub.Start < a+8*PageSize, "map at %#x overlaps the stub", a)
		n++
	}
	require.Equal(t, (256-2)/8, n)

	// A forged host op over the stub is refused before it reaches the mapper.
	as.mu.Lock()
	err = as.apply([]HostOp{{Kind: OpUnmap, Addr: stub.Start, Length: PageSize}})
	as.mu.Unlock()
	require.ErrorIs(t, err, unix.EFAULT)
}

func TestHostOpsChecked(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	addr, err := x.as.Map(0, PageSize, ProtRead|ProtWrite, 0, "a", nil)
	require.NoError(t, err)
	f, ok := x.as.Translate(addr)
	require.True(t, ok)

	// A frame the address space does not hold, even an allocated one, is never mapped.
	other, err := x.g.Alloc(1)
	require.NoError(t, err)
	defer x.g.UnrefRuns(other)
	x.as.mu.Lock()
	err1 := x.as.apply([]HostOp{{Kind: OpMap, Addr: addr, Length: PageSize, Prot: ProtRead, Offset: other[0].First.Offset()}})
	err2 := x.as.apply([]HostOp{{Kind: OpMap, Addr: addr, Length: 2 * PageSize, Prot: ProtRead, Offset: f.Offset()}})
	err3 := x.as.apply([]HostOp{{Kind: OpMap, Addr: addr, Length: PageSize, Prot: ProtRead, Offset: uint64(x.g.Size())}})
	x.as.mu.Unlock()
	require.ErrorIs(t, err1, unix.EFAULT)
	require.ErrorIs(t, err2, unix.EFAULT)
	require.ErrorIs(t, err3, unix.EFAULT)
	calls, _ := x.lm.Stats()
	require.Equal(t, uint64(1), calls, "refused ops never reach the mapper")

	// The local mapper has its own fence.
	require.ErrorIs(t, x.lm.Apply([]HostOp{{Kind: OpUnmap, Addr: x.lm.Base() + x.lm.Size(), Length: PageSize}}), unix.EPERM)
	require.ErrorIs(t, x.lm.Apply([]HostOp{{Kind: OpMap, Addr: x.lm.Base(), Length: PageSize, Offset: uint64(x.g.Size())}}), unix.EPERM)
}

func TestLazyMappingFaultsInBatches(t *testing.T) {
	x := newTestAS(t, 64<<20, 64<<20, Layout{EagerLimit: 1 << 20})
	const size = 8 << 20
	addr, err := x.as.Map(0, size, ProtRead|ProtWrite, 0, "big", pattern)
	require.NoError(t, err)
	require.Zero(t, x.g.UsedBytes(), "a lazy mapping takes nothing up front")
	require.True(t, x.as.VMAs()[0].Lazy)

	at := addr + 3<<20 + 5*PageSize
	ok, err := x.as.HandleFault(at+17, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint64(1), x.as.Faults())
	// The window is the 2 MiB block around the page, cut to the mapping.
	ws := max(addr, at&^(faultWindow-1))
	we := min(addr+size, (at&^(faultWindow-1))+faultWindow)
	require.Equal(t, int64(we-ws), x.g.UsedBytes())
	for _, va := range []uint64{ws, at, we - PageSize} {
		_, present := x.as.Translate(va)
		require.True(t, present, "%#x", va)
	}
	_, present := x.as.Translate(we)
	require.False(t, present)

	// The tenant reads the window without a fault, and sees the file data.
	mem := x.local(t, ws, we-ws)
	runtime.LockOSThread()
	before := threadMinflt(t)
	var bad int
	for off := uint64(0); off < we-ws; off += PageSize {
		if mem[off] != patternAt(ws-addr+off) {
			bad++
		}
	}
	faults := threadMinflt(t) - before
	runtime.UnlockOSThread()
	require.Zero(t, bad)
	require.LessOrEqual(t, faults, int64(faultSlack))

	// A copy into a page not yet present populates it.
	require.NoError(t, x.as.CopyOut(addr+size-3, []byte("end")))
	require.Equal(t, uint64(2), x.as.Faults())
	require.Equal(t, "end", string(x.local(t, addr+size-3, 3)))

	// Real faults: no VMA.
	ok, err = x.as.HandleFault(addr+size, false)
	require.NoError(t, err)
	require.False(t, ok)

	// A spurious fault on a present page is resolved without allocating.
	used := x.g.UsedBytes()
	ok, err = x.as.HandleFault(at, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, used, x.g.UsedBytes())

	// Unmap gives back exactly what was populated.
	require.NoError(t, x.as.Unmap(addr, size))
	require.Zero(t, x.g.UsedBytes())
}

func TestLazyFaultFallsBackToOnePage(t *testing.T) {
	x := newTestAS(t, 1<<20, 16<<20, Layout{EagerLimit: PageSize})
	addr, err := x.as.Map(0, 8<<20, ProtRead|ProtWrite, 0, "big", nil)
	require.NoError(t, err)
	hog, err := x.g.Alloc(x.g.Frames() - 1)
	require.NoError(t, err)
	ok, err := x.as.HandleFault(addr+PageSize, true)
	require.NoError(t, err)
	require.True(t, ok, "the last free frame still serves one page")
	require.Equal(t, x.g.Size(), x.g.UsedBytes())
	ok, err = x.as.HandleFault(addr+2<<20, true)
	require.ErrorIs(t, err, ErrExhausted)
	require.False(t, ok)
	x.g.UnrefRuns(hog)

	_, err = x.as.Map(0, 2<<20, ProtRead|ProtWrite, 0, "too big", nil)
	require.NoError(t, err, "lazy: no frames needed yet")
	x2 := newTestAS(t, 1<<20, 16<<20, Layout{})
	_, err = x2.as.Map(0, 2<<20, ProtRead|ProtWrite, 0, "too big", nil)
	require.ErrorIs(t, err, ErrExhausted)
	require.Empty(t, x2.as.VMAs())
	require.Zero(t, x2.g.UsedBytes())
}

func TestMapFillShortAndErrors(t *testing.T) {
	x := newTestAS(t, 16<<20, 16<<20, Layout{})
	file := []byte("0123456789")
	readAt := func(off uint64, dst []byte) error {
		if off < uint64(len(file)) {
			copy(dst, file[off:])
		}
		return nil
	}
	addr, err := x.as.Map(0, 2*PageSize, ProtRead|ProtExec, 0, "/bin/x", readAt)
	require.NoError(t, err)
	buf := make([]byte, 12)
	require.NoError(t, x.as.CopyIn(buf, addr))
	require.Equal(t, append([]byte("0123456789"), 0, 0), buf, "a short fill leaves zeros")

	used := x.g.UsedBytes()
	_, err = x.as.Map(addr, 2*PageSize, ProtRead, MapFixed, "bad", func(uint64, []byte) error { return unix.EIO })
	require.ErrorIs(t, err, unix.EIO)
	require.Equal(t, used, x.g.UsedBytes(), "a failed fill gives its frames back")
	require.NoError(t, x.as.CopyIn(buf[:1], addr), "and leaves the old mapping alone")
	require.Equal(t, byte('0'), buf[0])
}

func TestNonFixedPlacement(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	top := x.lm.Base() + x.lm.Size()
	a, err := x.as.Map(0, 2*PageSize, ProtRead, 0, "a", nil)
	require.NoError(t, err)
	require.Equal(t, top-2*PageSize, a, "top-down below MmapTop")
	b, err := x.as.Map(0, PageSize, ProtRead, 0, "b", nil)
	require.NoError(t, err)
	require.Equal(t, a-PageSize, b)
	require.NoError(t, x.as.Unmap(a, PageSize))
	c, err := x.as.Map(0, PageSize, ProtRead, 0, "c", nil)
	require.NoError(t, err)
	require.Equal(t, a, c, "the highest gap that fits")
	h, err := x.as.Map(x.lm.Base()+5*PageSize+7, PageSize, ProtRead, 0, "hint", nil)
	require.NoError(t, err)
	require.Equal(t, x.lm.Base()+5*PageSize, h, "a free hint is taken")
	_, err = x.as.Map(0, 2<<20, ProtRead, 0, "huge", nil)
	require.ErrorIs(t, err, unix.ENOMEM)
	_, err = x.as.Map(0, 0, ProtRead, 0, "empty", nil)
	require.ErrorIs(t, err, unix.EINVAL)
	_, err = x.as.Map(0, PageSize, ProtRead, MapShared, "shared file", pattern)
	require.ErrorIs(t, err, unix.EINVAL, "file-backed shared mappings are not supported")
}

func TestReadString(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	addr, err := x.as.Map(0, 2*PageSize, ProtRead|ProtWrite, 0, "a", nil)
	require.NoError(t, err)
	at := addr + 2*PageSize - 4
	require.NoError(t, x.as.CopyOut(at, []byte("abc\x00")))
	s, err := x.as.ReadString(at, 100)
	require.NoError(t, err)
	require.Equal(t, "abc", s, "a string that ends right before the end of the mapping")

	require.NoError(t, x.as.CopyOut(addr+PageSize-3, []byte("xyzw\x00")))
	s, err = x.as.ReadString(addr+PageSize-3, 100)
	require.NoError(t, err)
	require.Equal(t, "xyzw", s, "across a page boundary")
	_, err = x.as.ReadString(addr+PageSize-3, 4)
	require.ErrorIs(t, err, unix.ENAMETOOLONG)
	s, err = x.as.ReadString(addr+PageSize-3, 5)
	require.NoError(t, err)
	require.Equal(t, "xyzw", s)

	require.NoError(t, x.as.CopyOut(addr+2*PageSize-2, []byte("no")))
	_, err = x.as.ReadString(addr+2*PageSize-2, 100)
	require.ErrorIs(t, err, unix.EFAULT, "runs off the mapping before a NUL")
}

func TestSlices(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	addr, err := x.as.Map(0, 4*PageSize, ProtRead|ProtWrite, 0, "a", nil)
	require.NoError(t, err)
	bufs, err := x.as.Slices(addr+100, 3*PageSize, true)
	require.NoError(t, err)
	require.Len(t, bufs, 1, "contiguous frames give one slice")
	require.Len(t, bufs[0], 3*PageSize)
	copy(bufs[0], "zero-copy")
	require.Equal(t, "zero-copy", string(x.local(t, addr+100, 9)))

	require.NoError(t, x.as.Protect(addr, PageSize, ProtRead))
	_, err = x.as.Slices(addr, 10, true)
	require.ErrorIs(t, err, unix.EFAULT)
	bufs, err = x.as.Slices(addr, 10, false)
	require.NoError(t, err)
	require.Len(t, bufs[0], 10)

	// Pinned slices keep their frames past an unmap.
	bufs, release, err := x.as.PinSlices(addr+PageSize, PageSize, true)
	require.NoError(t, err)
	used := x.g.UsedBytes()
	require.NoError(t, x.as.Unmap(addr, 4*PageSize))
	require.Equal(t, int64(PageSize), x.g.UsedBytes(), "the pinned frame is still held (was %d)", used)
	require.Equal(t, byte(0), bufs[0][0])
	release()
	release()
	require.Zero(t, x.g.UsedBytes())
}

func TestReleaseGivesBackEverything(t *testing.T) {
	x := newTestAS(t, 64<<20, 64<<20, Layout{EagerLimit: 1 << 20})
	_, err := x.as.Map(0, 1<<20, ProtRead|ProtWrite, 0, "a", nil)
	require.NoError(t, err)
	lazy, err := x.as.Map(0, 16<<20, ProtRead|ProtWrite, 0, "b", nil)
	require.NoError(t, err)
	_, err = x.as.HandleFault(lazy+5<<20, true)
	require.NoError(t, err)
	require.Equal(t, int64(3<<20), x.g.UsedBytes())
	require.Equal(t, int64(3<<20), x.as.ResidentBytes())
	x.as.Release()
	require.Zero(t, x.g.UsedBytes())
	_, err = x.as.Map(0, PageSize, ProtRead, 0, "late", nil)
	require.ErrorIs(t, err, unix.EIO)
	x.as.Release()
}

func TestTwoAddressSpacesShareOneGrant(t *testing.T) {
	g := newGrant(t, 16<<20)
	var spaces []*AddressSpace
	for i := 0; i < 2; i++ {
		lm, err := NewLocalMapper(g, 4<<20)
		require.NoError(t, err)
		defer lm.Close()
		as := g.NewAddressSpace(lm, Layout{Min: lm.Base(), Max: lm.Base() + lm.Size()})
		defer as.Release()
		spaces = append(spaces, as)
	}
	a, err := spaces[0].Map(0, 1<<20, ProtRead|ProtWrite, 0, "a", nil)
	require.NoError(t, err)
	b, err := spaces[1].Map(0, 1<<20, ProtRead|ProtWrite, 0, "b", nil)
	require.NoError(t, err)
	require.NoError(t, spaces[0].CopyOut(a, []byte("secret")))
	buf := make([]byte, 6)
	require.NoError(t, spaces[1].CopyIn(buf, b))
	require.Equal(t, make([]byte, 6), buf)
	fa, _ := spaces[0].Translate(a)
	fb, _ := spaces[1].Translate(b)
	require.NotEqual(t, fa, fb)

	// Frames freed by one space come back zeroed to the other.
	spaces[0].Release()
	c, err := spaces[1].Map(0, 3<<20, ProtRead|ProtWrite, 0, "c", nil)
	require.NoError(t, err)
	big := make([]byte, 3<<20)
	require.NoError(t, spaces[1].CopyIn(big, c))
	require.Equal(t, -1, bytes.IndexByte(big, 's'))
}

func TestConcurrentUse(t *testing.T) {
	x := newTestAS(t, 64<<20, 64<<20, Layout{EagerLimit: 64 << 10})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				size := uint64(PageSize * (1 + (i*7+w)%40))
				a, err := x.as.Map(0, size, ProtRead|ProtWrite, 0, "w", nil)
				if err != nil {
					errs <- err
					return
				}
				msg := []byte{byte(w), byte(i), 1, 2, 3}
				if err := x.as.CopyOut(a+size-5, msg); err != nil {
					errs <- err
					return
				}
				got := make([]byte, 5)
				if err := x.as.CopyIn(got, a+size-5); err != nil || !bytes.Equal(got, msg) {
					errs <- err
					return
				}
				if err := x.as.Unmap(a, size); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Empty(t, x.as.VMAs())
	require.Zero(t, x.g.UsedBytes())
}

func TestNeighboursMerge(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	base := x.lm.Base()
	_, err := x.as.Map(base, 2*PageSize, ProtRead|ProtWrite, MapFixed, "", nil)
	require.NoError(t, err)
	_, err = x.as.Map(base+2*PageSize, 2*PageSize, ProtRead|ProtWrite, MapFixed, "", nil)
	require.NoError(t, err)
	require.Len(t, x.as.VMAs(), 1, "adjacent anonymous mappings merge")

	require.NoError(t, x.as.Protect(base+PageSize, PageSize, ProtRead))
	require.Len(t, x.as.VMAs(), 3)
	require.NoError(t, x.as.Protect(base+PageSize, PageSize, ProtRead|ProtWrite))
	vmas := x.as.VMAs()
	require.Len(t, vmas, 1, "protecting back merges again")
	require.Equal(t, VMA{Start: base, End: base + 4*PageSize, Prot: ProtRead | ProtWrite, Resident: 4}, vmas[0])

	_, err = x.as.Map(base+4*PageSize, PageSize, ProtRead|ProtWrite, MapFixed, "file", pattern)
	require.NoError(t, err)
	_, err = x.as.Map(base+5*PageSize, PageSize, ProtRead|ProtWrite, MapFixed, "file", pattern)
	require.NoError(t, err)
	require.Len(t, x.as.VMAs(), 3, "copies of file data do not merge")
}

func TestLazyFileOffsetsSurviveSplits(t *testing.T) {
	x := newTestAS(t, 16<<20, 16<<20, Layout{EagerLimit: PageSize})
	addr, err := x.as.Map(0, 4<<20, ProtRead, 0, "lib", pattern)
	require.NoError(t, err)
	require.NoError(t, x.as.Unmap(addr, 1<<20+3*PageSize))
	require.NoError(t, x.as.Protect(addr+3<<20, PageSize, ProtRead|ProtWrite))
	for _, off := range []uint64{1<<20 + 3*PageSize, 2<<20 + 17, 3<<20 + 5, 4<<20 - 1} {
		b := make([]byte, 1)
		require.NoError(t, x.as.CopyIn(b, addr+off))
		require.Equal(t, patternAt(off), b[0], "offset %#x", off)
	}
}

func TestFragmentedFramesBigCopies(t *testing.T) {
	x := newTestAS(t, 1<<20, 1<<20, Layout{})
	// Leave only one-frame holes, so a mapping gets frames from all over the file.
	all, err := x.g.Alloc(x.g.Frames())
	require.NoError(t, err)
	fs := runFrames(all)
	for i := 0; i < 64; i += 2 {
		x.g.Unref(fs[i])
	}
	defer func() {
		for i := 1; i < len(fs); i++ {
			if i >= 64 || i%2 == 1 {
				x.g.Unref(fs[i])
			}
		}
	}()
	addr, err := x.as.Map(0, 32*PageSize, ProtRead|ProtWrite, 0, "frag", nil)
	require.NoError(t, err)
	_, ops := x.lm.Stats()
	require.Equal(t, uint64(32), ops, "one host op per run of contiguous frames")

	src := make([]byte, 30*PageSize)
	for i := range src {
		src[i] = byte(i * 13)
	}
	require.NoError(t, x.as.CopyOut(addr+PageSize+1, src))
	require.Equal(t, src, x.local(t, addr+PageSize+1, uint64(len(src))))
	dst := make([]byte, len(src))
	require.NoError(t, x.as.CopyIn(dst, addr+PageSize+1))
	require.Equal(t, src, dst)
	bufs, err := x.as.Slices(addr, 32*PageSize, false)
	require.NoError(t, err)
	require.Len(t, bufs, 32)

	// A big copy that runs off the end copies what it can, then fails.
	clear(dst)
	err = x.as.CopyIn(dst, addr+32*PageSize-2*PageSize)
	require.ErrorIs(t, err, unix.EFAULT)
	require.Equal(t, x.local(t, addr+30*PageSize, 2*PageSize), dst[:2*PageSize])
	require.Equal(t, src[29*PageSize-1:], dst[:PageSize+1])
	require.Equal(t, make([]byte, len(dst)-2*PageSize), dst[2*PageSize:])
}

func TestBrokenMapperKeepsFramesUntilRelease(t *testing.T) {
	g := newGrant(t, 16<<20)
	lm, err := NewLocalMapper(g, 1<<20)
	require.NoError(t, err)
	as := g.NewAddressSpace(lm, Layout{Min: lm.Base(), Max: lm.Base() + lm.Size()})
	addr, err := as.Map(0, 4*PageSize, ProtRead|ProtWrite, 0, "a", nil)
	require.NoError(t, err)

	require.NoError(t, lm.Close()) // the stub is gone
	err = as.Unmap(addr, PageSize)
	require.ErrorIs(t, err, unix.EBADF)
	require.Equal(t, int64(4*PageSize), g.UsedBytes(), "frames the host may still map are not freed")
	_, err = as.Map(0, PageSize, ProtRead, 0, "b", nil)
	require.ErrorIs(t, err, unix.EIO, "a broken address space takes no more changes")
	ok, err := as.HandleFault(addr+PageSize, false)
	require.False(t, ok)
	require.ErrorIs(t, err, unix.EIO)

	as.Release()
	require.Zero(t, g.UsedBytes())
}

// Batch holds host operations until flush: the host keeps the old mapping (and the frames stay
// referenced) until then, and one Apply does the whole lot.
func TestBatchHoldsHostOpsUntilFlush(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	old, err := x.as.Map(0, 4*PageSize, ProtRead|ProtWrite, 0, "old", pattern)
	require.NoError(t, err)
	used := x.g.UsedBytes()
	calls0, _ := x.lm.Stats()

	flush := x.as.Batch()
	require.NoError(t, x.as.Unmap(old, 4*PageSize))
	fresh, err := x.as.Map(0, 2*PageSize, ProtRead, 0, "new", nil)
	require.NoError(t, err)
	calls1, _ := x.lm.Stats()
	require.Equal(t, calls0, calls1, "nothing reached the host yet")
	require.Equal(t, "rw-", hostRights(t, x, old), "the host still maps the old pages")
	require.Equal(t, used+2*PageSize, x.g.UsedBytes(), "their frames are still held")

	require.NoError(t, flush())
	calls2, _ := x.lm.Stats()
	require.Equal(t, calls1+1, calls2, "one host batch")
	require.Equal(t, used-2*PageSize, x.g.UsedBytes(), "the old frames went back, the new are held")
	require.Equal(t, "r--", hostRights(t, x, fresh))
	if fresh != old {
		require.Equal(t, "---", hostRights(t, x, old))
	}
	require.NoError(t, flush(), "a second flush does nothing")
}

// Code and read-only data that a batch unmaps and maps again from the same frames at the same
// place (a program executed anew) stay mapped on the host: the batch does not touch them.
func TestBatchKeepsReadOnlyPagesMappedAgain(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	src, err := x.g.NewPages(4*PageSize, pattern)
	require.NoError(t, err)
	defer src.Release()
	code, err := x.as.MapPages(0, 4*PageSize, ProtRead|ProtExec, 0, "text", src)
	require.NoError(t, err)
	rodata, err := x.as.MapPages(0, 2*PageSize, ProtRead, 0, "rodata", src)
	require.NoError(t, err)
	data, err := x.as.Map(0, 2*PageSize, ProtRead|ProtWrite, 0, "data", pattern)
	require.NoError(t, err)
	_, ops0 := x.lm.Stats()

	flush := x.as.Batch()
	require.NoError(t, x.as.Unmap(code, 4*PageSize))
	require.NoError(t, x.as.Unmap(data, 2*PageSize))
	again, err := x.as.MapPages(code, 4*PageSize, ProtRead|ProtExec, MapFixed, "text", src)
	require.NoError(t, err)
	require.Equal(t, code, again)
	require.NoError(t, x.as.Unmap(rodata, 2*PageSize))
	again, err = x.as.MapPages(rodata, 2*PageSize, ProtRead, MapFixed, "rodata", src)
	require.NoError(t, err)
	require.Equal(t, rodata, again)
	require.NoError(t, flush())
	_, ops1 := x.lm.Stats()
	require.Equal(t, uint64(1), ops1-ops0, "only the data's unmap reaches the host")
	require.Equal(t, "r-x", hostRights(t, x, code))
	require.Equal(t, patternAt(PageSize+3), x.local(t, code, 2*PageSize)[PageSize+3])
	require.Equal(t, "r--", hostRights(t, x, rodata))
	require.Equal(t, patternAt(PageSize+5), x.local(t, rodata, 2*PageSize)[PageSize+5])
	require.Equal(t, "---", hostRights(t, x, data))
}

// A stack's lazy faults fill a small window: a thread touches its stack from the top down, a
// little at a time, and the 2 MiB window gave every thread 512 pages at its first touch.
func TestStackFaultsFillASmallWindow(t *testing.T) {
	for _, flags := range []MapFlags{MapNoReserve | MapStack, MapNoReserve | MapGrowsDown} {
		x := newTestAS(t, 64<<20, 64<<20, Layout{})
		const size = 8 << 20
		addr, err := x.as.Map(0, size, ProtRead|ProtWrite, flags, "stack", nil)
		require.NoError(t, err)
		require.Zero(t, x.g.UsedBytes())
		top := addr + size - PageSize
		ok, err := x.as.HandleFault(top+100, true)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, int64(stackWindow), x.g.UsedBytes(), "flags %#x", flags)
		_, present := x.as.Translate(top + PageSize - stackWindow)
		require.True(t, present, "the window below the page")
		_, present = x.as.Translate(top - stackWindow)
		require.False(t, present, "nothing below the window")
		require.NoError(t, x.as.Unmap(addr, size))
		require.Zero(t, x.g.UsedBytes())
	}
}
