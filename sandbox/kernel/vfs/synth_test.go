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

// treeProc is a small Synthetic tree for these tests: a map from path to node, with "self" made
// from the asker, the way the kernel's provider does it.
type treeProc struct {
	nodes  map[string]SynthNode
	lookup int // Lookup calls, to see that content is made at open, not at read
}

func (tp *treeProc) Lookup(rel string, asker int) (SynthNode, error) {
	tp.lookup++
	if rel == "self" {
		return SynthNode{Mode: unix.S_IFLNK | 0o777, Target: strconv.Itoa(asker)}, nil
	}
	if strings.HasPrefix(rel, "self/") {
		rel = strconv.Itoa(asker) + rel[len("self"):]
	}
	n, ok := tp.nodes[rel]
	if !ok {
		return SynthNode{}, unix.ENOENT
	}
	return n, nil
}

func dirNode(entries ...string) SynthNode {
	return SynthNode{Mode: unix.S_IFDIR | 0o555, Entries: entries}
}

func fileNode(s string) SynthNode { return SynthNode{Mode: unix.S_IFREG | 0o444, Content: []byte(s)} }

func linkNode(target string) SynthNode { return SynthNode{Mode: unix.S_IFLNK | 0o777, Target: target} }

func newProcTree() *treeProc {
	return &treeProc{nodes: map[string]SynthNode{
		"":          dirNode("3", "7", "self", "version"),
		"version":   fileNode("Linux version 6.6.0-endo\n"),
		"3":         dirNode("stat", "cwd", "exe", "up", "loop"),
		"3/stat":    fileNode("3 (sh) S 0 3 3\n"),
		"3/cwd":     linkNode("/etc"),
		"3/exe":     {Mode: unix.S_IFLNK | 0o777, Target: "/bin/sh", Magic: true},
		"3/up":      linkNode("../7"),
		"3/loop":    linkNode("loop"),
		"7":         dirNode("stat"),
		"7/stat":    fileNode("7 (sleep) S 3 3 3\n"),
		"3/nodir":   fileNode("x"),
		"3/version": linkNode("/proc/version"),
	}}
}

func TestSyntheticProcServesTheProvider(t *testing.T) {
	tr := newTree(t)
	base := newFS(t, tr.rootfs)
	tp := newProcTree()
	fs := base.View(tp, 3)

	require.Equal(t, "3 (sh) S 0 3 3\n", readAll(t, fs, "/", "/proc/self/stat"))
	require.Equal(t, "7 (sleep) S 3 3 3\n", readAll(t, fs, "/", "/proc/7/stat"))
	require.Equal(t, "7 (sleep) S 3 3 3\n", readAll(t, fs, "/", "/proc/self/up/stat"), "relative link")
	require.Equal(t, "Linux version 6.6.0-endo\n", readAll(t, fs, "/proc/self", "../version"))
	require.Equal(t, "Linux version 6.6.0-endo\n", readAll(t, fs, "/", "/proc/3/version"), "absolute link back into /proc")
	require.Equal(t, "container\n", readAll(t, fs, "/", "/proc/self/cwd/hostname"), "absolute link out of /proc")
	// Another process's view of the same mounts sees its own self.
	require.Equal(t, "7 (sleep) S 3 3 3\n", readAll(t, base.View(tp, 7), "/", "/proc/self/stat"))

	target, err := fs.Readlink("/", "/proc/self")
	require.NoError(t, err)
	require.Equal(t, "3", target)
	target, err = fs.Readlink("/", "/proc/self/exe")
	require.NoError(t, err)
	require.Equal(t, "/bin/sh", target)
	_, err = fs.Open("/", "/proc/self/exe", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOENT, "magic links are readlink-only")
	_, err = fs.Readlink("/", "/proc/self/stat")
	require.ErrorIs(t, err, unix.EINVAL)

	st, err := fs.Stat("/", "/proc/self", false)
	require.NoError(t, err)
	require.Equal(t, uint32(unix.S_IFLNK), st.Mode&unix.S_IFMT)
	st, err = fs.Stat("/", "/proc/self", true)
	require.NoError(t, err)
	require.Equal(t, uint32(unix.S_IFDIR|0o555), st.Mode)
	st, err = fs.Stat("/", "/proc/7/stat", true)
	require.NoError(t, err)
	require.Equal(t, uint32(unix.S_IFREG|0o444), st.Mode)
	stx, err := fs.Statx("/", "/proc/7/stat", true, unix.STATX_BASIC_STATS)
	require.NoError(t, err)
	require.Equal(t, st.Ino, stx.Ino)

	_, err = fs.Open("/", "/proc/self/loop/x", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ELOOP)
	_, err = fs.Open("/", "/proc/3/nodir/x", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOTDIR)
	_, err = fs.Open("/", "/proc/9/stat", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOENT)

	cwd, err := fs.Chdir("/", "/proc/self")
	require.NoError(t, err)
	require.Equal(t, "/proc/3", cwd, "the cwd is canonical")
	require.Equal(t, "3 (sh) S 0 3 3\n", readAll(t, fs, cwd, "stat"))
	_, err = fs.Chdir("/", "/proc/version")
	require.ErrorIs(t, err, unix.ENOTDIR)
	require.NoError(t, fs.Access("/", "/proc/version", unix.R_OK))
	require.ErrorIs(t, fs.Access("/", "/proc/version", unix.W_OK), unix.EACCES)

	sfs, err := fs.Statfs("/", "/proc")
	require.NoError(t, err)
	require.Equal(t, int64(unix.PROC_SUPER_MAGIC), sfs.Type)
}

