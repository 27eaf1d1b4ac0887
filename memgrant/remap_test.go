package memgrant

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestRemapGrowInPlace(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	a := x.lm.Base() + 16*PageSize
	_, err := x.as.Map(a, 4*PageSize, ProtRead|ProtWrite, MapFixed, "heap", pattern)
	require.NoError(t, err)
	f0, _ := x.as.Translate(a)
	got, err := x.as.Remap(a, 4*PageSize, 8*PageSize, 0, 0)
	require.NoError(t, err)
	require.Equal(t, a, got)
	require.Equal(t, []VMA{{Start: a, End: a + 8*PageSize, Prot: ProtRead | ProtWrite, Name: "heap", File: true, Resident: 8}}, x.as.VMAs())
	require.Equal(t, int64(8*PageSize), x.g.UsedBytes())
	g0, _ := x.as.Translate(a)
	require.Equal(t, f0, g0, "grown in place: the old pages stay")

	mem := x.local(t, a, 8*PageSize)
	runtime.LockOSThread()
	before := threadMinflt(t)
	require.Equal(t, patternAt(4*PageSize-1), mem[4*PageSize-1])
	require.Equal(t, patternAt(7*PageSize), mem[7*PageSize], "the grown part of a file copy is filled too")
	mem[6*PageSize] = 1
	faults := threadMinflt(t) - before
	runtime.UnlockOSThread()
	require.LessOrEqual(t, faults, int64(faultSlack), "the grown part of an eager mapping is populated")
}

func TestRemapMovesFramesNotData(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	a := x.lm.Base() + 16*PageSize
	_, err := x.as.Map(a, 4*PageSize, ProtRead|ProtWrite, MapFixed, "heap", nil)
	require.NoError(t, err)
	_, err = x.as.Map(a+4*PageSize, PageSize, ProtRead, MapFixed, "wall", nil)
	require.NoError(t, err)
	require.NoError(t, x.as.CopyOut(a+3*PageSize, []byte("data")))
	var before []Frame
	for i := uint64(0); i < 4; i++ {
		f, _ := x.as.Translate(a + i*PageSize)
		before = append(before, f)
	}

	_, err = x.as.Remap(a, 4*PageSize, 8*PageSize, 0, 0)
	require.ErrorIs(t, err, unix.ENOMEM, "no room to grow and no leave to move")
	require.Equal(t, int64(5*PageSize), x.g.UsedBytes())

	calls, _ := x.lm.Stats()
	n, err := x.as.Remap(a, 4*PageSize, 8*PageSize, RemapMayMove, 0)
	require.NoError(t, err)
	require.NotEqual(t, a, n)
	for i, f := range before {
		g, ok := x.as.Translate(n + uint64(i)*PageSize)
		require.True(t, ok)
		require.Equal(t, f, g, "the frames moved")
	}
	_, ok := x.as.Translate(a)
	require.False(t, ok)
	require.Equal(t, int64(9*PageSize), x.g.UsedBytes(), "4 moved, 4 new, the wall")
	calls2, _ := x.lm.Stats()
	require.Equal(t, calls+1, calls2, "one batch of host ops")
	require.Equal(t, "---", hostRights(t, x, a), "the old place is unmapped on the host")
	require.Equal(t, "data", string(x.local(t, n+3*PageSize, 4)))
	require.Len(t, vmasNamed(x.as, "heap"), 1)
	require.NoError(t, x.as.Unmap(n, 8*PageSize))
	require.Equal(t, int64(PageSize), x.g.UsedBytes())
}

func TestRemapShrink(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	a, err := x.as.Map(0, 8*PageSize, ProtRead|ProtWrite, 0, "heap", nil)
	require.NoError(t, err)
	got, err := x.as.Remap(a, 8*PageSize, 3*PageSize-100, RemapMayMove, 0)
	require.NoError(t, err)
	require.Equal(t, a, got)
	require.Equal(t, int64(3*PageSize), x.g.UsedBytes())
	require.Equal(t, a+3*PageSize, x.as.VMAs()[0].End)
	require.Equal(t, "---", hostRights(t, x, a+3*PageSize))
	require.Equal(t, "rw-", hostRights(t, x, a+2*PageSize))
}

