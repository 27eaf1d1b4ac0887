package crossing

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// blockingTestWord is the futex word of TestBlockingSyscallLetsTheRuntimeGoOn: a global, since a
// goroutine's stack moves and the host call sees only the word's address.
var blockingTestWord atomic.Uint32

// A goroutine asleep in BlockingSyscall6 lets the rest of the program run on the only P, and lets
// a garbage collection stop the world (a raw system call holds the P as if running: both would
// wait until it ends, and the collection's preemption signal cuts the call short with EINTR); a
// wake then ends the call with its result. A signal may still cut a well-behaved sleep short
// when the runtime sent it just before the call (make test saw that once): only three such
// sleeps in a row fail the test.
func TestBlockingSyscallLetsTheRuntimeGoOn(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	word := &blockingTestWord
	addr := uintptr(unsafe.Pointer(word))
	type result struct {
		r1    uintptr
		errno unix.Errno
	}
	// sleepThroughGC reports how the sleep ended, or ok once the collection finished while it
	// lasted and a wake ended it.
	sleepThroughGC := func() (r result, ok bool) {
		word.Store(0)
		woke := make(chan result, 1)
		asleep := make(chan struct{})
		// At most 10 s: had the call kept the P, nothing else would run until it ends.
		limit := unix.NsecToTimespec(int64(10 * time.Second))
		go func() {
			close(asleep)
			r1, _, e := BlockingSyscall6(unix.SYS_FUTEX, addr, futexOpWait|128, 0, uintptr(unsafe.Pointer(&limit)), 0, 0)
			woke <- result{r1, e}
		}()
		<-asleep // this goroutine runs again on the only P: the other one gave it up
		runtime.GC()
		select {
		case r := <-woke:
			return r, false
		default:
		}
		for {
			n, _, e := unix.RawSyscall6(unix.SYS_FUTEX, addr, futexOpWake|128, 1, 0, 0, 0)
			require.Zero(t, e)
			if n == 1 {
				break
			}
			select {
			case r := <-woke: // cut short after all
				return r, false
			case <-time.After(time.Millisecond): // the sleeper has not reached the futex yet
			}
		}
		r = <-woke
		require.Zero(t, r.errno)
		require.Zero(t, r.r1)
		return r, true
	}
	for try := 1; ; try++ {
		r, ok := sleepThroughGC()
		if ok {
			break
		}
		if r.errno != unix.EINTR || try == 3 {
			t.Fatalf("the garbage collection waited for the futex wait to end (%d, %v; try %d)", int64(r.r1), r.errno, try)
		}
	}

	// A call that does not sleep returns its error as syscall.Syscall6 would.
	word.Store(1)
	_, _, e := BlockingSyscall6(unix.SYS_FUTEX, addr, futexOpWait|128, 0, 0, 0, 0) // *addr is 1
	require.Equal(t, unix.EAGAIN, e)
}
