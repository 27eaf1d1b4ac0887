package vfs

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

type countWatcher struct {
	released []*File
	hostOpen []bool // whether the host fd was still open when told
}

func (w *countWatcher) FileReleased(f *File) {
	w.released = append(w.released, f)
	_, err := unix.FcntlInt(uintptr(f.HostFd()), unix.F_GETFD, 0)
	w.hostOpen = append(w.hostOpen, err == nil)
}

// A watcher hears of a File's release once, when its last reference goes, while its host fd is
// still open; one that unwatched hears nothing; a released File takes no new watcher.
func TestReleaseWatchers(t *testing.T) {
	var p [2]int
	require.NoError(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
	defer unix.Close(p[1])
	f := HostFile(os.NewFile(uintptr(p[0]), "pipe"), "")
	w, gone := &countWatcher{}, &countWatcher{}
	require.True(t, f.Watch(w))
	require.True(t, f.Watch(w))
	require.True(t, f.Watch(gone))
	f.Unwatch(gone)
	f.Unwatch(w) // still watched once
	f.IncRef()
	require.NoError(t, f.DecRef())
	require.Empty(t, w.released, "a reference is left")
	require.NoError(t, f.DecRef())
	require.Equal(t, []*File{f}, w.released)
	require.Equal(t, []bool{true}, w.hostOpen)
	require.Empty(t, gone.released)
	require.False(t, f.Watch(w))
}

// An anonymous file reports its name as its path, its kernel state, and whether it may block.
func TestAnonFile(t *testing.T) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	require.NoError(t, err)
	state := &struct{ n int }{7}
	f := AnonFile(efd, "eventfd", unix.O_RDWR, true, state)
	require.Equal(t, "anon_inode:[eventfd]", f.Path())
	require.Same(t, state, f.Private())
	require.True(t, f.MayBlock())
	require.False(t, f.IsRegular())
	require.Equal(t, unix.O_RDWR, f.Flags())
	// A blocking tenant fd waits for the count; a non-blocking one gets EAGAIN.
	_, err = unix.Write(efd, []byte{2, 0, 0, 0, 0, 0, 0, 0})
	require.NoError(t, err)
	b := make([]byte, 8)
	n, err := f.Read(b)
	require.NoError(t, err)
	require.Equal(t, 8, n)
	require.Equal(t, byte(2), b[0])
	require.NoError(t, f.SetFlags(unix.O_NONBLOCK))
	_, err = f.Read(b)
	require.ErrorIs(t, err, unix.EAGAIN)
	require.NoError(t, f.DecRef())
	// Other files have no kernel state.
	null, err := os.Open("/dev/null")
	require.NoError(t, err)
	h := HostFile(null, "")
	require.Nil(t, h.Private())
	require.NoError(t, h.DecRef())
}
