package vfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// requireNoSecret checks that a tenant path gives an error for open, stat and lstat, and never
// the host secret's content.
func requireNoSecret(t *testing.T, fs *FS, cwd, p string, want unix.Errno) {
	t.Helper()
	f, err := fs.Open(cwd, p, unix.O_RDONLY, 0)
	if err == nil {
		buf := make([]byte, 64)
		n, _ := f.Read(buf)
		f.DecRef()
		t.Fatalf("open %q from %q succeeded, read %q", p, cwd, buf[:n])
	}
	require.ErrorIs(t, err, want, "open %q from %q", p, cwd)
	_, err = fs.Stat(cwd, p, true)
	require.ErrorIs(t, err, want, "stat %q", p)
	_, err = fs.Statx(cwd, p, true, unix.STATX_BASIC_STATS)
	require.ErrorIs(t, err, want, "statx %q", p)
	require.ErrorIs(t, fs.Access(cwd, p, unix.F_OK), want, "access %q", p)
}

func TestEscapeDotDot(t *testing.T) {
	tr := newTree(t)
	fs := newFS(t, tr.rootfs)
	name := filepath.Base(tr.secret) // lives in rootfs/..
	deep := strings.Repeat("../", 40)

	requireNoSecret(t, fs, "/", "../"+name, unix.ENOENT)
	requireNoSecret(t, fs, "/dir/sub", "../../../"+name, unix.ENOENT)
	requireNoSecret(t, fs, "/", "/../"+name, unix.ENOENT)
	requireNoSecret(t, fs, "/dir", deep+name, unix.ENOENT)
	requireNoSecret(t, fs, "/", deep+strings.TrimPrefix(tr.secret, "/"), unix.ENOENT)
	requireNoSecret(t, fs, "/", tr.secret, unix.ENOENT)
	// A cwd that the kernel got wrong (not canonical, with ..) is confined too.
	requireNoSecret(t, fs, "/../..", name, unix.ENOENT)

	cwd, err := fs.Chdir("/", deep)
	require.NoError(t, err)
	require.Equal(t, "/", cwd)
}

func TestEscapeSymlinks(t *testing.T) {
	tr := newTree(t)
	name := filepath.Base(tr.secret)
	tr.symlink(t, tr.secret, "abs-host-link")              // absolute host path
	tr.symlink(t, filepath.Dir(tr.secret), "abs-dir-link") // absolute host dir
	tr.symlink(t, "../..", "dir/up2")                      // rootfs/dir/../.. is the secret's dir on the host
	tr.symlink(t, "../../../../../../../..", "dir/updeep")
	tr.symlink(t, "dir/up2", "chain1")
	tr.symlink(t, "chain1/"+name, "chain2")
	tr.symlink(t, "/proc/self/root"+tr.secret, "proc-root-link")
	tr.symlink(t, "../../../../proc/self/cwd", "dir/proc-cwd-link")
	fs := newFS(t, tr.rootfs)

	requireNoSecret(t, fs, "/", "/abs-host-link", unix.ENOENT)
	requireNoSecret(t, fs, "/", "/abs-dir-link/"+name, unix.ENOENT)
	requireNoSecret(t, fs, "/", "/dir/up2/"+name, unix.ENOENT)
	requireNoSecret(t, fs, "/dir", "up2/"+name, unix.ENOENT)
	requireNoSecret(t, fs, "/", "/dir/updeep"+tr.secret, unix.ENOENT)
	requireNoSecret(t, fs, "/", "/chain1/"+name, unix.ENOENT)
	requireNoSecret(t, fs, "/", "/chain2", unix.ENOENT)
	requireNoSecret(t, fs, "/", "/proc-root-link", unix.ENOENT)
	requireNoSecret(t, fs, "/", "/dir/proc-cwd-link/"+name, unix.ENOENT)

	// The links themselves are readable as links.
	target, err := fs.Readlink("/", "/abs-host-link")
	require.NoError(t, err)
	require.Equal(t, tr.secret, target)

	// Inside the root, the same links resolve to the root's own files.
	cwd, err := fs.Chdir("/", "/dir/up2")
	require.NoError(t, err)
	require.Equal(t, "/", cwd)
	require.Equal(t, "container\n", readAll(t, fs, "/", "/dir/updeep/etc/hostname"))

	// Name operations through escaping links stay inside: nothing appears or vanishes on the host.
	hostDir := filepath.Dir(tr.secret)
	require.ErrorIs(t, fs.Mkdir("/", "/abs-dir-link/planted", 0o755), unix.ENOENT)
	require.NoError(t, fs.Mkdir("/", "/dir/up2/planted", 0o755))
	require.NoDirExists(t, filepath.Join(hostDir, "planted"))
	require.DirExists(t, filepath.Join(tr.rootfs, "planted"))
	require.ErrorIs(t, fs.Unlink("/", "/dir/up2/"+name, false), unix.ENOENT)
	require.ErrorIs(t, fs.Unlink("/", "/abs-host-link/", false), unix.ENOTDIR)
	require.NoError(t, fs.Unlink("/", "/abs-host-link", false)) // removes the link, not the target
	require.FileExists(t, tr.secret)
	require.ErrorIs(t, fs.Link("/", "/dir/up2/"+name, "/tmp/stolen"), unix.ENOENT)
	require.ErrorIs(t, fs.Rename("/", "/dir/up2/"+name, "/tmp/stolen"), unix.ENOENT)
	require.NoError(t, fs.Rename("/", "/dir/a", "/dir/up2/moved"))
	require.NoFileExists(t, filepath.Join(hostDir, "moved"))
	require.FileExists(t, filepath.Join(tr.rootfs, "moved"))
	require.NoError(t, fs.Symlink("/", tr.secret, "/tmp/s"))
	requireNoSecret(t, fs, "/", "/tmp/s", unix.ENOENT)
	require.ErrorIs(t, fs.Chmod("/", "/abs-dir-link/"+name, 0o777), unix.ENOENT)
	require.ErrorIs(t, fs.Truncate("/", "/dir/up2/"+name, 0), unix.ENOENT)
	created, err := fs.Open("/", "/dir/up2/"+name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o644)
	require.NoError(t, err, "creates rootfs/"+name+", not the host file")
	require.NoError(t, created.DecRef())
	require.FileExists(t, filepath.Join(tr.rootfs, name))
	require.Equal(t, secretText, mustRead(t, tr.secret))
	var st unix.Stat_t
	require.NoError(t, unix.Stat(tr.secret, &st))
	require.Equal(t, uint32(0o600), st.Mode&0o777)
}

