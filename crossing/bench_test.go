package crossing

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// loopGetpid is tenant code that calls getpid forever.
var loopGetpid = []byte{
	0xb8, 39, 0, 0, 0, // mov $39, %eax
	0x0f, 0x05, // syscall
	0xeb, 0xf7, // jmp back
}

func benchRoundTrip(b *testing.B, spinMicros uint64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, th := startTenant(&testing.T{}, loopGetpid)
	spin := spinMicros * CyclesPerMicrosecond()
	if err := th.Resume(0, spin, spin); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		th.Regs.Rax = 1
		if err := th.Resume(0, spin, spin); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	th.Stub().Release()
}

func BenchmarkRoundTripSpin(b *testing.B)  { benchRoundTrip(b, 50) }
func BenchmarkRoundTripSleep(b *testing.B) { benchRoundTrip(b, 0) }
func BenchmarkNativeGetpid(b *testing.B) {
	for i := 0; i < b.N; i++ {
		unix.Getpid()
	}
}
