package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The stub of an exited process serves later forks (it is emptied, not killed): a later child
// must find nothing of an earlier one's memory. Readers of an address only the writers mapped
// are killed by SIGSEGV, as natively.
func TestExitedChildLeavesNothingMapped(t *testing.T) {
	want := native(t, "/bin/recycle")
	require.Equal(t, strings.Repeat("writer: exit 0\n", 4)+strings.Repeat("reader: signal 11\n", 4), want.stdout)
	require.Equal(t, want, endo(t, "/bin/recycle"))
	requireNoStubs(t)
}

// Programs' pages are cached between runs: a program file rewritten in place between two
// runs (same size and layout, other bytes) runs as its new self.
func TestRewrittenProgramRunsAnew(t *testing.T) {
	hello, err := os.ReadFile(filepath.Join(rootfs, "bin", "hello"))
	require.NoError(t, err)
	shout := bytes.Replace(hello, []byte("hello, world"), []byte("HELLO, WORLD"), 1)
	require.NotEqual(t, hello, shout)
	require.NoError(t, os.WriteFile(filepath.Join(rootfs, "shout"), shout, 0o755))
	t.Cleanup(func() { os.Remove(filepath.Join(rootfs, "shout")) })
	script := "cp /bin/hello /prog && /prog && /prog && cp /shout /prog && /prog; rm /prog"
	want := native(t, "/bin/sh", "-c", script)
	require.Equal(t, "hello, world (1 args)\nhello, world (1 args)\nHELLO, WORLD (1 args)\n", want.stdout)
	require.Equal(t, want, endo(t, "/bin/sh", "-c", script))
}

// Shared anonymous memory is shared with children across fork; private memory is copied.
func TestSharedAnonymousMemoryAcrossFork(t *testing.T) {
	want := native(t, "/bin/shm")
	require.Equal(t, "child sees shared=parent private=parent\nparent sees shared=child/second page private=parent\n", want.stdout)
	require.Equal(t, want, endo(t, "/bin/shm"))
}

// A private file mapping reads the file's bytes after its descriptor is closed, for a small
// file (cached pages) and one too big to map at once (populated at first touch); writes to
// the mapping stay out of the file.
func TestFileMappingOutlivesItsDescriptor(t *testing.T) {
	for _, size := range []int64{4 << 20, 72 << 20} {
		path := filepath.Join(rootfs, "mapped")
		f, err := os.Create(path)
		require.NoError(t, err)
		require.NoError(t, f.Truncate(size))
		for off := int64(0); off < size; off += 1 << 20 {
			_, err := f.WriteAt([]byte("Mark"), off)
			require.NoError(t, err)
		}
		require.NoError(t, f.Close())
		want := native(t, "/bin/mapfile", "/mapped")
		require.Contains(t, want.stdout, "file still says Mark, mapping says Over", size)
		require.Equal(t, want, endo(t, "/bin/mapfile", "/mapped"), size)
		require.NoError(t, os.Remove(path))
	}
}

// A child process and a thread inherit their parent's nice value and signal mask.
func TestChildrenInheritNiceAndMask(t *testing.T) {
	want := native(t, "/bin/inherit")
	require.Equal(t, "parent: nice 5, SIGUSR1 blocked 1\nchild: nice 5, SIGUSR1 blocked 1\nthread: nice 5, SIGUSR1 blocked 1\n", want.stdout)
	require.Equal(t, want, endo(t, "/bin/inherit"))
}

// wait4 reports a child's CPU time: busybox time shows the user time of a loop that makes no
// system call, as natively (zero before the sandbox kept children's usage).
func TestTimeReportsChildCPU(t *testing.T) {
	script := `i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done`
	for _, r := range []result{native(t, "/bin/time", "-p", "sh", "-c", script), endo(t, "/bin/time", "-p", "sh", "-c", script)} {
		require.Equal(t, 0, r.code, r.stderr)
		var real, user, sys float64
		_, err := fmt.Sscanf(r.stderr, "real %f\nuser %f\nsys %f", &real, &user, &sys)
		require.NoError(t, err, r.stderr)
		require.Greater(t, user+sys, 0.02, r.stderr)
		require.LessOrEqual(t, user+sys, real*1.5+0.05, r.stderr)
	}
}

// ru_maxrss is the peak of a process's resident memory, in getrusage, wait4 and RUSAGE_CHILDREN,
// banded as the tenant prints it, as natively (it was 0).
func TestMaxRSS(t *testing.T) {
	want := native(t, "/bin/maxrss")
	require.Equal(t, 0, want.code, want.stderr)
	require.Contains(t, want.stdout, "child in wait4: 48 to 96 MiB")
	got := endo(t, "/bin/maxrss")
	require.Equal(t, want, got)
}

// The memory of a child that exits with 64 MiB mapped goes back to the pod when its parent hears
// of the exit, as on Linux: the pod's cgroup is not charged for it after (a spare stub keeps
// only small remains of its last process mapped).
func TestExitedChildsMemoryGoesBack(t *testing.T) {
	path := fmt.Sprintf("/endo-test-memory-%d", os.Getpid())
	run := startPaced(t, endoBin, "run", "--cgroup", path, "--rootfs", rootfs, "--", "/bin/bigchild")
	usage := func() int64 {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", path, "memory.usage_in_bytes"))
		if os.IsNotExist(err) {
			b, err = os.ReadFile(filepath.Join("/sys/fs/cgroup", path, "memory.current"))
		}
		require.NoError(t, err)
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		require.NoError(t, err)
		return n
	}
	run.expect(t, "ready")
	before := usage()
	_, err := run.stdin.Write([]byte{1})
	require.NoError(t, err)
	run.expect(t, "child done: 0")
	after := usage()
	require.NoError(t, run.stdin.Close())
	require.NoError(t, run.cmd.Wait())
	require.Less(t, after-before, int64(16<<20), "the pod is charged %d MiB more after its child exited", (after-before)>>20)
	require.False(t, cgroupExists(path))
	requireNoStubs(t)
}

// vfork and posix_spawn: the parent is held until its child execs or exits, then goes on and
// waits for it, also when the child is done before the parent has looked (300 in a row).
func TestVforkAndSpawn(t *testing.T) {
	want := native(t, "/bin/spawn")
	require.Equal(t, "vfork, _exit: exit 3\nhello, world (3 args)\nvfork, execve: exit 0\n"+
		"hello, world (2 args)\nposix_spawn: exit 0\n300 vforks: 0 wrong\n", want.stdout)
	require.Equal(t, want, endo(t, "/bin/spawn"))
	requireNoStubs(t)
}
