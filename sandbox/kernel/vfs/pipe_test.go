package vfs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestFifoOpenAndBlockingEmulation(t *testing.T) {
	tr := newTree(t)
	require.NoError(t, unix.Mkfifo(filepath.Join(tr.rootfs, "tmp/fifo"), 0o644))
	fs := newFS(t, tr.rootfs)

	// A blocking fifo open is handed back to the kernel instead of holding its vCPU.
	_, err := fs.Open("/", "/tmp/fifo", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, ErrOpenBlocks)
	require.ErrorIs(t, err, unix.EAGAIN)
	_, err = fs.Open("/", "/tmp/fifo", unix.O_WRONLY, 0)
	require.ErrorIs(t, err, ErrOpenBlocks, "no reader yet")
	_, err = fs.Open("/", "/tmp/fifo", unix.O_WRONLY|unix.O_NONBLOCK, 0)
	require.ErrorIs(t, err, unix.ENXIO, "the tenant asked for non-blocking")

	// The kernel's retry: a reader waits for a writer on the host.
	type result struct {
		f   *File
		err error
	}
	readerc := make(chan result, 1)
	go func() {
		f, err := fs.OpenBlocking("/", "/tmp/fifo", unix.O_RDONLY, 0)
		readerc <- result{f, err}
	}()
	w, err := fs.OpenBlocking("/", "/tmp/fifo", unix.O_WRONLY, 0)
	require.NoError(t, err)
	defer w.DecRef()
	rr := <-readerc
	require.NoError(t, rr.err)
	r := rr.f
	defer r.DecRef()
	require.True(t, r.MayBlock())
	require.True(t, w.MayBlock())
	require.Zero(t, r.Flags()&unix.O_NONBLOCK, "the tenant's fd is blocking")

	// A blocking read waits for data although the host fd is non-blocking.
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 16)
		n, err := r.Read(buf)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(buf[:n])
	}()
	select {
	case s := <-got:
		t.Fatalf("read returned %q before anything was written", s)
	case <-time.After(50 * time.Millisecond):
	}
	_, err = w.Write([]byte("ping"))
	require.NoError(t, err)
	require.Equal(t, "ping", <-got)

	// Non-blocking as the tenant asks, through F_SETFL.
	require.NoError(t, r.SetFlags(r.Flags()|unix.O_NONBLOCK))
	_, err = r.Read(make([]byte, 4))
	require.ErrorIs(t, err, unix.EAGAIN)
	require.NoError(t, r.SetFlags(r.Flags()&^unix.O_NONBLOCK))

	// A blocking write larger than the pipe is written in full once the reader drains it.
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i)
	}
	done := make(chan error, 1)
	go func() {
		n, err := w.Write(big)
		if err == nil && n != len(big) {
			err = unix.EIO
		}
		done <- err
	}()
	var all []byte
	buf := make([]byte, 64<<10)
	for len(all) < len(big) {
		n, err := r.Read(buf)
		require.NoError(t, err)
		require.NotZero(t, n)
		all = append(all, buf[:n]...)
	}
	require.NoError(t, <-done)
	require.Equal(t, big, all)

	// EOF after the writer goes.
	require.NoError(t, w.DecRef())
	w.IncRef() // for the deferred DecRef
	n, err := r.Read(buf)
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestHostFilePipe(t *testing.T) {
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	r := HostFile(pr, "")
	w := HostFile(pw, "")
	require.True(t, r.MayBlock())
	require.Equal(t, "", r.Path())
	require.Equal(t, unix.O_RDONLY, r.Flags()&unix.O_ACCMODE)
	require.Equal(t, unix.O_WRONLY, w.Flags()&unix.O_ACCMODE)
	require.Zero(t, r.Flags()&unix.O_NONBLOCK)

	n, err := w.WriteV([][]byte{[]byte("he"), []byte("llo")})
	require.NoError(t, err)
	require.Equal(t, 5, n)
	buf := make([]byte, 8)
	n, err = r.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "hello", string(buf[:n]))
	_, err = r.Seek(0, unix.SEEK_CUR)
	require.ErrorIs(t, err, unix.ESPIPE)
	st, err := r.Stat()
	require.NoError(t, err)
	require.Equal(t, uint32(unix.S_IFIFO), st.Mode&unix.S_IFMT)

	// No reader: EPIPE, and the sandbox survives the host's SIGPIPE.
	rfd := r.HostFd()
	require.NoError(t, r.DecRef())
	require.False(t, hostFdOpen(rfd))
	_, err = w.Write([]byte("x"))
	require.ErrorIs(t, err, unix.EPIPE)
	require.NoError(t, w.DecRef())
}

