package vfs

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The benchmarks pair each call with the same host call made directly, so the ratio shows what
// confinement costs; nothing asserts on time.

func benchTree(b *testing.B) (*FS, string) {
	tr := newTree(b)
	fs, err := New(tr.rootfs, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fs.Close() })
	return fs, tr.rootfs
}

func BenchmarkStat(b *testing.B) {
	fs, _ := benchTree(b)
	for b.Loop() {
		if _, err := fs.Stat("/", "/dir/sub/c", true); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStatNative(b *testing.B) {
	_, root := benchTree(b)
	p := filepath.Join(root, "dir/sub/c")
	var st unix.Stat_t
	for b.Loop() {
		if err := unix.Stat(p, &st); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpenClose(b *testing.B) {
	fs, _ := benchTree(b)
	for b.Loop() {
		f, err := fs.Open("/dir", "sub/c", unix.O_RDONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		f.DecRef()
	}
}

func BenchmarkOpenCloseNative(b *testing.B) {
	_, root := benchTree(b)
	p := filepath.Join(root, "dir/sub/c")
	for b.Loop() {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
	}
}

func BenchmarkPread16K(b *testing.B) {
	fs, _ := benchTree(b)
	f, err := fs.Open("/", "/dev/zero", unix.O_RDONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	f2, err := fs.Open("/", "/dir/a", unix.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 16<<10)
	f.Read(buf)
	f2.Pwrite(buf, 0)
	for b.Loop() {
		if _, err := f2.Pread(buf, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestConcurrentTable races opens, dups, dup2s and closes on one table (run with -race).
func TestConcurrentTable(t *testing.T) {
	fs := newFS(t, newTree(t).rootfs)
	tab := NewFDTable()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 8)
			for i := range 300 {
				f, err := fs.Open("/", "/dir/sub/c", unix.O_RDONLY, 0)
				if err != nil {
					t.Error(err)
					return
				}
				fd, err := tab.Install(f, 0, i%2 == 0)
				if err != nil {
					f.DecRef()
					t.Error(err)
					return
				}
				if got, err := tab.Get(fd); err == nil {
					got.Pread(buf, 0)
					got.DecRef()
				}
				if d, err := tab.Get(fd); err == nil {
					if tab.InstallAt(100+g, d, false) != nil {
						d.DecRef()
					}
				}
				tab.Close(fd)
			}
		}()
	}
	wg.Wait()
	require.NoError(t, tab.CloseAll())
	require.Empty(t, tab.Fds())
}
