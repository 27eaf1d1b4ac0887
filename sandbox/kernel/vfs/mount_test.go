package vfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestMounts(t *testing.T) {
	tr := newTree(t)
	rw := filepath.Join(tr.base, "rw")
	ro := filepath.Join(tr.base, "ro")
	hosts := filepath.Join(tr.base, "hosts")
	shm := filepath.Join(tr.base, "shm")
	for _, d := range []string{rw, ro, shm, filepath.Join(ro, "sub")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(rw, "f"), []byte("rw file"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ro, "f"), []byte("ro file"), 0o644))
	require.NoError(t, os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"), 0o644))
	require.NoError(t, unix.Mkfifo(filepath.Join(ro, "fifo"), 0o644))
	// The rootfs's own /etc/hosts and /data/f are hidden by the mounts.
	tr.write(t, "etc/hosts", "rootfs hosts")
	require.NoError(t, os.MkdirAll(filepath.Join(tr.rootfs, "data"), 0o755))
	tr.write(t, "data/f", "hidden")

	fs := newFS(t, tr.rootfs,
		Mount{Dest: "/data", Source: rw},
		Mount{Dest: "/data/ro/", Source: ro, ReadOnly: true},
		Mount{Dest: "/etc/hosts", Source: hosts},
		Mount{Dest: "/dev/shm", Source: shm},
		Mount{Dest: "/proc", Source: rw}, // the sandbox's own: ignored
	)

	require.Equal(t, "rw file", readAll(t, fs, "/", "/data/f"))
	require.Equal(t, "ro file", readAll(t, fs, "/data", "ro/f"))
	require.Equal(t, "ro file", readAll(t, fs, "/data/ro/sub", "../f"))
	require.Equal(t, "rw file", readAll(t, fs, "/data/ro", "../f"))
	require.Equal(t, "127.0.0.1 localhost\n", readAll(t, fs, "/etc", "hosts"))
	_, err := fs.Open("/", "/proc/f", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOENT)

	var want unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(rw, "f"), &want))
	st, err := fs.Stat("/", "/data/f", true)
	require.NoError(t, err)
	require.Equal(t, want.Ino, st.Ino)

	// Writes to the read-write mount reach the host.
	f, err := fs.Open("/data", "new", unix.O_WRONLY|unix.O_CREAT, 0o644)
	require.NoError(t, err)
	_, err = f.Write([]byte("written"))
	require.NoError(t, err)
	require.NoError(t, f.DecRef())
	require.Equal(t, "written", mustRead(t, filepath.Join(rw, "new")))
	w, err := fs.Open("/", "/etc/hosts", unix.O_WRONLY|unix.O_APPEND, 0)
	require.NoError(t, err)
	_, err = w.Write([]byte("::1 localhost\n"))
	require.NoError(t, err)
	require.NoError(t, w.DecRef())
	require.Equal(t, "127.0.0.1 localhost\n::1 localhost\n", mustRead(t, hosts))

	// The read-only mount refuses every write.
	for _, fl := range []int{unix.O_WRONLY, unix.O_RDWR, unix.O_RDONLY | unix.O_TRUNC, unix.O_WRONLY | unix.O_CREAT} {
		_, err := fs.Open("/", "/data/ro/f", fl, 0o644)
		require.ErrorIs(t, err, unix.EROFS, "flags %#x", fl)
	}
	_, err = fs.Open("/", "/data/ro/new", unix.O_WRONLY|unix.O_CREAT, 0o644)
	require.ErrorIs(t, err, unix.EROFS)
	_, err = fs.Open("/", "/data/ro/f", unix.O_RDONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
	require.ErrorIs(t, err, unix.EEXIST)
	_, err = fs.Open("/", "/data/ro/sub", unix.O_RDONLY|unix.O_TMPFILE, 0o644)
	require.ErrorIs(t, err, unix.EROFS)
	rf, err := fs.Open("/", "/data/ro/f", unix.O_RDONLY|unix.O_CREAT, 0o644)
	require.NoError(t, err, "O_CREAT of an existing file on a read-only mount is an open")
	require.ErrorIs(t, rf.Truncate(0), unix.EROFS)
	require.ErrorIs(t, rf.Chmod(0o600), unix.EROFS)
	require.NoError(t, rf.DecRef())
	require.ErrorIs(t, fs.Mkdir("/", "/data/ro/d", 0o755), unix.EROFS)
	require.ErrorIs(t, fs.Unlink("/", "/data/ro/f", false), unix.EROFS)
	require.ErrorIs(t, fs.Unlink("/", "/data/ro/sub", true), unix.EROFS)
	require.ErrorIs(t, fs.Rename("/", "/data/ro/f", "/data/ro/g"), unix.EROFS)
	require.ErrorIs(t, fs.Symlink("/", "x", "/data/ro/l"), unix.EROFS)
	require.ErrorIs(t, fs.Link("/", "/data/ro/f", "/data/ro/g"), unix.EROFS)
	require.ErrorIs(t, fs.Chmod("/", "/data/ro/f", 0o600), unix.EROFS)
	require.ErrorIs(t, fs.Truncate("/", "/data/ro/f", 0), unix.EROFS)
	require.ErrorIs(t, fs.Access("/", "/data/ro/f", unix.W_OK), unix.EROFS)
	require.ErrorIs(t, fs.Mknod("/", "/data/ro/p", unix.S_IFIFO|0o644, 0), unix.EROFS)
	require.NoError(t, fs.Access("/", "/data/ro/f", unix.R_OK))
	require.Equal(t, "ro file", mustRead(t, filepath.Join(ro, "f")))
	// A fifo on a read-only mount can still be written.
	pf, err := fs.Open("/", "/data/ro/fifo", unix.O_RDWR|unix.O_NONBLOCK, 0)
	require.NoError(t, err)
	require.NoError(t, pf.DecRef())

	// Mount points cannot be removed or replaced; crossing mounts is EXDEV.
	require.ErrorIs(t, fs.Unlink("/", "/data", true), unix.EBUSY)
	require.ErrorIs(t, fs.Unlink("/", "/etc/hosts", false), unix.EBUSY)
	require.ErrorIs(t, fs.Rename("/", "/data/f", "/etc/hosts"), unix.EBUSY)
	require.ErrorIs(t, fs.Rename("/", "/data/f", "/tmp/f"), unix.EXDEV)
	require.ErrorIs(t, fs.Link("/", "/data/f", "/tmp/f"), unix.EXDEV)
	require.ErrorIs(t, fs.Mkdir("/", "/data", 0o755), unix.EEXIST)
	_, err = fs.Open("/", "/etc/hosts/x", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOTDIR)
	_, err = fs.Open("/", "/etc/hosts", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.ErrorIs(t, err, unix.ENOTDIR)

	// Canonical paths inside mounts.
	cwd, err := fs.Chdir("/data/ro/sub", "..")
	require.NoError(t, err)
	require.Equal(t, "/data/ro", cwd)
	d, err := fs.Open("/", "/data/ro/sub", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	require.Equal(t, "/data/ro/sub", d.Path())
	require.NoError(t, d.DecRef())

	// A mount under /dev is reachable and listed in /dev.
	require.NoError(t, os.WriteFile(filepath.Join(shm, "seg"), []byte("shm"), 0o600))
	require.Equal(t, "shm", readAll(t, fs, "/dev/shm", "seg"))
	dev, err := fs.Open("/", "/dev", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer dev.DecRef()
	require.Contains(t, names(listDir(t, dev, 4096)), "shm")
}

// A file reopened (open through /proc/<pid>/fd/N) is a new description of the same file, and
// keeps its mount's rules: no writing to a read-only mount that way either.
func TestReopenKeepsTheMountsRules(t *testing.T) {
	tr := newTree(t)
	ro := filepath.Join(tr.base, "ro")
	require.NoError(t, os.MkdirAll(ro, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ro, "f"), []byte("ro file"), 0o644))
	fs := newFS(t, tr.rootfs, Mount{Dest: "/ro", Source: ro, ReadOnly: true})

	f, err := fs.Open("/", "/ro/f", unix.O_RDONLY, 0)
	require.NoError(t, err)
	defer f.DecRef()
	buf := make([]byte, 3)
	_, err = f.Read(buf)
	require.NoError(t, err)
	g, err := f.Reopen(unix.O_RDONLY)
	require.NoError(t, err)
	defer g.DecRef()
	n, err := g.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "ro ", string(buf[:n]), "its own offset, from the start")
	require.Equal(t, "/ro/f", g.Path())
	_, err = f.Reopen(unix.O_WRONLY)
	require.ErrorIs(t, err, unix.EROFS)
	_, err = f.Reopen(unix.O_RDONLY | unix.O_DIRECTORY)
	require.ErrorIs(t, err, unix.ENOTDIR)

	// The sandbox's own objects have no file of the tenant's to reopen.
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	require.NoError(t, err)
	ev := AnonFile(efd, "anon_inode:[eventfd]", unix.O_RDWR, false, nil)
	defer ev.DecRef()
	_, err = ev.Reopen(unix.O_RDONLY)
	require.ErrorIs(t, err, unix.ENXIO)
}
