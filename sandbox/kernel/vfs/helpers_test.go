package vfs

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// testTree is a rootfs on a real temp directory, with a "host secret" beside it that no tenant
// path may reach.
type testTree struct {
	base   string // temp dir holding rootfs/ and secret
	rootfs string
	secret string // absolute host path of a file outside the rootfs
}

const secretText = "host-only secret\n"

func newTree(t testing.TB) *testTree {
	t.Helper()
	base := t.TempDir()
	tr := &testTree{base: base, rootfs: filepath.Join(base, "rootfs"), secret: filepath.Join(base, "shadow-host-only")}
	require.NoError(t, os.WriteFile(tr.secret, []byte(secretText), 0o600))
	for _, d := range []string{"etc", "dir/sub", "tmp", "empty"} {
		require.NoError(t, os.MkdirAll(filepath.Join(tr.rootfs, d), 0o755))
	}
	tr.write(t, "etc/hostname", "container\n")
	tr.write(t, "dir/a", "alpha")
	tr.write(t, "dir/b", "bravo")
	tr.write(t, "dir/sub/c", "charlie")
	return tr
}

func (tr *testTree) write(t testing.TB, rel, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(tr.rootfs, rel), []byte(content), 0o644))
}

func (tr *testTree) symlink(t testing.TB, target, rel string) {
	t.Helper()
	require.NoError(t, os.Symlink(target, filepath.Join(tr.rootfs, rel)))
}

func newFS(t *testing.T, rootfs string, mounts ...Mount) *FS {
	t.Helper()
	fs, err := New(rootfs, mounts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, fs.Close()) })
	return fs
}

// readAll opens path read-only and returns its content.
func readAll(t *testing.T, fs *FS, cwd, p string) string {
	t.Helper()
	f, err := fs.Open(cwd, p, unix.O_RDONLY, 0)
	require.NoError(t, err, "open %s", p)
	defer f.DecRef()
	var out []byte
	buf := make([]byte, 7) // small on purpose: several reads
	for {
		n, err := f.Read(buf)
		require.NoError(t, err)
		if n == 0 {
			return string(out)
		}
		out = append(out, buf[:n]...)
	}
}

type dirent struct {
	name string
	ino  uint64
	typ  uint8
}

// listDir reads a directory File to the end with Getdents and parses the linux_dirent64 records.
func listDir(t *testing.T, f *File, bufSize int) []dirent {
	t.Helper()
	var out []dirent
	buf := make([]byte, bufSize)
	for {
		n, err := f.Getdents(buf)
		require.NoError(t, err)
		if n == 0 {
			return out
		}
		for b := buf[:n]; len(b) > 0; {
			reclen := int(binary.LittleEndian.Uint16(b[16:]))
			require.GreaterOrEqual(t, reclen, 20)
			require.Zero(t, reclen%8, "records are 8-byte aligned")
			name := b[19:reclen]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			out = append(out, dirent{name: string(name), ino: binary.LittleEndian.Uint64(b), typ: b[18]})
			b = b[reclen:]
		}
	}
}

func names(ds []dirent) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.name)
	}
	return out
}
