package vfs

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestNewMissingRootfs(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-rootfs")
	_, err := New(missing, nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), missing)
	require.ErrorIs(t, err, unix.ENOENT)

	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = New(file, nil)
	require.ErrorIs(t, err, unix.ENOTDIR)
	require.Contains(t, err.Error(), file)

	tr := newTree(t)
	_, err = New(tr.rootfs, []Mount{{Dest: "/data", Source: filepath.Join(tr.base, "missing-src")}})
	require.ErrorIs(t, err, unix.ENOENT)
	require.Contains(t, err.Error(), "missing-src")
	_, err = New(tr.rootfs, []Mount{{Dest: "relative", Source: tr.base}})
	require.ErrorIs(t, err, unix.EINVAL)
}

func TestOpenReadStat(t *testing.T) {
	tr := newTree(t)
	fs := newFS(t, tr.rootfs)

	require.Equal(t, "container\n", readAll(t, fs, "/", "/etc/hostname"))
	require.Equal(t, "container\n", readAll(t, fs, "/etc", "hostname"))
	require.Equal(t, "container\n", readAll(t, fs, "/dir/sub", "../../etc/./hostname"))
	require.Equal(t, "charlie", readAll(t, fs, "/", "dir//sub/c"))

	_, err := fs.Open("/", "/etc/missing", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOENT)
	_, err = fs.Open("/", "", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOENT)
	_, err = fs.Open("/", "/etc/hostname/", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOTDIR)
	_, err = fs.Open("/", "/etc/hostname", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.ErrorIs(t, err, unix.ENOTDIR)
	_, err = fs.Open("/", "/"+strings.Repeat("a", unix.PathMax), unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENAMETOOLONG)

	st, err := fs.Stat("/", "/etc/hostname", true)
	require.NoError(t, err)
	var want unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(tr.rootfs, "etc/hostname"), &want))
	require.Equal(t, want.Ino, st.Ino)
	require.Equal(t, want.Dev, st.Dev)
	require.EqualValues(t, 10, st.Size)
	require.Equal(t, uint32(unix.S_IFREG), st.Mode&unix.S_IFMT)

	f, err := fs.Open("/", "/etc/hostname", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer f.DecRef()
	fst, err := f.Stat()
	require.NoError(t, err)
	require.Equal(t, want.Ino, fst.Ino)
	stx, err := f.Statx(unix.STATX_BASIC_STATS)
	require.NoError(t, err)
	require.Equal(t, want.Ino, stx.Ino)
	require.EqualValues(t, 10, stx.Size)
	require.Equal(t, "/etc/hostname", f.Path())
	require.False(t, f.MayBlock())
	require.Equal(t, unix.O_RDONLY|unix.O_LARGEFILE, f.Flags(), "O_CLOEXEC is the fd table's")
	require.GreaterOrEqual(t, f.HostFd(), 0)

	pstx, err := fs.Statx("/etc", "hostname", true, unix.STATX_INO|unix.STATX_SIZE)
	require.NoError(t, err)
	require.Equal(t, want.Ino, pstx.Ino)

	_, err = fs.Stat("/", "/dir/nope", true)
	require.ErrorIs(t, err, unix.ENOENT)
}

func TestHostStatNotFromHostWhenHostFileIsAbsent(t *testing.T) {
	// /etc/hostname exists on the host; inside an empty rootfs it must not.
	fs := newFS(t, t.TempDir())
	_, err := fs.Stat("/", "/etc/hostname", true)
	require.ErrorIs(t, err, unix.ENOENT)
	_, err = fs.Open("/", "/etc/passwd", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOENT)
}