func TestRemapFixedReplaces(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	base := x.lm.Base()
	_, err := x.as.Map(base, 4*PageSize, ProtRead|ProtWrite, MapFixed, "src", nil)
	require.NoError(t, err)
	require.NoError(t, x.as.CopyOut(base, []byte("moved")))
	_, err = x.as.Map(base+32*PageSize, 8*PageSize, ProtRead, MapFixed, "victim", pattern)
	require.NoError(t, err)
	require.Equal(t, int64(12*PageSize), x.g.UsedBytes())

	_, err = x.as.Remap(base, 4*PageSize, 4*PageSize, RemapFixed, base+32*PageSize)
	require.ErrorIs(t, err, unix.EINVAL, "fixed needs may-move")
	_, err = x.as.Remap(base, 4*PageSize, 4*PageSize, RemapFixed|RemapMayMove, base+2*PageSize)
	require.ErrorIs(t, err, unix.EINVAL, "overlap")

	got, err := x.as.Remap(base, 4*PageSize, 2*PageSize, RemapFixed|RemapMayMove, base+33*PageSize)
	require.NoError(t, err)
	require.Equal(t, base+33*PageSize, got)
	require.Equal(t, "moved", string(x.local(t, got, 5)))
	require.Equal(t, int64(2*PageSize+6*PageSize), x.g.UsedBytes(), "the victim's replaced pages and the source's cut tail are freed")
	vs := x.as.VMAs()
	require.Len(t, vs, 3)
	require.Equal(t, "victim", vs[0].Name)
	require.Equal(t, base+33*PageSize, vs[0].End)
	require.Equal(t, "src", vs[1].Name)
	require.Equal(t, "victim", vs[2].Name)
	require.Equal(t, patternAt(7*PageSize), x.local(t, base+39*PageSize, 1)[0], "the victim's tail keeps its file offset")
}

func TestRemapDontUnmap(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	a, err := x.as.Map(0, 2*PageSize, ProtRead|ProtWrite, 0, "buf", nil)
	require.NoError(t, err)
	require.NoError(t, x.as.CopyOut(a, []byte("keep")))
	_, err = x.as.Remap(a, 2*PageSize, 3*PageSize, RemapDontUnmap|RemapMayMove, 0)
	require.ErrorIs(t, err, unix.EINVAL)
	n, err := x.as.Remap(a, 2*PageSize, 2*PageSize, RemapDontUnmap|RemapMayMove, 0)
	require.NoError(t, err)
	require.NotEqual(t, a, n)
	require.Equal(t, "keep", string(x.local(t, n, 4)))
	require.Len(t, x.as.VMAs(), 2, "the old range stays mapped")
	require.Equal(t, int64(2*PageSize), x.g.UsedBytes())
	got := make([]byte, 4)
	require.NoError(t, x.as.CopyIn(got, a))
	require.Equal(t, make([]byte, 4), got, "and empty")
}

func TestRemapErrors(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	a, err := x.as.Map(x.lm.Base()+16*PageSize, 2*PageSize, ProtRead|ProtWrite, MapFixed, "a", nil)
	require.NoError(t, err)
	_, err = x.as.Map(a+2*PageSize, 2*PageSize, ProtRead, MapFixed, "b", nil)
	require.NoError(t, err)
	_, err = x.as.Remap(a, 4*PageSize, 8*PageSize, RemapMayMove, 0)
	require.ErrorIs(t, err, unix.EFAULT, "spans two mappings")
	_, err = x.as.Remap(a-8*PageSize, PageSize, 2*PageSize, RemapMayMove, 0)
	require.ErrorIs(t, err, unix.EFAULT, "not mapped")
	_, err = x.as.Remap(a+1, PageSize, 2*PageSize, RemapMayMove, 0)
	require.ErrorIs(t, err, unix.EINVAL)
	_, err = x.as.Remap(a, PageSize, 0, RemapMayMove, 0)
	require.ErrorIs(t, err, unix.EINVAL)
	_, err = x.as.Remap(a, PageSize, PageSize, 1<<7, 0)
	require.ErrorIs(t, err, unix.EINVAL)
	_, err = x.as.Remap(a, 0, PageSize, RemapMayMove, 0)
	require.ErrorIs(t, err, unix.EINVAL, "a second mapping of private memory")
	require.Equal(t, int64(4*PageSize), x.g.UsedBytes())
}

func TestRemapSharedSecondMapping(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	a, err := x.as.Map(0, 4*PageSize, ProtRead|ProtWrite, MapShared, "shm", nil)
	require.NoError(t, err)
	n, err := x.as.Remap(a+PageSize, 0, 2*PageSize, RemapMayMove, 0)
	require.NoError(t, err)
	copy(x.local(t, n, 3), "two")
	require.Equal(t, "two", string(x.local(t, a+PageSize, 3)))
	require.Equal(t, int64(4*PageSize), x.g.UsedBytes())
	require.NoError(t, x.as.Unmap(a, 4*PageSize))
	require.Equal(t, "two", string(x.local(t, n, 3)), "the second mapping holds the object")
	require.NoError(t, x.as.Unmap(n, 2*PageSize))
	require.Zero(t, x.g.UsedBytes())
}

