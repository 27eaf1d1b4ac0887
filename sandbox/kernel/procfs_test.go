package kernel

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/endovisor/endo/sandbox/kernel/vfs"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func procRootfs(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skip("needs busybox-static at /bin/busybox")
	}
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755))
	require.NoError(t, os.Symlink("busybox", filepath.Join(root, "bin", "sleep")))
	return root
}

// procRead reads a whole /proc file through a process's view.
func procRead(t *testing.T, fs *vfs.FS, p string) string {
	t.Helper()
	f, err := fs.Open("/", p, unix.O_RDONLY, 0)
	require.NoError(t, err, p)
	defer f.DecRef()
	var out []byte
	buf := make([]byte, 100)
	for {
		n, err := f.Read(buf)
		require.NoError(t, err)
		if n == 0 {
			return string(out)
		}
		out = append(out, buf[:n]...)
	}
}

func procList(t *testing.T, fs *vfs.FS, p string) []string {
	t.Helper()
	f, err := fs.Open("/", p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err, p)
	defer f.DecRef()
	var names []string
	buf := make([]byte, 4096)
	for {
		n, err := f.Getdents(buf)
		require.NoError(t, err)
		if n == 0 {
			return names
		}
		for b := buf[:n]; len(b) > 0; {
			reclen := int(b[16]) | int(b[17])<<8
			name, _, _ := strings.Cut(string(b[19:reclen]), "\x00")
			names = append(names, name)
			b = b[reclen:]
		}
	}
}

func TestProcShowsTheContainersOwnProcesses(t *testing.T) {
	root := procRootfs(t)
	k, err := New(Config{MemoryBytes: 256 << 20, VCPUs: 1})
	require.NoError(t, err)
	defer k.Close()
	spawn := func(container string) *Process {
		p, err := k.Spawn(ProcessSpec{Container: container, Rootfs: root, Argv: []string{"/bin/sleep", "30"},
			Env: []string{"PATH=/bin"}})
		require.NoError(t, err)
		return p
	}
	a, a2, other := spawn("a"), spawn("a"), spawn("b")
	defer other.Signal(unix.SIGKILL)
	defer a2.Signal(unix.SIGKILL)
	defer a.Signal(unix.SIGKILL)
	fs := k.procView(a.c, a.pid)
	pid := strconv.Itoa(a.pid)

	stat := procRead(t, fs, "/proc/self/stat")
	require.Regexp(t, `^`+pid+` \(sleep\) [RS] 0 `+pid+` `+pid+` 0 -1 `, stat)
	require.Len(t, strings.Fields(stat), 52, "all of Linux's fields")
	require.Equal(t, "/bin/sleep\x0030\x00", procRead(t, fs, "/proc/"+pid+"/cmdline"), "read from the tenant's stack")
	require.Equal(t, "sleep\n", procRead(t, fs, "/proc/self/comm"))
	status := procRead(t, fs, "/proc/self/status")
	require.Contains(t, status, "Name:\tsleep\n")
	require.Contains(t, status, "Pid:\t"+pid+"\n")
	maps := procRead(t, fs, "/proc/self/maps")
	// The program is the file itself (/bin/sleep is a symlink to busybox); comm keeps the name.
	require.Regexp(t, `(?m)^00400000-[0-9a-f]+ r..p 00000000 00:00 0 +/bin/busybox$`, maps)
	require.Regexp(t, `(?m) \[stack\]$`, maps)
	exe, err := fs.Readlink("/", "/proc/self/exe")
	require.NoError(t, err)
	require.Equal(t, "/bin/busybox", exe)
	require.Equal(t, []string{".", "..", "0", "1", "2"}, procList(t, fs, "/proc/self/fd"))
	fd0, err := fs.Readlink("/", "/proc/self/fd/0")
	require.NoError(t, err)
	require.Equal(t, "/dev/null", fd0)
	require.Equal(t, []string{".", "..", pid}, procList(t, fs, "/proc/self/task"))

	// Only this container's pids: never the other container's.
	entries := procList(t, fs, "/proc")
	require.Contains(t, entries, pid)
	require.Contains(t, entries, strconv.Itoa(a2.pid))
	require.Contains(t, entries, "self")
	require.NotContains(t, entries, strconv.Itoa(other.pid))
	_, err = fs.Open("/", "/proc/"+strconv.Itoa(other.pid)+"/stat", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOENT)
	require.Contains(t, procList(t, k.procView(other.c, other.pid), "/proc"), strconv.Itoa(other.pid))

	require.Contains(t, procRead(t, fs, "/proc/meminfo"), "MemTotal:         262144 kB\n")
	require.Equal(t, 1, strings.Count(procRead(t, fs, "/proc/cpuinfo"), "processor\t: "))
	require.Contains(t, procRead(t, fs, "/proc/version"), "6.6.0-endo")
	require.Regexp(t, `^\d+\.\d\d \d+\.\d\d\n$`, procRead(t, fs, "/proc/uptime"))
	require.Regexp(t, `^0\.00 0\.00 0\.00 \d+/\d+ \d+\n$`, procRead(t, fs, "/proc/loadavg"))
	require.Regexp(t, `^(overlay / overlay|none / (ext4|xfs|btrfs|tmpfs|zfs|9p)) rw 0 0\n`, procRead(t, fs, "/proc/mounts"))

	// A process that is gone is gone from /proc too. a2 is the one to go: a is the container's
	// init, whose death takes the whole container down (and closes its file system).
	fs2 := k.procView(a2.c, a2.pid)
	pid2 := strconv.Itoa(a2.pid)
	a2.Signal(unix.SIGKILL)
	a2.Wait()
	_, err = fs.Open("/", "/proc/"+pid2+"/stat", unix.O_RDONLY, 0)
	require.ErrorIs(t, err, unix.ENOENT)
	require.NotContains(t, procList(t, fs, "/proc"), pid2)
	_, err = fs2.Stat("/", "/proc/self", true)
	require.ErrorIs(t, err, unix.ENOENT)
}