func TestSymlinksStatReadlink(t *testing.T) {
	tr := newTree(t)
	tr.symlink(t, "sub/c", "dir/rel-link")
	tr.symlink(t, "/etc/hostname", "dir/abs-link")
	tr.symlink(t, "/dir/sub", "subdir-link")
	fs := newFS(t, tr.rootfs)

	require.Equal(t, "charlie", readAll(t, fs, "/", "/dir/rel-link"))
	require.Equal(t, "container\n", readAll(t, fs, "/", "/dir/abs-link"), "absolute links resolve inside the rootfs")

	lst, err := fs.Stat("/", "/dir/abs-link", false)
	require.NoError(t, err)
	require.Equal(t, uint32(unix.S_IFLNK), lst.Mode&unix.S_IFMT)
	st, err := fs.Stat("/", "/dir/abs-link", true)
	require.NoError(t, err)
	require.Equal(t, uint32(unix.S_IFREG), st.Mode&unix.S_IFMT)
	stx, err := fs.Statx("/", "/dir/abs-link", false, unix.STATX_TYPE)
	require.NoError(t, err)
	require.Equal(t, uint16(unix.S_IFLNK), stx.Mode&unix.S_IFMT)

	target, err := fs.Readlink("/dir", "abs-link")
	require.NoError(t, err)
	require.Equal(t, "/etc/hostname", target)
	_, err = fs.Readlink("/", "/etc/hostname")
	require.ErrorIs(t, err, unix.EINVAL)
	_, err = fs.Readlink("/", "/nope")
	require.ErrorIs(t, err, unix.ENOENT)

	_, err = fs.Open("/", "/dir/abs-link", unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	require.ErrorIs(t, err, unix.ELOOP)

	// Chdir through a symlink gives the canonical directory, and a File opened there knows it.
	cwd, err := fs.Chdir("/", "/subdir-link")
	require.NoError(t, err)
	require.Equal(t, "/dir/sub", cwd)
	cwd, err = fs.Chdir("/dir", "sub/..")
	require.NoError(t, err)
	require.Equal(t, "/dir", cwd)
	_, err = fs.Chdir("/", "/etc/hostname")
	require.ErrorIs(t, err, unix.ENOTDIR)
	d, err := fs.Open("/", "/subdir-link", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer d.DecRef()
	require.True(t, d.IsDir())
	require.Equal(t, "/dir/sub", d.Path())
	require.Equal(t, "charlie", readAll(t, fs, d.Path(), "c"))
}

func TestGetdentsListsLikeReadDir(t *testing.T) {
	tr := newTree(t)
	for i := range 300 { // more than one getdents buffer
		tr.write(t, "dir/sub/file-"+strings.Repeat("x", i%40)+string(rune('a'+i%26))+"-"+strconv.Itoa(i), "")
	}
	tr.symlink(t, "a", "dir/sub/link")
	fs := newFS(t, tr.rootfs)
	f, err := fs.Open("/", "/dir/sub", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer f.DecRef()
	got := listDir(t, f, 1024)

	entries, err := os.ReadDir(filepath.Join(tr.rootfs, "dir/sub"))
	require.NoError(t, err)
	want := []string{".", ".."}
	for _, e := range entries {
		want = append(want, e.Name())
	}
	gotNames := names(got)
	sort.Strings(gotNames)
	sort.Strings(want)
	require.Equal(t, want, gotNames)
	for _, d := range got {
		switch d.name {
		case "link":
			require.Equal(t, uint8(unix.DT_LNK), d.typ)
		case "c":
			require.Equal(t, uint8(unix.DT_REG), d.typ)
		}
	}

	// Rewind with Seek and list again.
	_, err = f.Seek(0, unix.SEEK_SET)
	require.NoError(t, err)
	require.Len(t, listDir(t, f, 4096), len(want))

	// A buffer too small for one record is EINVAL; a file is ENOTDIR.
	_, err = f.Seek(0, unix.SEEK_SET)
	require.NoError(t, err)
	_, err = f.Getdents(make([]byte, 8))
	require.ErrorIs(t, err, unix.EINVAL)
	r, err := fs.Open("/", "/dir/a", unix.O_RDONLY, 0)
	require.NoError(t, err)
	defer r.DecRef()
	_, err = r.Getdents(make([]byte, 4096))
	require.ErrorIs(t, err, unix.ENOTDIR)
	_, err = f.Read(make([]byte, 10))
	require.ErrorIs(t, err, unix.EISDIR)
}

func TestSeekWriteAppendTruncate(t *testing.T) {
	tr := newTree(t)
	fs := newFS(t, tr.rootfs)

	f, err := fs.Open("/tmp", "new", unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o640)
	require.NoError(t, err)
	defer f.DecRef()
	n, err := f.Write([]byte("hello world"))
	require.NoError(t, err)
	require.Equal(t, 11, n)
	off, err := f.Seek(0, unix.SEEK_CUR)
	require.NoError(t, err)
	require.EqualValues(t, 11, off)
	off, err = f.Seek(-5, unix.SEEK_END)
	require.NoError(t, err)
	require.EqualValues(t, 6, off)
	buf := make([]byte, 16)
	n, err = f.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "world", string(buf[:n]))
	_, err = f.Seek(-1, unix.SEEK_SET)
	require.ErrorIs(t, err, unix.EINVAL)

	n, err = f.Pwrite([]byte("HELLO"), 0)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	n, err = f.Pread(buf[:5], 0)
	require.NoError(t, err)
	require.Equal(t, "HELLO", string(buf[:n]))
	off, _ = f.Seek(0, unix.SEEK_CUR)
	require.EqualValues(t, 11, off, "pread/pwrite leave the offset alone")

	_, err = f.Seek(0, unix.SEEK_SET)
	require.NoError(t, err)
	a, b := make([]byte, 3), make([]byte, 20)
	n, err = f.ReadV([][]byte{a, b})
	require.NoError(t, err)
	require.Equal(t, 11, n)
	require.Equal(t, "HEL", string(a))
	require.Equal(t, "LO world", string(b[:8]))

	st, err := os.Stat(filepath.Join(tr.rootfs, "tmp/new"))
	require.NoError(t, err)
	require.Equal(t, "HELLO world", mustRead(t, filepath.Join(tr.rootfs, "tmp/new")))
	require.Equal(t, os.FileMode(0o640), st.Mode().Perm()&^0o022) // the test's umask may remove more

	_, err = fs.Open("/tmp", "new", unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o640)
	require.ErrorIs(t, err, unix.EEXIST)

	// O_APPEND writes at the end whatever the offset.
	ap, err := fs.Open("/", "/tmp/new", unix.O_WRONLY|unix.O_APPEND, 0)
	require.NoError(t, err)
	defer ap.DecRef()
	n, err = ap.WriteV([][]byte{[]byte("!"), []byte("?")})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, "HELLO world!?", mustRead(t, filepath.Join(tr.rootfs, "tmp/new")))
	require.NoError(t, ap.SetFlags(0)) // clears O_APPEND on the host too
	require.Zero(t, ap.Flags()&unix.O_APPEND)
	require.Equal(t, unix.O_WRONLY, ap.Flags()&unix.O_ACCMODE, "the access mode stays")
	_, err = ap.Seek(0, unix.SEEK_SET)
	require.NoError(t, err)
	_, err = ap.Write([]byte("j"))
	require.NoError(t, err)
	require.Equal(t, "jELLO world!?", mustRead(t, filepath.Join(tr.rootfs, "tmp/new")))
	_, err = ap.Read(buf)
	require.ErrorIs(t, err, unix.EBADF)

	require.NoError(t, f.Truncate(5))
	require.Equal(t, "jELLO", mustRead(t, filepath.Join(tr.rootfs, "tmp/new")))
	require.NoError(t, fs.Truncate("/", "/tmp/new", 2))
	require.Equal(t, "jE", mustRead(t, filepath.Join(tr.rootfs, "tmp/new")))
	require.NoError(t, f.Sync())

	tr2, err := fs.Open("/", "/tmp/new", unix.O_WRONLY|unix.O_TRUNC, 0)
	require.NoError(t, err)
	require.NoError(t, tr2.DecRef())
	require.Equal(t, "", mustRead(t, filepath.Join(tr.rootfs, "tmp/new")))
	require.ErrorIs(t, fs.Truncate("/", "/dir", 0), unix.EISDIR)
	require.ErrorIs(t, fs.Truncate("/", "/tmp/new", -1), unix.EINVAL)
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

func TestNameOperations(t *testing.T) {
	tr := newTree(t)
	fs := newFS(t, tr.rootfs)
	host := func(p string) string { return filepath.Join(tr.rootfs, p) }

	require.NoError(t, fs.Mkdir("/tmp", "d", 0o755))
	require.DirExists(t, host("tmp/d"))
	require.ErrorIs(t, fs.Mkdir("/", "/tmp/d/", 0o755), unix.EEXIST)
	require.ErrorIs(t, fs.Mkdir("/", "/tmp/nope/d", 0o755), unix.ENOENT)
	require.ErrorIs(t, fs.Mkdir("/", "/", 0o755), unix.EEXIST)
	require.ErrorIs(t, fs.Mkdir("/tmp", ".", 0o755), unix.EEXIST)

	require.NoError(t, fs.Symlink("/tmp", "../dir/a", "lnk"))
	target, err := os.Readlink(host("tmp/lnk"))
	require.NoError(t, err)
	require.Equal(t, "../dir/a", target)
	require.Equal(t, "alpha", readAll(t, fs, "/tmp", "lnk"))
	require.ErrorIs(t, fs.Symlink("/", "x", "/tmp/lnk"), unix.EEXIST)

	require.NoError(t, fs.Link("/", "/dir/a", "/tmp/hard"))
	var s1, s2 unix.Stat_t
	require.NoError(t, unix.Stat(host("dir/a"), &s1))
	require.NoError(t, unix.Stat(host("tmp/hard"), &s2))
	require.Equal(t, s1.Ino, s2.Ino)
	require.ErrorIs(t, fs.Link("/", "/dir", "/tmp/dirlink"), unix.EPERM)

	require.NoError(t, fs.Rename("/tmp", "hard", "renamed"))
	require.NoFileExists(t, host("tmp/hard"))
	require.FileExists(t, host("tmp/renamed"))
	require.ErrorIs(t, fs.Rename("/", "/tmp/renamed/", "/tmp/x"), unix.ENOTDIR)
	require.ErrorIs(t, fs.Rename("/", "/", "/tmp/x"), unix.EBUSY)

	require.NoError(t, fs.Chmod("/", "/tmp/renamed", 0o600))
	var st unix.Stat_t
	require.NoError(t, unix.Stat(host("tmp/renamed"), &st))
	require.Equal(t, uint32(0o600), st.Mode&0o7777)
	require.NoError(t, fs.Chmod("/", "/tmp/lnk", 0o640), "chmod follows the link to dir/a")
	require.NoError(t, unix.Stat(host("dir/a"), &st))
	require.Equal(t, uint32(0o640), st.Mode&0o7777)

	require.NoError(t, fs.Access("/", "/tmp/renamed", unix.R_OK|unix.W_OK))
	require.ErrorIs(t, fs.Access("/", "/tmp/none", unix.F_OK), unix.ENOENT)
	require.ErrorIs(t, fs.Access("/", "/tmp", 0o10), unix.EINVAL)

	require.ErrorIs(t, fs.Unlink("/", "/tmp/d", false), unix.EISDIR)
	require.ErrorIs(t, fs.Unlink("/", "/tmp/renamed/", false), unix.ENOTDIR)
	require.ErrorIs(t, fs.Unlink("/", "/tmp/renamed", true), unix.ENOTDIR)
	require.ErrorIs(t, fs.Unlink("/tmp/d", ".", true), unix.EINVAL)
	require.ErrorIs(t, fs.Unlink("/", "/", true), unix.EBUSY)
	require.ErrorIs(t, fs.Unlink("/", "/dir", true), unix.ENOTEMPTY)
	require.NoError(t, fs.Unlink("/", "/tmp/renamed", false))
	require.NoError(t, fs.Unlink("/", "/tmp/d/", true))
	require.NoError(t, fs.Unlink("/", "/tmp/lnk", false))
	require.NoFileExists(t, host("tmp/lnk"))
	require.FileExists(t, host("dir/a"), "unlinking a link leaves its target")

	require.NoError(t, fs.Mknod("/", "/tmp/fifo", unix.S_IFIFO|0o644, 0))
	require.NoError(t, unix.Lstat(host("tmp/fifo"), &st))
	require.Equal(t, uint32(unix.S_IFIFO), st.Mode&unix.S_IFMT)
	require.ErrorIs(t, fs.Mknod("/", "/tmp/null", unix.S_IFCHR|0o666, unix.Mkdev(1, 3)), unix.EPERM)
}

func TestProcAndSysAreAbsent(t *testing.T) {
	tr := newTree(t)
	require.NoError(t, os.MkdirAll(filepath.Join(tr.rootfs, "proc/self"), 0o755))
	tr.write(t, "proc/self/status", "fake")
	fs := newFS(t, tr.rootfs)
	for _, p := range []string{"/proc", "/proc/self/status", "/sys/kernel", "/proc/self/root/etc/passwd"} {
		_, err := fs.Open("/", p, unix.O_RDONLY, 0)
		require.ErrorIs(t, err, unix.ENOENT, p)
		_, err = fs.Stat("/", p, false)
		require.ErrorIs(t, err, unix.ENOENT, p)
	}
	_, err := fs.Open("/proc", "self/status", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOENT)
	require.ErrorIs(t, fs.Unlink("/", "/proc/self/status", false), unix.ENOENT)
}