func TestRemapKeepsCopyOnWrite(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	a, err := x.as.Map(0, 2*PageSize, ProtRead|ProtWrite, 0, "heap", nil)
	require.NoError(t, err)
	require.NoError(t, x.as.CopyOut(a, []byte("orig")))
	c := fork(t, x)
	n, err := c.as.Remap(a, 2*PageSize, 4*PageSize, RemapMayMove|RemapFixed, a-8*PageSize)
	require.NoError(t, err)
	require.Equal(t, "r--", hostRights(t, c, n), "moved pages stay copy-on-write")
	require.Equal(t, "rw-", hostRights(t, c, n+2*PageSize), "grown pages are the child's own")
	require.NoError(t, c.as.CopyOut(n, []byte("kid!")))
	require.Equal(t, "orig", string(x.local(t, a, 4)))
	require.Equal(t, "kid!", string(c.local(t, n, 4)))
}

func TestDiscardAnonymousReadsZero(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	a, err := x.as.Map(0, 8*PageSize, ProtRead|ProtWrite, 0, "heap", nil)
	require.NoError(t, err)
	mem := x.local(t, a, 8*PageSize)
	for i := range mem {
		mem[i] = 0xAA
	}
	require.NoError(t, x.as.Discard(a+2*PageSize, 4*PageSize))
	require.Equal(t, int64(4*PageSize), x.g.UsedBytes(), "the discarded frames are given back")
	require.Equal(t, uint64(4), x.as.VMAs()[0].Resident)
	require.Equal(t, "---", hostRights(t, x, a+2*PageSize))
	ok, err := x.as.HandleFault(a+3*PageSize, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, make([]byte, 4*PageSize), mem[2*PageSize:6*PageSize])
	require.Equal(t, byte(0xAA), mem[2*PageSize-1])
	require.Equal(t, byte(0xAA), mem[6*PageSize])
	require.Len(t, x.as.VMAs(), 1, "discard leaves the mapping whole")

	// Holes: the mapped part is discarded, and ENOMEM says the rest was not mapped.
	require.ErrorIs(t, x.as.Discard(a-2*PageSize, 4*PageSize), unix.ENOMEM)
	_, ok = x.as.Translate(a)
	require.False(t, ok)
	require.ErrorIs(t, x.as.Discard(a+1, PageSize), unix.EINVAL)
}

func TestDiscardFileRefills(t *testing.T) {
	x := newTestAS(t, 16<<20, 8<<20, Layout{EagerLimit: 4 * PageSize})
	a, err := x.as.Map(0, 4*PageSize, ProtRead|ProtWrite, 0, "data", pattern)
	require.NoError(t, err)
	mem := x.local(t, a, 4*PageSize)
	mem[PageSize] = ^patternAt(PageSize)
	require.NoError(t, x.as.Discard(a, 4*PageSize))
	require.Equal(t, int64(4*PageSize), x.g.UsedBytes(), "an eager copy is refilled at once")
	runtime.LockOSThread()
	before := threadMinflt(t)
	v := mem[PageSize]
	faults := threadMinflt(t) - before
	runtime.UnlockOSThread()
	require.Equal(t, patternAt(PageSize), v, "the file's data again")
	require.LessOrEqual(t, faults, int64(faultSlack))

	l, err := x.as.Map(0, 16*PageSize, ProtRead|ProtWrite, 0, "lazy data", pattern)
	require.NoError(t, err)
	require.NoError(t, x.as.CopyOut(l+5*PageSize, []byte{1, 2, 3}))
	require.Equal(t, int64(20*PageSize), x.g.UsedBytes())
	require.NoError(t, x.as.Discard(l, 16*PageSize))
	require.Equal(t, int64(4*PageSize), x.g.UsedBytes(), "a lazy copy is dropped")
	got := make([]byte, 3)
	require.NoError(t, x.as.CopyIn(got, l+5*PageSize))
	require.Equal(t, []byte{patternAt(5 * PageSize), patternAt(5*PageSize + 1), patternAt(5*PageSize + 2)}, got)
}

func TestDiscardLeavesSharedAndCopyOnWrite(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	sh, err := x.as.Map(0, 2*PageSize, ProtRead|ProtWrite, MapShared, "shm", nil)
	require.NoError(t, err)
	priv, err := x.as.Map(0, 2*PageSize, ProtRead|ProtWrite, 0, "priv", nil)
	require.NoError(t, err)
	copy(x.local(t, sh, 6), "shared")
	copy(x.local(t, priv, 7), "private")
	c := fork(t, x)
	require.NoError(t, c.as.Discard(sh, 2*PageSize))
	require.Equal(t, "shared", string(c.local(t, sh, 6)), "shared pages keep their data")
	f, _ := x.as.Translate(priv)
	require.Equal(t, 2, x.g.Refs(f))
	require.NoError(t, c.as.Discard(priv, 2*PageSize))
	require.Equal(t, 1, x.g.Refs(f), "the child's references are dropped")
	require.Equal(t, int64(4*PageSize), x.g.UsedBytes())
	got := make([]byte, 7)
	require.NoError(t, c.as.CopyIn(got, priv))
	require.Equal(t, make([]byte, 7), got)
	require.Equal(t, "private", string(x.local(t, priv, 7)))
}
