package memgrant

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fork forks parent into a new address space whose local region sits elsewhere in this
// process at the same tenant addresses, released and closed at the end of the test.
func fork(t testing.TB, parent testAS) testAS {
	t.Helper()
	lm, err := NewLocalMapperAt(parent.g, parent.lm.Size(), parent.lm.Base())
	require.NoError(t, err)
	l := parent.as.Layout()
	l.Reserved = nil
	child, err := parent.as.Fork(lm, l)
	require.NoError(t, err)
	t.Cleanup(func() {
		child.Release()
		require.NoError(t, lm.Close())
	})
	return testAS{g: parent.g, lm: lm, as: child}
}

// hostRights returns the rights ("rw-", "r--"...) of the host mapping that holds the
// tenant page addr of x, as /proc/self/maps shows them.
func hostRights(t testing.TB, x testAS, addr uint64) string {
	t.Helper()
	local, err := x.lm.HostAddr(addr)
	require.NoError(t, err)
	f, err := os.Open("/proc/self/maps")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var lo, hi uint64
		var perms string
		if _, err := fmt.Sscanf(sc.Text(), "%x-%x %s", &lo, &hi, &perms); err != nil {
			continue
		}
		if lo <= local && local < hi {
			return perms[:3]
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("no host mapping holds %#x", local)
	return ""
}

func TestForkSharesFramesCopyOnWrite(t *testing.T) {
	const pages = 64
	const size = pages * PageSize
	x := newTestAS(t, 16<<20, 4<<20, Layout{})
	addr, err := x.as.Map(0, size, ProtRead|ProtWrite, 0, "heap", pattern)
	require.NoError(t, err)
	ro, err := x.as.Map(0, 2*PageSize, ProtRead, 0, "text", pattern)
	require.NoError(t, err)
	used := x.g.UsedBytes()
	require.Equal(t, hostRights(t, x, addr), "rw-")

	c := fork(t, x)
	require.Equal(t, used, x.g.UsedBytes(), "fork shares every frame")
	require.Equal(t, x.as.VMAs(), c.as.VMAs())
	f0, ok := x.as.Translate(addr)
	require.True(t, ok)
	cf0, ok := c.as.Translate(addr)
	require.True(t, ok)
	require.Equal(t, f0, cf0)
	require.Equal(t, 2, x.g.Refs(f0))
	require.Equal(t, "r--", hostRights(t, x, addr), "the parent lost the write right")
	require.Equal(t, "r--", hostRights(t, c, addr))

	// Reads on both sides take no fault: the child was mapped at Fork.
	pm, cm := x.local(t, addr, size), c.local(t, addr, size)
	runtime.LockOSThread()
	before := threadMinflt(t)
	var bad int
	for off := uint64(0); off < size; off += PageSize {
		if pm[off] != patternAt(off) || cm[off] != patternAt(off) || cm[off+PageSize-1] != patternAt(off+PageSize-1) {
			bad++
		}
	}
	faults := threadMinflt(t) - before
	runtime.UnlockOSThread()
	require.Zero(t, bad)
	require.LessOrEqual(t, faults, int64(faultSlack), "reading %d pages on both sides after fork took %d faults", pages, faults)
	require.Equal(t, byte(patternAt(PageSize)), c.local(t, ro, PageSize+1)[PageSize])

	// A child write fault: the child gets its own copy, the parent keeps its data.
	ok, err = c.as.HandleFault(addr+5, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint64(1), c.as.CowFaults())
	require.Zero(t, c.as.Faults(), "a copy-on-write break is not a population")
	cf0, _ = c.as.Translate(addr)
	require.NotEqual(t, f0, cf0)
	require.Equal(t, used+PageSize, x.g.UsedBytes())
	require.Equal(t, 1, x.g.Refs(f0))
	require.Equal(t, "rw-", hostRights(t, c, addr))
	require.Equal(t, patternAt(7), cm[7], "the copy holds the data")
	cm[5] = 'C'
	require.Equal(t, patternAt(5), pm[5], "the parent is intact")

	// A read fault on a copy-on-write page changes nothing.
	ok, err = c.as.HandleFault(addr+PageSize, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "r--", hostRights(t, c, addr+PageSize))
	require.Equal(t, uint64(1), c.as.CowFaults())

	// The parent's frame has no other holder now: its write takes it back, no copy.
	ok, err = x.as.HandleFault(addr, true)
	require.NoError(t, err)
	require.True(t, ok)
	pf, _ := x.as.Translate(addr)
	require.Equal(t, f0, pf)
	require.Equal(t, used+PageSize, x.g.UsedBytes())
	require.Equal(t, uint64(1), x.as.CowFaults())
	pm[5] = 'P'
	require.Equal(t, byte('C'), cm[5])

	// The sandbox writing for the child (read(2) into its buffer) breaks sharing too.
	require.NoError(t, c.as.CopyOut(addr+2*PageSize, []byte("kid")))
	require.Equal(t, "kid", string(cm[2*PageSize:2*PageSize+3]))
	require.Equal(t, patternAt(2*PageSize), pm[2*PageSize])
	require.Equal(t, used+2*PageSize, x.g.UsedBytes())
	// Big copies take the same path.
	big := make([]byte, 8*PageSize)
	for i := range big {
		big[i] = 'B'
	}
	require.NoError(t, c.as.CopyOut(addr+8*PageSize, big))
	require.Equal(t, patternAt(8*PageSize), pm[8*PageSize])
	require.Equal(t, byte('B'), cm[16*PageSize-1])
	require.Equal(t, used+10*PageSize, x.g.UsedBytes())

	// Protect keeps shared pages read-only on the host even when it gives write back.
	require.NoError(t, x.as.Protect(addr, size, ProtRead))
	require.NoError(t, x.as.Protect(addr, size, ProtRead|ProtWrite))
	require.Equal(t, "rw-", hostRights(t, x, addr), "the parent's own page")
	require.Equal(t, "r--", hostRights(t, x, addr+3*PageSize), "still shared with the child")

	// Once the child is gone, the parent's writes take the frames back without copying.
	c.as.Release()
	require.Equal(t, used, x.g.UsedBytes())
	f3, _ := x.as.Translate(addr + 3*PageSize)
	require.Equal(t, 1, x.g.Refs(f3))
	ok, err = x.as.HandleFault(addr+3*PageSize, true)
	require.NoError(t, err)
	require.True(t, ok)
	g3, _ := x.as.Translate(addr + 3*PageSize)
	require.Equal(t, f3, g3)
	require.Equal(t, used, x.g.UsedBytes())
	pm[3*PageSize] = 'Q'
	require.NoError(t, x.as.Unmap(addr, size))
	require.NoError(t, x.as.Unmap(ro, 2*PageSize))
	require.Zero(t, x.g.UsedBytes())
}

func TestHundredForks(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	addr, err := x.as.Map(0, 2*PageSize, ProtRead|ProtWrite, 0, "data", nil)
	require.NoError(t, err)
	require.NoError(t, x.as.CopyOut(addr, []byte("parent")))
	f0, _ := x.as.Translate(addr)
	f1, _ := x.as.Translate(addr + PageSize)

	var kids []testAS
	for i := 0; i < 100; i++ {
		kids = append(kids, fork(t, x))
	}
	require.Equal(t, 101, x.g.Refs(f0))
	require.Equal(t, 101, x.g.Refs(f1))
	require.Equal(t, int64(2*PageSize), x.g.UsedBytes())
	for i, k := range kids {
		ok, err := k.as.HandleFault(addr, true)
		require.NoError(t, err)
		require.True(t, ok)
		mem := k.local(t, addr, PageSize)
		require.Equal(t, "parent", string(mem[:6]))
		copy(mem, fmt.Sprintf("kid%03d", i))
	}
	require.Equal(t, int64(102*PageSize), x.g.UsedBytes(), "one copy per child")
	require.Equal(t, 1, x.g.Refs(f0), "every child has its own page")
	require.Equal(t, 101, x.g.Refs(f1))
	for i, k := range kids {
		require.Equal(t, fmt.Sprintf("kid%03d", i), string(k.local(t, addr, 6)))
		got := make([]byte, 6)
		require.NoError(t, k.as.CopyIn(got, addr))
		require.Equal(t, fmt.Sprintf("kid%03d", i), string(got))
	}
	require.Equal(t, "parent", string(x.local(t, addr, 6)))
	for _, k := range kids {
		k.as.Release()
	}
	require.Equal(t, 1, x.g.Refs(f0))
	require.Equal(t, 1, x.g.Refs(f1))
	require.Equal(t, int64(2*PageSize), x.g.UsedBytes())
	require.Zero(t, x.as.CowFaults())
	ok, err := x.as.HandleFault(addr+PageSize, true)
	require.NoError(t, err)
	require.True(t, ok)
	g1, _ := x.as.Translate(addr + PageSize)
	require.Equal(t, f1, g1, "the last holder takes its frame back")
	require.Equal(t, int64(2*PageSize), x.g.UsedBytes())
}

func TestForkOfChildAndGrandchild(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	addr, err := x.as.Map(0, PageSize, ProtRead|ProtWrite, 0, "data", nil)
	require.NoError(t, err)
	require.NoError(t, x.as.CopyOut(addr, []byte("A")))
	c := fork(t, x)
	gc := fork(t, c)
	f, _ := x.as.Translate(addr)
	require.Equal(t, 3, x.g.Refs(f))
	require.NoError(t, c.as.CopyOut(addr, []byte("B")))
	require.Equal(t, "A", string(x.local(t, addr, 1)))
	require.Equal(t, "B", string(c.local(t, addr, 1)))
	require.Equal(t, "A", string(gc.local(t, addr, 1)))
	require.Equal(t, "r--", hostRights(t, gc, addr))
	require.Equal(t, "rw-", hostRights(t, c, addr))
}

func TestSharedAnonymousAcrossFork(t *testing.T) {
	x := newTestAS(t, 16<<20, 8<<20, Layout{EagerLimit: 4 * PageSize})
	sh, err := x.as.Map(0, 4*PageSize, ProtRead|ProtWrite, MapShared, "shm", nil)
	require.NoError(t, err)
	lazy, err := x.as.Map(0, 4<<20, ProtRead|ProtWrite, MapShared, "lazy shm", nil)
	require.NoError(t, err)
	priv, err := x.as.Map(0, 4*PageSize, ProtRead|ProtWrite, 0, "private", nil)
	require.NoError(t, err)
	require.Equal(t, int64(8*PageSize), x.g.UsedBytes())
	copy(x.local(t, sh, 5), "hello")
	ok, err := x.as.HandleFault(lazy, true)
	require.NoError(t, err)
	require.True(t, ok)
	copy(x.local(t, lazy, 3), "top")

	c := fork(t, x)
	require.Equal(t, "rw-", hostRights(t, x, sh), "shared pages keep the write right")
	require.Equal(t, "rw-", hostRights(t, c, sh))
	require.Equal(t, "r--", hostRights(t, c, priv))

	// A write in the child is seen by the parent, and the other way round.
	cm := c.local(t, sh, 4*PageSize)
	require.Equal(t, "hello", string(cm[:5]))
	copy(cm[3*PageSize:], "child")
	require.Equal(t, "child", string(x.local(t, sh+3*PageSize, 5)))
	copy(x.local(t, sh+PageSize, 6), "parent")
	require.Equal(t, "parent", string(cm[PageSize:PageSize+6]))
	require.Zero(t, c.as.CowFaults())

	// Lazy pages first touched after the fork are shared as well.
	require.Equal(t, "top", string(c.local(t, lazy, 3)))
	used := x.g.UsedBytes()
	ok, err = c.as.HandleFault(lazy+(3<<20), true)
	require.NoError(t, err)
	require.True(t, ok)
	grown := x.g.UsedBytes()
	require.Greater(t, grown, used)
	copy(c.local(t, lazy+(3<<20), 5), "later")
	ok, err = x.as.HandleFault(lazy+(3<<20), false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, grown, x.g.UsedBytes(), "the parent finds the child's frames")
	require.Equal(t, "later", string(x.local(t, lazy+(3<<20), 5)))
	pf, _ := x.as.Translate(lazy + 40*PageSize)
	cf, _ := c.as.Translate(lazy + 40*PageSize)
	require.Equal(t, pf, cf)
	require.NoError(t, c.as.CopyOut(lazy+(3<<20), []byte("sandbox")))
	require.Equal(t, "sandbox", string(x.local(t, lazy+(3<<20), 7)))

	// Splits and partial unmaps keep the object whole until its last mapping goes.
	require.NoError(t, x.as.Unmap(sh+PageSize, PageSize))
	require.NoError(t, x.as.Protect(sh+2*PageSize, PageSize, ProtRead))
	require.NoError(t, x.as.Protect(sh+2*PageSize, PageSize, ProtRead|ProtWrite))
	require.Len(t, vmasNamed(x.as, "shm"), 2, "the pieces either side of the hole merged back")
	copy(cm[2*PageSize:], "again")
	require.Equal(t, "again", string(x.local(t, sh+2*PageSize, 5)))
	c.as.Release()
	require.Equal(t, "child", string(x.local(t, sh+3*PageSize, 5)), "the parent keeps the data")
	require.NoError(t, x.as.Unmap(sh, 4*PageSize))
	require.NoError(t, x.as.Unmap(lazy, 4<<20))
	require.NoError(t, x.as.Unmap(priv, 4*PageSize))
	require.Zero(t, x.g.UsedBytes(), "the objects gave their frames back")
}

func vmasNamed(as *AddressSpace, name string) []VMA {
	var out []VMA
	for _, v := range as.VMAs() {
		if strings.HasPrefix(v.Name, name) && len(v.Name) == len(name) {
			out = append(out, v)
		}
	}
	return out
}

func TestForkRefusesLayoutThatDoesNotFit(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	addr, err := x.as.Map(0, 2*PageSize, ProtRead|ProtWrite, 0, "data", nil)
	require.NoError(t, err)
	lm, err := NewLocalMapperAt(x.g, x.lm.Size(), x.lm.Base())
	require.NoError(t, err)
	defer lm.Close()
	l := x.as.Layout()
	l.Reserved = []Range{{Start: addr, End: addr + PageSize}}
	_, err = x.as.Fork(lm, l)
	require.Error(t, err)
	require.Equal(t, "rw-", hostRights(t, x, addr), "a refused fork changes nothing")
	require.Equal(t, int64(2*PageSize), x.g.UsedBytes())
	f, _ := x.as.Translate(addr)
	require.Equal(t, 1, x.g.Refs(f))
}

func TestCowFaultsInOrderBreakInBatches(t *testing.T) {
	const pages = 128
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	addr, err := x.as.Map(0, 2*pages*PageSize, ProtRead|ProtWrite, 0, "heap", pattern)
	require.NoError(t, err)
	c := fork(t, x)
	used := x.g.UsedBytes()

	// A lone write copies one page only.
	ok, err := c.as.HandleFault(addr+(pages+5)*PageSize, true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, used+PageSize, x.g.UsedBytes())
	require.Equal(t, "r--", hostRights(t, c, addr+(pages+6)*PageSize))

	// Writes in address order are served in growing windows: 1, 2, 4, 8, 16, 32, 64, 64 pages.
	var calls int
	cm := c.local(t, addr, pages*PageSize)
	for i := uint64(0); i < pages; i++ {
		if hostRights(t, c, addr+i*PageSize) == "r--" {
			ok, err := c.as.HandleFault(addr+i*PageSize, true)
			require.NoError(t, err)
			require.True(t, ok)
			calls++
		}
		cm[i*PageSize] = 'c'
	}
	require.Equal(t, 8, calls)
	require.Equal(t, uint64(9), c.as.CowFaults())
	// The last window (64 pages from page 127) runs ahead of the writes up to the page
	// copied alone (133): 127+6 copies, and that one.
	require.Equal(t, used+134*PageSize, x.g.UsedBytes())
	pm := x.local(t, addr, pages*PageSize)
	for i := uint64(0); i < pages; i++ {
		require.Equal(t, patternAt(i*PageSize), pm[i*PageSize])
		require.Equal(t, patternAt(i*PageSize+1), cm[i*PageSize+1])
	}
}

// A page that a child wrote after one fork is copied for the next child at fork time: neither
// side takes a copy-on-write fault for it, and each still sees its own data.
func TestForkCopiesThePagesChildrenWrote(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	addr, err := x.as.Map(0, 4*PageSize, ProtRead|ProtWrite, 0, "data", pattern)
	require.NoError(t, err)

	c1 := fork(t, x)
	require.NoError(t, c1.as.CopyOut(addr+PageSize, []byte("one")))
	require.Equal(t, uint64(1), c1.as.CowFaults())
	c1.as.Release()

	require.NoError(t, x.as.CopyOut(addr+PageSize, []byte("P")))
	c2 := fork(t, x)
	require.Equal(t, "rw-", hostRights(t, x, addr+PageSize), "the parent keeps the hot page writable")
	require.Equal(t, "rw-", hostRights(t, c2, addr+PageSize), "the child has its own copy")
	require.Equal(t, "r--", hostRights(t, c2, addr), "other pages stay shared")
	pf, _ := x.as.Translate(addr + PageSize)
	cf, _ := c2.as.Translate(addr + PageSize)
	require.NotEqual(t, pf, cf)
	require.Equal(t, 1, x.g.Refs(pf))
	require.Equal(t, "P", string(c2.local(t, addr+PageSize, 1)), "the copy is the parent's data at fork")
	require.NoError(t, c2.as.CopyOut(addr+PageSize, []byte("two")))
	require.NoError(t, x.as.CopyOut(addr+PageSize, []byte("Q")))
	require.Zero(t, c2.as.CowFaults())
	require.Equal(t, "two", string(c2.local(t, addr+PageSize, 3)))
	require.Equal(t, "Q", string(x.local(t, addr+PageSize, 1)))
	c2.as.Release()

	// A program the child execs is not its parent's: its writes teach the parent nothing.
	c3 := fork(t, x)
	c3.as.ForgetParent()
	require.NoError(t, c3.as.CopyOut(addr+3*PageSize, []byte("x")))
	c3.as.Release()
	c4 := fork(t, x)
	require.Equal(t, "r--", hostRights(t, c4, addr+3*PageSize))
}

// Empty takes every tenant mapping out of the host and gives every frame back.
func TestEmpty(t *testing.T) {
	x := newTestAS(t, 16<<20, 1<<20, Layout{})
	addr, err := x.as.Map(0, 8*PageSize, ProtRead|ProtWrite, 0, "data", pattern)
	require.NoError(t, err)
	require.NotZero(t, x.g.UsedBytes())
	local, err := x.lm.HostAddr(addr)
	require.NoError(t, err)
	require.NoError(t, x.as.Empty())
	require.Zero(t, x.g.UsedBytes())
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	for _, line := range strings.Split(string(maps), "\n") {
		var lo, hi uint64
		if _, err := fmt.Sscanf(line, "%x-%x", &lo, &hi); err == nil && lo <= local && local < hi {
			require.NotContains(t, line, "rw-s", "the host still maps the frames: %s", line)
		}
	}
	require.Error(t, x.as.Empty(), "an emptied address space is released")
}

// A second child forked into the host process the first one left (ForkOver) gets the same view
// as a fresh fork, but the host maps only what differs: the first child's own pages go, the page
// it had copied on write goes back to the shared frame, and the rest stays as it was.
func TestForkOverMapsOnlyWhatDiffers(t *testing.T) {
	const pages = 32
	x := newTestAS(t, 16<<20, 4<<20, Layout{})
	heap, err := x.as.Map(0, pages*PageSize, ProtRead|ProtWrite, 0, "heap", pattern)
	require.NoError(t, err)
	text, err := x.as.Map(0, 4*PageSize, ProtRead|ProtExec, 0, "text", pattern)
	require.NoError(t, err)
	first := fork(t, x)
	lm, c1, l := first.lm, first.as, first.as.Layout()

	// The first child writes a page (its own copy) and maps one more page, then is done.
	ok, err := c1.HandleFault(heap+3*PageSize, true)
	require.NoError(t, err)
	require.True(t, ok)
	first.local(t, heap+3*PageSize, PageSize)[7] = 0xAB
	own, err := c1.Map(0, PageSize, ProtRead|ProtWrite, 0, "own", nil)
	require.NoError(t, err)
	first.local(t, own, PageSize)[0] = 0xCD
	used := x.g.UsedBytes()

	_, opsBefore := lm.Stats()
	c2, err := x.as.ForkOver(c1, l)
	require.NoError(t, err)
	defer c2.Release()
	_, opsAfter := lm.Stats()
	second := testAS{g: x.g, lm: lm, as: c2}
	require.LessOrEqual(t, opsAfter-opsBefore, uint64(3), "unmap the child's own page, map the written one")

	require.Equal(t, patternAt(3*PageSize+7), second.local(t, heap+3*PageSize, PageSize)[7],
		"the second child sees the parent's data, not the first child's write")
	require.Equal(t, patternAt(9*PageSize), second.local(t, heap, pages*PageSize)[9*PageSize])
	require.Equal(t, patternAt(PageSize+1), second.local(t, text, 2*PageSize)[PageSize+1])
	require.Equal(t, "---", hostRights(t, second, own), "the first child's own page is gone")
	require.Equal(t, "r--", hostRights(t, second, heap), "copy-on-write, as after a fresh fork")
	require.Equal(t, "r-x", hostRights(t, second, text))
	require.Less(t, x.g.UsedBytes(), used, "the first child's own frames went back")
	f, _ := x.as.Translate(heap + 9*PageSize)
	require.Equal(t, 2, x.g.Refs(f), "the parent's and the second child's: the first child's went")
}

// A futex in shared memory is named by its frame: the same in the parent and a child, while
// a private page's frame (shared copy-on-write after a fork) is not offered.
func TestSharedFrameNamesSharedMemoryOnly(t *testing.T) {
	x := newTestAS(t, 16<<20, 8<<20, Layout{EagerLimit: 4 * PageSize})
	sh, err := x.as.Map(0, 2*PageSize, ProtRead|ProtWrite, MapShared, "shm", nil)
	require.NoError(t, err)
	priv, err := x.as.Map(0, PageSize, ProtRead|ProtWrite, 0, "private", nil)
	require.NoError(t, err)
	c := fork(t, x)
	pf, ok := x.as.SharedFrame(sh + PageSize + 8)
	require.True(t, ok)
	cf, ok := c.as.SharedFrame(sh + PageSize + 8)
	require.True(t, ok)
	require.Equal(t, pf, cf)
	other, _ := x.as.SharedFrame(sh)
	require.NotEqual(t, pf, other, "each page its own frame")
	_, ok = x.as.SharedFrame(priv)
	require.False(t, ok)
	_, ok = x.as.SharedFrame(0x1000)
	require.False(t, ok, "nothing mapped there")
}

// A page the children of a parent write after each fork is copied at the next fork into the
// frame the last child had there, when the next child comes into that child's host process
// (ForkOver): the host already maps that frame with those rights, so nothing is mapped, and the
// child still sees the parent's data, not its sibling's.
func TestForkOverCopiesIntoTheFrameTheLastChildWrote(t *testing.T) {
	x := newTestAS(t, 16<<20, 4<<20, Layout{})
	heap, err := x.as.Map(0, 4*PageSize, ProtRead|ProtWrite, 0, "heap", pattern)
	require.NoError(t, err)
	child := fork(t, x)
	lm, c1, l := child.lm, child.as, child.as.Layout()
	require.NoError(t, c1.CopyOut(heap+PageSize, []byte("one")))
	require.Equal(t, uint64(1), c1.CowFaults())
	written, _ := c1.Translate(heap + PageSize)

	prev := c1
	for i, word := range []string{"two", "three"} {
		require.NoError(t, x.as.CopyOut(heap+PageSize, []byte{'P', byte('0' + i)}))
		_, opsBefore := lm.Stats()
		next, err := x.as.ForkOver(prev, l)
		require.NoError(t, err)
		_, opsAfter := lm.Stats()
		child = testAS{g: x.g, lm: lm, as: next}
		require.Zero(t, opsAfter-opsBefore, "child %d: the host maps its sibling's frame there already", i+2)
		f, _ := next.Translate(heap + PageSize)
		require.Equal(t, written, f, "child %d takes the frame its sibling wrote", i+2)
		require.Equal(t, 1, x.g.Refs(f))
		require.Equal(t, "rw-", hostRights(t, child, heap+PageSize))
		require.Equal(t, "r--", hostRights(t, child, heap), "pages nobody wrote stay shared")
		require.Equal(t, []byte{'P', byte('0' + i), patternAt(PageSize + 2)}, child.local(t, heap+PageSize, 3),
			"child %d sees the parent's data at its fork, not its sibling's", i+2)
		require.NoError(t, next.CopyOut(heap+PageSize, []byte(word)))
		require.Zero(t, next.CowFaults())
		require.Equal(t, []byte{'P', byte('0' + i)}, x.local(t, heap+PageSize, 2), "the parent keeps its data")
		prev = next
	}
	prev.Release()
}