func TestSetFlagsPathFile(t *testing.T) {
	fs := newFS(t, newTree(t).rootfs)
	f, err := fs.Open("/", "/dir/a", unix.O_PATH|unix.O_RDWR|unix.O_CREAT, 0o644)
	require.NoError(t, err, "open(2) ignores other flags with O_PATH")
	defer f.DecRef()
	_, err = f.Read(make([]byte, 1))
	require.ErrorIs(t, err, unix.EBADF)
	st, err := f.Stat()
	require.NoError(t, err)
	require.Equal(t, uint32(unix.S_IFREG), st.Mode&unix.S_IFMT)
	require.ErrorIs(t, f.SetFlags(unix.O_APPEND), unix.EBADF)

	// Unknown flag bits are ignored as open(2) does, not refused as openat2(2) would.
	g, err := fs.Open("/", "/dir/a", unix.O_RDONLY|1<<30, 0)
	require.NoError(t, err)
	require.NoError(t, g.DecRef())
}

func TestFifoReadWriteOpenDoesNotWait(t *testing.T) {
	tr := newTree(t)
	require.NoError(t, unix.Mkfifo(filepath.Join(tr.rootfs, "tmp/fifo"), 0o644))
	fs := newFS(t, tr.rootfs)
	f, err := fs.Open("/", "/tmp/fifo", unix.O_RDWR, 0)
	require.NoError(t, err)
	defer f.DecRef()
	_, err = f.Write([]byte("self"))
	require.NoError(t, err)
	buf := make([]byte, 8)
	n, err := f.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "self", string(buf[:n]))
}

func TestCloseWaitsForCallsInProgress(t *testing.T) {
	tr := newTree(t)
	require.NoError(t, unix.Mkfifo(filepath.Join(tr.rootfs, "tmp/fifo"), 0o644))
	fs, err := New(tr.rootfs, nil)
	require.NoError(t, err)
	rootFd := fs.mounts[len(fs.mounts)-1].fd

	opened := make(chan error, 1)
	go func() {
		f, err := fs.OpenBlocking("/", "/tmp/fifo", unix.O_RDONLY, 0)
		if err == nil {
			f.DecRef()
		}
		opened <- err
	}()
	// Wait until the reader is blocked in the host open (a non-blocking writer then succeeds).
	hostFifo := filepath.Join(tr.rootfs, "tmp/fifo")
	var w int
	require.Eventually(t, func() bool {
		w, err = unix.Open(hostFifo, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		return err == nil
	}, 5*time.Second, time.Millisecond)
	defer unix.Close(w)
	require.NoError(t, <-opened)

	// Closed with nothing in progress: the fds go at once and calls fail with EBADF.
	require.NoError(t, fs.Close())
	require.False(t, hostFdOpen(rootFd))
	_, err = fs.Open("/", "/dir/a", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.EBADF)
	_, err = fs.Stat("/", "/dir/a", true)
	require.ErrorIs(t, err, unix.EBADF)
	require.ErrorIs(t, fs.Mkdir("/", "/x", 0o755), unix.EBADF)
	require.NoError(t, fs.Close(), "Close twice is fine")

	// Closed while a call is in progress: the fds stay until it ends.
	fs2, err := New(tr.rootfs, nil)
	require.NoError(t, err)
	root2 := fs2.mounts[len(fs2.mounts)-1].fd
	require.True(t, fs2.enter())
	require.NoError(t, fs2.Close())
	require.True(t, hostFdOpen(root2))
	fs2.exit()
	require.False(t, hostFdOpen(root2))
}
