package memgrant

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchMap maps and unmaps pages pages per iteration and reports the cost of Map alone
// per page (map-ns/page) besides the usual ns/op for the pair.
func benchMap(b *testing.B, pages int) {
	x := newTestAS(b, 256<<20, 256<<20, Layout{})
	length := uint64(pages) * PageSize
	var mapTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		a, err := x.as.Map(0, length, ProtRead|ProtWrite, 0, "bench", nil)
		mapTime += time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if err := x.as.Unmap(a, length); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(mapTime.Nanoseconds())/float64(b.N)/float64(pages), "map-ns/page")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(pages), "map+unmap-ns/page")
}

func BenchmarkMap1Page(b *testing.B)    { benchMap(b, 1) }
func BenchmarkMap512Pages(b *testing.B) { benchMap(b, 512) }

const touchSize = 16 << 20

func touch(mem []byte) {
	for off := 0; off < len(mem); off += PageSize {
		mem[off] = 1
	}
}

// BenchmarkFirstTouch16MiB compares mapping 16 MiB and touching every page: through
// an eager Map (no fault on first touch) against a native anonymous mmap (one fault a
// page, or fewer with fault-around) in the same process. Only the ratio means anything.
func BenchmarkFirstTouch16MiB(b *testing.B) {
	b.Run("endo", func(b *testing.B) {
		x := newTestAS(b, 64<<20, 64<<20, Layout{EagerLimit: touchSize})
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			a, err := x.as.Map(0, touchSize, ProtRead|ProtWrite, 0, "bench", nil)
			if err != nil {
				b.Fatal(err)
			}
			mem, err := x.lm.Bytes(a, touchSize)
			if err != nil {
				b.Fatal(err)
			}
			touch(mem)
			b.StopTimer()
			if err := x.as.Unmap(a, touchSize); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(touchSize/PageSize), "ns/page")
	})
	b.Run("native", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			mem, err := unix.Mmap(-1, 0, touchSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				b.Fatal(err)
			}
			touch(mem)
			b.StopTimer()
			if err := unix.Munmap(mem); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(touchSize/PageSize), "ns/page")
	})
}

// BenchmarkLazyFault measures HandleFault on a lazy mapping: each fault populates a
// 2 MiB window; reported per page populated.
func BenchmarkLazyFault(b *testing.B) {
	x := newTestAS(b, 64<<20, 64<<20, Layout{EagerLimit: PageSize})
	a, err := x.as.Map(0, 32<<20, ProtRead|ProtWrite, 0, "lazy", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		va := a + uint64(i%16)<<21
		if ok, err := x.as.HandleFault(va, true); !ok || err != nil {
			b.Fatal(ok, err)
		}
		if i%16 == 15 {
			b.StopTimer()
			if err := x.as.Protect(a, 32<<20, ProtRead|ProtWrite); err != nil {
				b.Fatal(err)
			}
			if _, err := x.as.Map(a, 32<<20, ProtRead|ProtWrite, MapFixed, "lazy", nil); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/chunkPages, "ns/page")
}

func benchCopy(b *testing.B, n int, out bool) {
	x := newTestAS(b, 16<<20, 16<<20, Layout{})
	a, err := x.as.Map(0, 1<<20, ProtRead|ProtWrite, 0, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, n)
	at := a + 32*PageSize - uint64(n)/2 // straddle a page boundary
	if err := x.as.CopyOut(at, buf); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(n))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if out {
			err = x.as.CopyOut(at, buf)
		} else {
			err = x.as.CopyIn(buf, at)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCopyIn64(b *testing.B)  { benchCopy(b, 64, false) }
func BenchmarkCopyIn4K(b *testing.B)  { benchCopy(b, 4096, false) }
func BenchmarkCopyOut4K(b *testing.B) { benchCopy(b, 4096, true) }
func BenchmarkCopyIn64K(b *testing.B) { benchCopy(b, 64<<10, false) }

// BenchmarkMap512PagesFilled is BenchmarkMap512Pages for a private copy of file data:
// the sandbox writes every frame through its own view before the stub maps it.
func BenchmarkMap512PagesFilled(b *testing.B) {
	x := newTestAS(b, 256<<20, 256<<20, Layout{})
	const length = 512 * PageSize
	src := make([]byte, length)
	fill := func(off uint64, dst []byte) error {
		copy(dst, src[off:])
		return nil
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a, err := x.as.Map(0, length, ProtRead|ProtExec, 0, "file", fill)
		if err != nil {
			b.Fatal(err)
		}
		if err := x.as.Unmap(a, length); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/512, "map+unmap-ns/page")
}

// BenchmarkHostMap512Pages is the floor under BenchmarkMap512Pages: the same host
// calls (mmap of 512 fresh frames with MAP_POPULATE, then unmap and punch) without
// the address space's bookkeeping.
func BenchmarkHostMap512Pages(b *testing.B) {
	g := newGrant(b, 256<<20)
	lm, err := NewLocalMapper(g, 4<<20)
	if err != nil {
		b.Fatal(err)
	}
	defer lm.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runs, err := g.Alloc(512)
		if err != nil || len(runs) != 1 {
			b.Fatal(runs, err)
		}
		err = lm.Apply([]HostOp{
			{Kind: OpMap, Addr: lm.Base(), Length: 512 * PageSize, Prot: ProtRead | ProtWrite, Offset: runs[0].First.Offset()},
			{Kind: OpUnmap, Addr: lm.Base(), Length: 512 * PageSize},
		})
		if err != nil {
			b.Fatal(err)
		}
		g.UnrefRuns(runs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/512, "map+unmap-ns/page")
}

// BenchmarkCopyOutFresh1MiB writes 1 MiB into a freshly mapped buffer, as read(2) into
// a new buffer does: the stub populated the pages, the sandbox's own view has not seen
// them yet. Reported per page, map and unmap included.
func BenchmarkCopyOutFresh1MiB(b *testing.B) {
	x := newTestAS(b, 64<<20, 64<<20, Layout{})
	src := make([]byte, 1<<20)
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a, err := x.as.Map(0, 1<<20, ProtRead|ProtWrite, 0, "buf", nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := x.as.CopyOut(a, src); err != nil {
			b.Fatal(err)
		}
		if err := x.as.Unmap(a, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/256, "ns/page")
}
