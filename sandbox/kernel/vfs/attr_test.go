package vfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestChownUtimensStatfs(t *testing.T) {
	tr := newTree(t)
	tr.symlink(t, "a", "dir/link")
	ro := filepath.Join(tr.base, "ro")
	require.NoError(t, os.MkdirAll(ro, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ro, "f"), nil, 0o644))
	fs := newFS(t, tr.rootfs, Mount{Dest: "/ro", Source: ro, ReadOnly: true})
	host := func(p string) string { return filepath.Join(tr.rootfs, p) }

	var st unix.Stat_t
	if os.Geteuid() == 0 {
		require.NoError(t, fs.Chown("/", "/dir/a", 1234, 5678, true))
		require.NoError(t, unix.Stat(host("dir/a"), &st))
		require.Equal(t, uint32(1234), st.Uid)
		require.Equal(t, uint32(5678), st.Gid)
		require.NoError(t, fs.Chown("/", "/dir/link", 42, -1, false))
		require.NoError(t, unix.Lstat(host("dir/link"), &st))
		require.Equal(t, uint32(42), st.Uid)
		require.NoError(t, unix.Stat(host("dir/a"), &st))
		require.Equal(t, uint32(1234), st.Uid, "lchown leaves the target")
	}
	require.ErrorIs(t, fs.Chown("/", "/ro/f", 0, 0, true), unix.EROFS)

	ts := [2]unix.Timespec{{Sec: 1000, Nsec: 5}, {Sec: 2000, Nsec: 7}}
	require.NoError(t, fs.Utimens("/", "/dir/link", ts, true))
	require.NoError(t, unix.Stat(host("dir/a"), &st))
	require.Equal(t, int64(1000), st.Atim.Sec)
	require.Equal(t, int64(2000), st.Mtim.Sec)
	require.Equal(t, int64(7), st.Mtim.Nsec)
	require.NoError(t, fs.Utimens("/", "/dir/link", [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Sec: 3000}}, false))
	require.NoError(t, unix.Lstat(host("dir/link"), &st))
	require.Equal(t, int64(3000), st.Mtim.Sec)
	require.NoError(t, unix.Stat(host("dir/a"), &st))
	require.Equal(t, int64(2000), st.Mtim.Sec, "the target is untouched")
	require.ErrorIs(t, fs.Utimens("/", "/ro/f", ts, true), unix.EROFS)

	f, err := fs.Open("/", "/dir/b", unix.O_RDWR, 0)
	require.NoError(t, err)
	defer f.DecRef()
	require.NoError(t, f.Utimens([2]unix.Timespec{{Sec: 10}, {Sec: 20}}))
	fst, err := f.Stat()
	require.NoError(t, err)
	require.Equal(t, int64(20), fst.Mtim.Sec)
	require.NoError(t, f.Fallocate(0, 0, 8192))
	fst, err = f.Stat()
	require.NoError(t, err)
	require.EqualValues(t, 8192, fst.Size)

	sfs, err := fs.Statfs("/", "/ro")
	require.NoError(t, err)
	require.NotZero(t, sfs.Flags&unix.ST_RDONLY)
	sfs, err = f.Statfs()
	require.NoError(t, err)
	require.NotZero(t, sfs.Bsize)
	sfs, err = fs.Statfs("/", "/dev/null")
	require.NoError(t, err)
	require.Equal(t, int64(unix.TMPFS_MAGIC), sfs.Type)
}
