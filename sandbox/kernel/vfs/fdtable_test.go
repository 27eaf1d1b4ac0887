package vfs

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func openFile(t *testing.T, fs *FS, p string) *File {
	t.Helper()
	f, err := fs.Open("/", p, unix.O_RDONLY, 0)
	require.NoError(t, err)
	return f
}

// hostFdOpen reports whether a host fd is still open.
func hostFdOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

func TestFDTableLowestAndDup(t *testing.T) {
	fs := newFS(t, newTree(t).rootfs)
	tab := NewFDTable()
	defer tab.CloseAll()

	for want := 0; want < 3; want++ {
		fd, err := tab.Install(openFile(t, fs, "/dev/null"), 0, false)
		require.NoError(t, err)
		require.Equal(t, want, fd)
	}
	f := openFile(t, fs, "/dir/sub/c")
	hostFd := f.HostFd()
	fd, err := tab.Install(f, 10, true) // F_DUPFD_CLOEXEC-like minimum
	require.NoError(t, err)
	require.Equal(t, 10, fd)
	require.NoError(t, tab.Close(1))
	fd, err = tab.Install(openFile(t, fs, "/dev/zero"), 0, false)
	require.NoError(t, err)
	require.Equal(t, 1, fd, "the lowest free fd is reused")
	fd, err = tab.Install(openFile(t, fs, "/dev/zero"), 0, false)
	require.NoError(t, err)
	require.Equal(t, 3, fd)

	// dup: both fds share the description and its offset.
	g, err := tab.Get(10)
	require.NoError(t, err)
	dupFd, err := tab.Install(g, 0, false)
	require.NoError(t, err)
	require.Equal(t, 4, dupFd)
	one, err := tab.Get(10)
	require.NoError(t, err)
	buf := make([]byte, 3)
	_, err = one.Read(buf)
	require.NoError(t, err)
	require.NoError(t, one.DecRef())
	two, err := tab.Get(dupFd)
	require.NoError(t, err)
	n, err := two.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "rli", string(buf[:n]), "the offset is shared")
	require.NoError(t, two.DecRef())

	// Closing one of two fds keeps the host fd; closing the last closes it.
	require.NoError(t, tab.Close(10))
	require.True(t, hostFdOpen(hostFd))
	require.NoError(t, tab.Close(dupFd))
	require.False(t, hostFdOpen(hostFd))
	require.ErrorIs(t, tab.Close(dupFd), unix.EBADF)
	_, err = tab.Get(dupFd)
	require.ErrorIs(t, err, unix.EBADF)
	_, err = tab.Get(-1)
	require.ErrorIs(t, err, unix.EBADF)
	require.Equal(t, []int{0, 1, 2, 3}, tab.Fds())
}

func TestFDTableInstallAt(t *testing.T) {
	fs := newFS(t, newTree(t).rootfs)
	tab := NewFDTable()
	defer tab.CloseAll()

	old := openFile(t, fs, "/dir/a")
	oldHost := old.HostFd()
	require.NoError(t, tab.InstallAt(5, old, false))
	nf := openFile(t, fs, "/dir/b")
	require.NoError(t, tab.InstallAt(5, nf, true)) // dup2 over an open fd closes it
	require.False(t, hostFdOpen(oldHost))
	got, err := tab.Get(5)
	require.NoError(t, err)
	require.Same(t, nf, got)
	require.NoError(t, got.DecRef())
	ce, err := tab.GetCloexec(5)
	require.NoError(t, err)
	require.True(t, ce)

	fd, err := tab.Install(openFile(t, fs, "/dev/null"), 5, false)
	require.NoError(t, err)
	require.Equal(t, 6, fd)
	fd, err = tab.Install(openFile(t, fs, "/dev/null"), 0, false)
	require.NoError(t, err)
	require.Equal(t, 0, fd)

	require.ErrorIs(t, tab.InstallAt(DefaultFDLimit, nf, false), unix.EBADF)
	require.ErrorIs(t, tab.InstallAt(-1, nf, false), unix.EBADF)
}

func TestFDTableCloexecForkLimit(t *testing.T) {
	fs := newFS(t, newTree(t).rootfs)
	tab := NewFDTable()

	keep := openFile(t, fs, "/dir/sub/c")
	gone := openFile(t, fs, "/dir/a")
	goneHost := gone.HostFd()
	kfd, err := tab.Install(keep, 0, false)
	require.NoError(t, err)
	gfd, err := tab.Install(gone, 0, true)
	require.NoError(t, err)

	child := tab.Fork()
	require.NoError(t, child.SetCloexec(gfd, false))
	ce, err := tab.GetCloexec(gfd)
	require.NoError(t, err)
	require.True(t, ce, "the child's flags are its own")

	tab.CloseOnExec()
	_, err = tab.Get(gfd)
	require.ErrorIs(t, err, unix.EBADF)
	require.True(t, hostFdOpen(goneHost), "the child still holds it")
	k, err := tab.Get(kfd)
	require.NoError(t, err)
	require.NoError(t, k.DecRef())

	// Fork shares the description: the parent's read moves the child's offset.
	buf := make([]byte, 4)
	pk, _ := tab.Get(kfd)
	_, err = pk.Read(buf)
	require.NoError(t, err)
	pk.DecRef()
	ck, _ := child.Get(kfd)
	n, err := ck.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "lie", string(buf[:n]))
	ck.DecRef()

	require.NoError(t, tab.CloseAll())
	require.True(t, hostFdOpen(keep.HostFd()))
	require.NoError(t, child.CloseAll())
	require.False(t, hostFdOpen(goneHost))

	// EMFILE at the limit, EINVAL for a minimum at or past it.
	lim := NewFDTable()
	defer lim.CloseAll()
	lim.SetLimit(3)
	for range 3 {
		_, err := lim.Install(openFile(t, fs, "/dev/null"), 0, false)
		require.NoError(t, err)
	}
	extra := openFile(t, fs, "/dev/null")
	_, err = lim.Install(extra, 0, false)
	require.ErrorIs(t, err, unix.EMFILE)
	_, err = lim.Install(extra, 3, false)
	require.ErrorIs(t, err, unix.EINVAL)
	require.NoError(t, lim.Close(2))
	fd, err := lim.Install(extra, 0, false)
	require.NoError(t, err)
	require.Equal(t, 2, fd)
	require.Equal(t, 3, lim.Limit())
}
