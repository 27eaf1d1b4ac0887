//go:build !race

package memgrant

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkForkNative64MiB is the native reference for the fork benchmarks: a real
// fork(2) of this process with 64 MiB of written private memory, the child exiting at
// once (exit) or after writing one byte a page (write-all: one copy-on-write fault a
// page). The per-page cost of copy-on-write is write-all minus exit, over the pages.
func BenchmarkForkNative64MiB(b *testing.B) {
	mem, err := unix.Mmap(-1, 0, forkSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(mem)
	touch(mem)
	for _, c := range []struct {
		name  string
		write bool
	}{{"exit", false}, {"write-all", true}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := nativeFork(mem, c.write); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(forkSize/PageSize), "ns/page")
		})
	}
}

// nativeFork forks; the child writes a byte a page of mem if asked, then exits; the
// parent waits for it. The child runs only nosplit code and raw system calls: it is a
// copy of a multi-threaded Go process with one thread.
func nativeFork(mem []byte, write bool) error {
	pid, _, errno := syscall.RawSyscall(syscall.SYS_FORK, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	if pid == 0 {
		if write {
			childWrite(mem)
		}
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws syscall.WaitStatus
	_, err := syscall.Wait4(int(pid), &ws, 0, nil)
	return err
}

//go:nosplit
func childWrite(mem []byte) {
	for off := 0; off < len(mem); off += PageSize {
		mem[off] = 3
	}
}
