package memgrant

import (
	"errors"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func newGrant(t testing.TB, size int64) *Grant {
	t.Helper()
	g, err := NewGrant(size)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close()) })
	return g
}

func runFrames(runs []Run) []Frame {
	var fs []Frame
	for _, r := range runs {
		for i := 0; i < r.Count; i++ {
			fs = append(fs, r.First+Frame(i))
		}
	}
	return fs
}

// fileBlocks returns the 512-byte blocks the memory file holds on the host.
func fileBlocks(t *testing.T, g *Grant) int64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(int(g.File().Fd()), &st))
	return st.Blocks
}

func TestNewGrantRejectsTinySize(t *testing.T) {
	_, err := NewGrant(100)
	require.ErrorIs(t, err, unix.EINVAL)
	g := newGrant(t, 1<<20+100)
	require.Equal(t, int64(1<<20), g.Size(), "size rounds down to whole frames")
	require.Equal(t, 256, g.Frames())
	require.NoError(t, g.Close())
	require.NoError(t, g.Close(), "Close is idempotent")
}

func TestAllocAccountingExact(t *testing.T) {
	g := newGrant(t, 64<<20)
	require.Zero(t, g.UsedBytes())

	a, err := g.Alloc(1)
	require.NoError(t, err)
	b, err := g.Alloc(513)
	require.NoError(t, err)
	require.Len(t, b, 1, "a fresh grant hands out one run")
	require.Equal(t, int64(514*PageSize), g.UsedBytes())

	seen := map[Frame]bool{}
	for _, f := range append(runFrames(a), runFrames(b)...) {
		require.False(t, seen[f], "frame %d handed out twice", f)
		seen[f] = true
		require.Equal(t, 1, g.Refs(f))
	}

	f := a[0].First
	g.Ref(f)
	require.Equal(t, 2, g.Refs(f))
	g.Unref(f)
	require.Equal(t, 1, g.Refs(f))
	require.Equal(t, int64(514*PageSize), g.UsedBytes(), "a frame still referenced stays used")
	g.Unref(f)
	require.Equal(t, 0, g.Refs(f))
	require.Equal(t, int64(513*PageSize), g.UsedBytes())

	g.UnrefRuns(b)
	require.Zero(t, g.UsedBytes())
	require.Panics(t, func() { g.Unref(f) }, "unref of a free frame is a bug")
	require.Panics(t, func() { g.Ref(f) }, "ref of a free frame is a bug")
}

func TestAllocExhaustionChangesNothing(t *testing.T) {
	g := newGrant(t, 1<<20) // 256 frames
	a, err := g.Alloc(200)
	require.NoError(t, err)

	_, err = g.Alloc(100)
	require.ErrorIs(t, err, ErrExhausted)
	require.ErrorIs(t, err, unix.ENOMEM)
	require.Equal(t, int64(200*PageSize), g.UsedBytes())

	b, err := g.Alloc(56)
	require.NoError(t, err, "all or nothing: the failed call took no frame")
	_, err = g.Alloc(1)
	require.True(t, errors.Is(err, ErrExhausted))
	require.Equal(t, g.Size(), g.UsedBytes())

	g.UnrefRuns(a)
	g.UnrefRuns(b)
	require.Zero(t, g.UsedBytes())
	all, err := g.Alloc(256)
	require.NoError(t, err)
	require.Equal(t, []Run{{First: 0, Count: 256}}, all, "freed frames coalesce back into one run")
}

func TestPunchedFramesReadZero(t *testing.T) {
	g := newGrant(t, 4<<20)
	runs, err := g.Alloc(g.Frames())
	require.NoError(t, err)
	for _, f := range runFrames(runs) {
		b := g.FrameBytes(f)
		for i := range b {
			b[i] = 0xA5
		}
	}
	require.GreaterOrEqual(t, fileBlocks(t, g), int64(4<<20)/512, "written frames use host memory")

	g.UnrefRuns(runs)
	require.Zero(t, g.UsedBytes())
	require.Zero(t, fileBlocks(t, g), "freed frames are punched back to the host")

	runs, err = g.Alloc(g.Frames())
	require.NoError(t, err)
	for _, f := range runFrames(runs) {
		for i, c := range g.FrameBytes(f) {
			if c != 0 {
				t.Fatalf("frame %d byte %d = %#x after realloc, want 0", f, i, c)
			}
		}
	}
}