func TestSyntheticProcIsReadOnly(t *testing.T) {
	tr := newTree(t)
	fs := newFS(t, tr.rootfs).View(newProcTree(), 3)
	for _, flags := range []int{unix.O_WRONLY, unix.O_RDWR, unix.O_RDONLY | unix.O_TRUNC} {
		_, err := fs.Open("/", "/proc/version", flags, 0)
		require.ErrorIs(t, err, unix.EACCES, "flags %#x", flags)
	}
	_, err := fs.Open("/", "/proc/new", unix.O_CREAT|unix.O_WRONLY, 0o644)
	require.ErrorIs(t, err, unix.EACCES)
	_, err = fs.Open("/", "/proc/3", unix.O_WRONLY, 0)
	require.ErrorIs(t, err, unix.EISDIR)
	require.ErrorIs(t, fs.Mkdir("/", "/proc/x", 0o755), unix.EACCES)
	require.ErrorIs(t, fs.Unlink("/", "/proc/version", false), unix.EACCES)
	require.ErrorIs(t, fs.Symlink("/", "x", "/proc/3/y"), unix.EACCES)
	require.ErrorIs(t, fs.Rename("/", "/proc/version", "/tmp/v"), unix.EACCES)
	require.ErrorIs(t, fs.Chmod("/", "/proc/version", 0o777), unix.EPERM)
	require.ErrorIs(t, fs.Truncate("/", "/proc/version", 0), unix.EACCES)

	f, err := fs.Open("/", "/proc/version", unix.O_RDONLY, 0)
	require.NoError(t, err)
	defer f.DecRef()
	_, err = f.Write([]byte("x"))
	require.ErrorIs(t, err, unix.EBADF)
}

func TestSyntheticFileIsASnapshot(t *testing.T) {
	tr := newTree(t)
	tp := newProcTree()
	fs := newFS(t, tr.rootfs).View(tp, 3)
	f, err := fs.Open("/", "/proc/3/stat", unix.O_RDONLY, 0)
	require.NoError(t, err)
	defer f.DecRef()
	tp.nodes["3/stat"] = fileNode("changed")
	calls := tp.lookup

	buf := make([]byte, 4)
	n, err := f.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "3 (s", string(buf[:n]))
	n, err = f.Pread(buf, 11)
	require.NoError(t, err)
	require.Equal(t, "3 3\n", string(buf[:n]))
	off, err := f.Seek(-2, unix.SEEK_END)
	require.NoError(t, err)
	require.Equal(t, int64(13), off)
	n, err = f.ReadV([][]byte{buf[:1], buf[1:]})
	require.NoError(t, err)
	require.Equal(t, "3\n", string(buf[:n]))
	n, err = f.Read(buf)
	require.NoError(t, err)
	require.Zero(t, n, "EOF")
	require.Equal(t, calls, tp.lookup, "reads use the snapshot taken at open")
	require.Equal(t, "changed", readAll(t, fs, "/", "/proc/3/stat"), "a new open takes a new snapshot")
}

func TestSyntheticDirectoryListing(t *testing.T) {
	tr := newTree(t)
	fs := newFS(t, tr.rootfs).View(newProcTree(), 3)
	d, err := fs.Open("/", "/proc", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer d.DecRef()
	require.True(t, d.IsDir())
	require.Equal(t, "/proc", d.Path())
	require.Equal(t, []string{".", "..", "3", "7", "self", "version"}, names(listDir(t, d, 48)))
	_, err = d.Seek(0, unix.SEEK_SET)
	require.NoError(t, err)
	require.Len(t, listDir(t, d, 4096), 6, "rewound")

	self, err := fs.Open("/", "/proc/self", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer self.DecRef()
	require.Equal(t, "/proc/3", self.Path(), "*at calls relative to it resolve in /proc/3")

	_, err = fs.Open("/", "/proc/version", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.ErrorIs(t, err, unix.ENOTDIR)
	_, err = fs.Open("/", "/proc/self", unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	require.ErrorIs(t, err, unix.ELOOP)
}

func TestProcIgnoresTheRootfsAndBundleMounts(t *testing.T) {
	tr := newTree(t)
	require.NoError(t, os.MkdirAll(filepath.Join(tr.rootfs, "proc/3"), 0o755))
	tr.write(t, "proc/3/stat", "from the rootfs")
	fs := newFS(t, tr.rootfs, Mount{Dest: "/proc/3", Source: filepath.Join(tr.rootfs, "dir")}).View(newProcTree(), 3)
	require.Equal(t, "3 (sh) S 0 3 3\n", readAll(t, fs, "/", "/proc/3/stat"))
	require.Empty(t, fs.Mounts(), "a bundle's mount under /proc is not a host mount of the container")
}