// TestEscapeMagicLinks puts a real procfs inside the rootfs: its magic links (/proc/self/root,
// /proc/self/fd/N) would lead anywhere on the host, so lookups must refuse them.
func TestEscapeMagicLinks(t *testing.T) {
	tr := newTree(t)
	procDir := filepath.Join(tr.rootfs, "myproc")
	require.NoError(t, os.Mkdir(procDir, 0o755))
	if err := unix.Mount("proc", procDir, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		t.Skipf("cannot mount procfs here: %v", err)
	}
	t.Cleanup(func() { require.NoError(t, unix.Unmount(procDir, unix.MNT_DETACH)) })
	tr.symlink(t, "/myproc/self/root", "self-root")
	secretFd, err := unix.Open(tr.secret, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(secretFd)
	fs := newFS(t, tr.rootfs)

	fdLink := "/myproc/self/fd/" + strconv.Itoa(secretFd)
	for _, p := range []string{"/myproc/self/root" + tr.secret, "/self-root" + tr.secret, fdLink, "/myproc/thread-self/root" + tr.secret} {
		_, err := fs.Open("/", p, unix.O_RDONLY, 0)
		require.Error(t, err, p)
		require.ErrorIs(t, err, unix.ELOOP, p)
		_, err = fs.Stat("/", p, true)
		require.ErrorIs(t, err, unix.ELOOP, p)
	}
	// An ordinary procfs file is still a file.
	_, err = fs.Stat("/", "/myproc/self/status", true)
	require.NoError(t, err)
}

func TestEscapeFromMount(t *testing.T) {
	tr := newTree(t)
	src := filepath.Join(tr.base, "volume")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "inner"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "inner/file"), []byte("in volume"), 0o644))
	require.NoError(t, os.Symlink("../../..", filepath.Join(src, "inner/up")))
	require.NoError(t, os.Symlink("/etc/hostname", filepath.Join(src, "abs")))
	fs := newFS(t, tr.rootfs, Mount{Dest: "/data", Source: src})
	name := filepath.Base(tr.secret)

	require.Equal(t, "in volume", readAll(t, fs, "/data/inner", "up/inner/file"), "links are confined to the mount")
	requireNoSecret(t, fs, "/", "/data/inner/up/"+name, unix.ENOENT)
	requireNoSecret(t, fs, "/", "/data/inner/up/../"+name, unix.ENOENT)
	requireNoSecret(t, fs, "/data", "../../"+name, unix.ENOENT)
	// Known simplification: an absolute link inside a mount resolves inside that mount.
	_, err := fs.Open("/", "/data/abs", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOENT)
	// Leaving the mount by ".." lands in the rootfs, as in Linux.
	require.Equal(t, "container\n", readAll(t, fs, "/data/inner", "../../etc/hostname"))
}