func TestAllocPrefersFewRuns(t *testing.T) {
	g := newGrant(t, 4<<20) // 1024 frames
	var singles []Frame
	for i := 0; i < 1024; i++ {
		r, err := g.Alloc(1)
		require.NoError(t, err)
		singles = append(singles, r[0].First)
	}
	// Free every other frame: only holes of one frame are left.
	for i := 0; i < 1024; i += 2 {
		g.Unref(singles[i])
	}
	runs, err := g.Alloc(10)
	require.NoError(t, err)
	require.Len(t, runs, 10)
	g.UnrefRuns(runs)
	// Free the rest: everything merges into one range again.
	for i := 1; i < 1024; i += 2 {
		g.Unref(singles[i])
	}
	runs, err = g.Alloc(1024)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	g.UnrefRuns(runs)

	// A small request goes to a small hole, keeping big ranges whole.
	big, err := g.Alloc(1000)
	require.NoError(t, err)
	g.UnrefRuns([]Run{{First: big[0].First + 100, Count: 3}})
	one, err := g.Alloc(3)
	require.NoError(t, err)
	require.Equal(t, []Run{{First: big[0].First + 100, Count: 3}}, one)
}

func TestAllocRandomized(t *testing.T) {
	g := newGrant(t, 8<<20) // 2048 frames
	rng := rand.New(rand.NewSource(1))
	owner := map[Frame]int{}
	var held [][]Run
	used := 0
	for step := 0; step < 3000; step++ {
		if len(held) > 0 && rng.Intn(3) == 0 {
			i := rng.Intn(len(held))
			for _, f := range runFrames(held[i]) {
				delete(owner, f)
			}
			used -= len(runFrames(held[i]))
			g.UnrefRuns(held[i])
			held = append(held[:i], held[i+1:]...)
		} else {
			n := 1 + rng.Intn(300)
			runs, err := g.Alloc(n)
			if used+n > g.Frames() {
				require.ErrorIs(t, err, ErrExhausted)
				continue
			}
			require.NoError(t, err)
			require.Len(t, runFrames(runs), n)
			for _, f := range runFrames(runs) {
				_, dup := owner[f]
				require.False(t, dup, "frame %d handed out twice", f)
				require.Less(t, int(f), g.Frames())
				owner[f] = step
			}
			used += n
			held = append(held, runs)
		}
		require.Equal(t, int64(used*PageSize), g.UsedBytes())
	}
	for _, r := range held {
		g.UnrefRuns(r)
	}
	require.Zero(t, g.UsedBytes())
	all, err := g.Alloc(g.Frames())
	require.NoError(t, err)
	require.Len(t, all, 1)
}

// Small frees are zeroed and stay in the host (warm), up to the bound: past it the warm frames
// still free are punched, and so is what does not fit. Every reallocated frame reads zero.
func TestWarmFramesReadZeroAndStayBounded(t *testing.T) {
	g := newGrant(t, 4<<20) // 1024 frames, 128 of them may be warm
	fill := func(runs []Run) {
		for _, f := range runFrames(runs) {
			b := g.FrameBytes(f)
			for i := range b {
				b[i] = 0xA5
			}
		}
	}
	requireZero := func(runs []Run) {
		t.Helper()
		for _, f := range runFrames(runs) {
			for i, c := range g.FrameBytes(f) {
				if c != 0 {
					t.Fatalf("frame %d byte %d = %#x after realloc, want 0", f, i, c)
				}
			}
		}
	}
	const blocksPerFrame = PageSize / 512

	a, err := g.Alloc(100)
	require.NoError(t, err)
	fill(a)
	g.UnrefRuns(a)
	require.Equal(t, int64(100*blocksPerFrame), fileBlocks(t, g), "a small free stays in the host")
	b, err := g.Alloc(100)
	require.NoError(t, err)
	require.Equal(t, a, b, "the same frames come back")
	requireZero(b)

	// 100 warm; 50 more do not fit: the 100 go and the 50 take their place.
	fill(b)
	c, err := g.Alloc(50)
	require.NoError(t, err)
	fill(c)
	g.UnrefRuns(b)
	g.UnrefRuns(c)
	require.Equal(t, int64(50*blocksPerFrame), fileBlocks(t, g), "past the bound the warm frames are punched")

	// A free bigger than the bound is punched at once.
	all, err := g.Alloc(g.Frames())
	require.NoError(t, err)
	requireZero(all)
	fill(all)
	g.UnrefRuns(all)
	require.Zero(t, fileBlocks(t, g), "a big free goes back to the host")
}
