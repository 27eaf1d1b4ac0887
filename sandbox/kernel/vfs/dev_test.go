package vfs

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestDevFiles(t *testing.T) {
	fs := newFS(t, newTree(t).rootfs)
	open := func(p string, flags int) *File {
		t.Helper()
		f, err := fs.Open("/", p, flags, 0o644)
		require.NoError(t, err, p)
		t.Cleanup(func() { f.DecRef() })
		return f
	}
	buf := bytes.Repeat([]byte{0xAA}, 4096)

	null := open("/dev/null", unix.O_RDWR)
	n, err := null.Read(buf)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = null.Write(buf)
	require.NoError(t, err)
	require.Equal(t, len(buf), n)
	require.Equal(t, -1, null.HostFd())
	require.False(t, null.MayBlock())
	require.Equal(t, "/dev/null", null.Path())
	// A shell's "> /dev/null" is O_WRONLY|O_CREAT|O_TRUNC.
	shell := open("/dev/null", unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC)
	_, err = shell.Read(buf)
	require.ErrorIs(t, err, unix.EBADF)
	n, err = shell.WriteV([][]byte{buf[:10], buf[:20]})
	require.NoError(t, err)
	require.Equal(t, 30, n)

	zero := open("/dev/zero", unix.O_RDONLY)
	n, err = zero.Read(buf)
	require.NoError(t, err)
	require.Equal(t, len(buf), n)
	require.Equal(t, make([]byte, len(buf)), buf)
	_, err = zero.Write(buf)
	require.ErrorIs(t, err, unix.EBADF)
	a, b := []byte{1, 2}, []byte{3}
	n, err = zero.ReadV([][]byte{a, b})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, []byte{0, 0}, a)
	off, err := zero.Seek(100, unix.SEEK_SET)
	require.NoError(t, err)
	require.Zero(t, off)

	full := open("/dev/full", unix.O_RDWR)
	_, err = full.Write([]byte("x"))
	require.ErrorIs(t, err, unix.ENOSPC)
	n, err = full.Read(buf[:8])
	require.NoError(t, err)
	require.Equal(t, 8, n)

	for _, p := range []string{"/dev/urandom", "/dev/random"} {
		r := open(p, unix.O_RDONLY)
		one, two := make([]byte, 64), make([]byte, 64)
		_, err = r.Read(one)
		require.NoError(t, err)
		_, err = r.Pread(two, 0)
		require.NoError(t, err)
		require.NotEqual(t, make([]byte, 64), one)
		require.NotEqual(t, one, two)
	}

	_, err = fs.Open("/", "/dev/tty", unix.O_RDWR, 0)
	require.ErrorIs(t, err, unix.ENXIO)
	_, err = fs.Open("/", "/dev/sda", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOENT)
	_, err = fs.Open("/", "/dev/new", unix.O_WRONLY|unix.O_CREAT, 0o644)
	require.ErrorIs(t, err, unix.EROFS)
	_, err = fs.Open("/", "/dev/null", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
	require.ErrorIs(t, err, unix.EEXIST)
	_, err = fs.Open("/", "/dev/null/x", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOTDIR)
	_, err = fs.Open("/", "/dev/null", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.ErrorIs(t, err, unix.ENOTDIR)
	_, err = fs.Open("/", "/dev", unix.O_WRONLY, 0)
	require.ErrorIs(t, err, unix.EISDIR)

	st, err := fs.Stat("/", "/dev/null", true)
	require.NoError(t, err)
	require.Equal(t, uint32(unix.S_IFCHR|0o666), st.Mode)
	require.Equal(t, unix.Mkdev(1, 3), st.Rdev)
	stx, err := fs.Statx("/dev", "urandom", true, unix.STATX_BASIC_STATS)
	require.NoError(t, err)
	require.Equal(t, uint32(9), stx.Rdev_minor)
	fst, err := zero.Stat()
	require.NoError(t, err)
	require.Equal(t, unix.Mkdev(1, 5), fst.Rdev)
	dst, err := fs.Stat("/", "/dev/", true)
	require.NoError(t, err)
	require.Equal(t, uint32(unix.S_IFDIR), dst.Mode&unix.S_IFMT)
	_, err = fs.Readlink("/", "/dev/null")
	require.ErrorIs(t, err, unix.EINVAL)
	require.NoError(t, fs.Access("/", "/dev/null", unix.R_OK|unix.W_OK))
	cwd, err := fs.Chdir("/dev/", ".")
	require.NoError(t, err)
	require.Equal(t, "/dev", cwd)
	_, err = fs.Chdir("/", "/dev/zero")
	require.ErrorIs(t, err, unix.ENOTDIR)
	require.ErrorIs(t, fs.Mkdir("/", "/dev/null", 0o755), unix.EEXIST)
	require.ErrorIs(t, fs.Unlink("/", "/dev/null", false), unix.EROFS)
	require.ErrorIs(t, fs.Unlink("/", "/dev/nope", false), unix.ENOENT)
	require.ErrorIs(t, fs.Rename("/", "/dev/null", "/tmp/null"), unix.EXDEV)
	require.ErrorIs(t, fs.Truncate("/", "/dev/null", 0), unix.EINVAL)

	// Listing /dev.
	dir := open("/dev", unix.O_RDONLY|unix.O_DIRECTORY)
	require.True(t, dir.IsDir())
	ents := listDir(t, dir, 64) // small buffer: one or two records a call
	require.Equal(t, []string{".", "..", "full", "null", "random", "tty", "urandom", "zero"}, names(ents))
	for _, e := range ents[2:] {
		require.Equal(t, uint8(unix.DT_CHR), e.typ)
		require.NotZero(t, e.ino)
	}
	_, err = dir.Seek(0, unix.SEEK_SET)
	require.NoError(t, err)
	require.Len(t, listDir(t, dir, 4096), 8)
	_, err = dir.Seek(0, unix.SEEK_SET)
	require.NoError(t, err)
	_, err = dir.Getdents(make([]byte, 16))
	require.ErrorIs(t, err, unix.EINVAL)
	_, err = null.Getdents(buf)
	require.ErrorIs(t, err, unix.ENOTDIR)
}
