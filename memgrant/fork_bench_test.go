package memgrant

import (
	"testing"
	"time"
)

const forkSize = 64 << 20

// forkBench is a parent with forkSize of written private memory and a ready mapper for
// the next child.
type forkBench struct {
	x    testAS
	addr uint64
}

func newForkBench(b *testing.B) *forkBench {
	x := newTestAS(b, 4*forkSize, 2*forkSize, Layout{EagerLimit: forkSize})
	fb := &forkBench{x: x}
	fb.remap(b)
	return fb
}

// remap gives the parent fresh, private frames again, so that each Fork has pages to
// protect (after a Fork they are copy-on-write already).
func (fb *forkBench) remap(b *testing.B) {
	a, err := fb.x.as.Map(fb.x.lm.Base(), forkSize, ProtRead|ProtWrite, MapFixed, "heap", nil)
	if err != nil {
		b.Fatal(err)
	}
	fb.addr = a
	mem, err := fb.x.lm.Bytes(a, forkSize)
	if err != nil {
		b.Fatal(err)
	}
	touch(mem)
}

func (fb *forkBench) fork(b *testing.B) (*AddressSpace, *LocalMapper) {
	lm, err := NewLocalMapperAt(fb.x.g, fb.x.lm.Size(), fb.x.lm.Base())
	if err != nil {
		b.Fatal(err)
	}
	l := fb.x.as.Layout()
	c, err := fb.x.as.Fork(lm, l)
	if err != nil {
		b.Fatal(err)
	}
	return c, lm
}

func drop(b *testing.B, c *AddressSpace, lm *LocalMapper) {
	if err := lm.Close(); err != nil {
		b.Fatal(err)
	}
	c.Release()
}

// BenchmarkFork64MiB is Fork of 64 MiB of written private memory: the parent's pages
// protected (one host mprotect), the child's table built and mapped (one host mmap).
func BenchmarkFork64MiB(b *testing.B) {
	fb := newForkBench(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, lm := fb.fork(b)
		b.StopTimer()
		drop(b, c, lm)
		fb.remap(b)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(forkSize/PageSize), "ns/page")
}

// BenchmarkForkChildReadPass reads one byte a page of a fresh child: no fault expected.
func BenchmarkForkChildReadPass(b *testing.B) {
	fb := newForkBench(b)
	var d time.Duration
	var sum byte
	for i := 0; i < b.N; i++ {
		c, lm := fb.fork(b)
		mem, err := lm.Bytes(fb.addr, forkSize)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		for off := 0; off < forkSize; off += PageSize {
			sum += mem[off]
		}
		d += time.Since(t0)
		drop(b, c, lm)
	}
	_ = sum
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N)/(forkSize/PageSize), "ns/page")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkCowFault is a child writing one byte a page of its 64 MiB, in order: a
// HandleFault (copy to fresh frames, host map of them) where the page is still
// copy-on-write, then the write itself. Reported per page written.
func BenchmarkCowFault(b *testing.B) {
	fb := newForkBench(b)
	var d time.Duration
	for i := 0; i < b.N; i++ {
		c, lm := fb.fork(b)
		mem, err := lm.Bytes(fb.addr, forkSize)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		for off := uint64(0); off < forkSize; off += PageSize {
			// The tenant faults only where its page is still copy-on-write.
			if isCow(c, fb.addr+off) {
				if ok, err := c.HandleFault(fb.addr+off, true); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
			mem[off] = 2
		}
		d += time.Since(t0)
		drop(b, c, lm)
	}
	b.ReportMetric(float64(d.Nanoseconds())/float64(b.N)/(forkSize/PageSize), "ns/page")
	b.ReportMetric(0, "ns/op")
}

func isCow(as *AddressSpace, va uint64) bool {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.pt.get(va).cow()
}
