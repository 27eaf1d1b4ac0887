package memgrant

import "golang.org/x/sys/unix"

// Warm frames. A punched frame costs the host a page allocation and a zeroing when it is next
// touched, and the punch itself zaps the sandbox's own view of it (a TLB shootdown across the
// sandbox's CPUs, dear on a paravirtualised host). A process's exit and the fork and exec that
// follow free and take tens of frames each: measured here, fork+exec+wait took 2.2-2.5 ms with
// freed frames zeroed and kept, 3.0-3.2 ms with them punched. So freed frames stay in the host,
// zeroed through the sandbox's view, up to warmFrames of them (1/warmShare of a small grant).
// When that many are kept, the warm frames still free are punched all at once and the count
// starts again: frames the allocator does not come back to do not hold the host's memory for
// long. Warm frames are free frames like any other to the allocator, which keeps free runs whole.

const (
	warmFrames = 2048 // 8 MiB
	warmShare  = 8
)

// cool decides, for each run of frames just freed, whether it is zeroed and kept (true) or
// punched, and does it, outside g.mu. The runs are not in the free pool yet.
func (g *Grant) cool(runs []Run) []bool {
	warm := make([]bool, len(runs))
	g.mu.Lock()
	for i, r := range runs {
		if g.warmN+uint32(r.Count) > g.warmMax {
			g.flushWarm()
		}
		if g.warmN+uint32(r.Count) <= g.warmMax {
			warm[i] = true
			g.warmN += uint32(r.Count)
		}
	}
	g.mu.Unlock()
	for i, r := range runs {
		if warm[i] {
			g.zero(r)
		} else {
			g.punch(r)
		}
	}
	return warm
}

// flushWarm punches every warm frame that is still free. g.mu is held: none may be taken
// meanwhile. Frames being zeroed to be warm stay counted.
func (g *Grant) flushWarm() {
	var first, n uint32
	flush := func() {
		if n > 0 {
			g.punch(Run{First: Frame(first), Count: int(n)})
			g.warmN -= n
		}
		n = 0
	}
	for w, bits := range g.warm {
		if bits == 0 {
			flush()
			continue
		}
		for b := range 64 {
			f := uint32(w*64 + b)
			if bits&(1<<b) == 0 {
				flush()
				continue
			}
			if n == 0 {
				first = f
			}
			n++
		}
		g.warm[w] = 0
	}
	flush()
}

// setWarm marks run r warm. g.mu is held.
func (g *Grant) setWarm(r Run) {
	for f := uint32(r.First); f < uint32(r.First)+uint32(r.Count); f++ {
		g.warm[f/64] |= 1 << (f % 64)
	}
}

// warmTaken unmarks the warm frames of run r, which Alloc took. g.mu is held.
func (g *Grant) warmTaken(r Run) {
	for f := uint32(r.First); f < uint32(r.First)+uint32(r.Count); f++ {
		if w := &g.warm[f/64]; *w&(1<<(f%64)) != 0 {
			*w &^= 1 << (f % 64)
			g.warmN--
		}
	}
}

// zero clears the run's frames through the sandbox's view, populating the view first in one
// call where it has not seen them (a fault a page costs far more).
func (g *Grant) zero(r Run) {
	g.viewRun(r.First, r.Count, unix.MADV_POPULATE_WRITE)
	clear(g.runBytes(r.First, r.Count))
}
