package memgrant

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A mapping made from Pages shares their frames copy-on-write, reads the contents without a
// fault of the sandbox's, and a write copies only the written page.
func TestMapPagesSharesFramesCopyOnWrite(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	before := x.g.UsedBytes()
	src, err := x.g.NewPages(3*PageSize, pattern)
	require.NoError(t, err)
	require.Equal(t, before+3*PageSize, x.g.UsedBytes())

	// Four pages from three: the last reads as zero, as the tail of a segment does.
	w, err := x.as.MapPages(0, 2*PageSize, ProtRead|ProtWrite, 0, "data", src)
	require.NoError(t, err)
	require.Equal(t, "rw-", hostRights(t, x, w), "a writable mapping gets copies")
	fw, _ := x.as.Translate(w)
	require.Equal(t, 1, x.g.Refs(fw))
	require.Equal(t, patternAt(PageSize+9), x.local(t, w, 2*PageSize)[PageSize+9])
	require.NoError(t, x.as.Unmap(w, 2*PageSize))

	a, err := x.as.MapPages(0, 4*PageSize, ProtRead, 0, "prog", src)
	require.NoError(t, err)
	require.Equal(t, before+4*PageSize, x.g.UsedBytes(), "only the page past the source is new")
	fx, ok := x.as.Translate(a + PageSize)
	require.True(t, ok)
	require.Equal(t, 2, x.g.Refs(fx), "the pages' own reference and the page table's")
	require.Equal(t, "r--", hostRights(t, x, a))
	m := x.local(t, a, 4*PageSize)
	require.Equal(t, patternAt(PageSize+9), m[PageSize+9])
	require.Zero(t, m[3*PageSize+5])
	require.Zero(t, x.as.Faults())
	require.Zero(t, x.as.CowFaults())

	src.Release() // the creator lets go: the mapping keeps the pages
	require.Equal(t, 2, x.g.Refs(fx))
	require.NoError(t, x.as.Protect(a, 4*PageSize, ProtRead|ProtWrite))
	require.Equal(t, "r--", hostRights(t, x, a), "still shared")
	ok, err = x.as.HandleFault(a+PageSize, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "rw-", hostRights(t, x, a+PageSize))
	require.Equal(t, patternAt(PageSize+9), m[PageSize+9], "the writer's copy holds the data")
	gx, _ := x.as.Translate(a + PageSize)
	require.NotEqual(t, fx, gx)
	require.NoError(t, x.as.Unmap(a, 4*PageSize))
	require.Equal(t, before, x.g.UsedBytes(), "every frame went back")
}

// A lazily populated mapping made from Pages takes its frames from them at the fault, even
// after the creator released them; a private page past them is fresh.
func TestMapPagesLazy(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{EagerLimit: PageSize})
	src, err := x.g.NewPages(2*PageSize, pattern)
	require.NoError(t, err)
	a, err := x.as.MapPages(0, 8*PageSize, ProtRead, 0, "lazy", src)
	require.NoError(t, err)
	src.Release()
	ok, err := x.as.HandleFault(a+PageSize, false)
	require.NoError(t, err)
	require.True(t, ok)
	f, ok := x.as.Translate(a + PageSize)
	require.True(t, ok)
	require.Equal(t, patternAt(PageSize+3), x.local(t, a, 2*PageSize)[PageSize+3])
	require.Equal(t, 2, x.g.Refs(f), "still the pages' frame: the mapping keeps them")
	c := fork(t, x)
	c.as.Release()
	require.NoError(t, x.as.Unmap(a, 8*PageSize))
	require.Zero(t, x.g.UsedBytes())
}
