package crossing

import (
	"sync"
	"time"
)

// rdtsc reads the time-stamp counter; the stub spins in TSC cycles too, so both sides share a unit.
func rdtsc() uint64

// cpuRelax is the PAUSE instruction, for spin loops.
func cpuRelax()

var (
	tscOnce     sync.Once
	tscPerMicro uint64
)

// CyclesPerMicrosecond calibrates the TSC once against the monotonic clock.
func CyclesPerMicrosecond() uint64 {
	tscOnce.Do(func() {
		t0, c0 := time.Now(), rdtsc()
		for time.Since(t0) < 200*time.Microsecond {
			cpuRelax()
		}
		c1, d := rdtsc(), time.Since(t0)
		tscPerMicro = (c1 - c0) * 1000 / uint64(d.Nanoseconds())
		if tscPerMicro == 0 {
			tscPerMicro = 1000
		}
	})
	return tscPerMicro
}

// Cycles reads the time-stamp counter, the unit of spin windows.
func Cycles() uint64 { return rdtsc() }
