package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	endoBin string // the endo binary under test
	rootfs  string // a rootfs with busybox and the tenant programs
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Getuid() != 0 {
		fmt.Println("endo run tests need root (they chroot for native comparisons)")
		return 1
	}
	dir, err := os.MkdirTemp("", "endo-run-test-")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer os.RemoveAll(dir)
	endoBin = filepath.Join(dir, "endo")
	if out, err := exec.Command("go", "build", "-o", endoBin, ".").CombinedOutput(); err != nil {
		fmt.Printf("build endo: %v\n%s", err, out)
		return 1
	}
	rootfs = filepath.Join(dir, "rootfs")
	if err := makeRootfs(rootfs); err != nil {
		fmt.Println(err)
		return 1
	}
	return m.Run()
}

// makeRootfs lays out busybox (Debian's busybox-static), its applets, the tenant programs built
// static, and a data file.
func makeRootfs(root string) error {
	bin := filepath.Join(root, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("need Debian's busybox-static (make test installs it): %w", err)
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), bb, 0o755); err != nil {
		return err
	}
	for _, a := range []string{"sh", "echo", "cat", "ls", "wc", "uname", "true", "false", "tty", "stty",
		"sleep", "kill", "time", "ps", "sort", "xargs", "find", "seq", "head", "tr", "expr", "grep", "sed", "date", "dd", "yes", "env"} {
		if err := os.Symlink("busybox", filepath.Join(bin, a)); err != nil {
			return err
		}
	}
	srcs, err := filepath.Glob(filepath.Join("..", "..", "tenants", "*.c"))
	if err != nil || len(srcs) == 0 {
		return fmt.Errorf("no tenant sources in ../../tenants: %v", err)
	}
	for _, src := range srcs {
		t := strings.TrimSuffix(filepath.Base(src), ".c")
		out, err := exec.Command("gcc", "-static", "-O2", "-pthread", "-o", filepath.Join(bin, t), src).CombinedOutput()
		if err != nil {
			return fmt.Errorf("build tenant %s: %v\n%s", t, err, out)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		return err
	}
	// For the native runs (chroot) only: inside Endo /dev is the sandbox's own.
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		return err
	}
	if err := syscall.Mknod(filepath.Join(root, "dev", "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, "data.txt"), []byte("one two\nthree\n"), 0o644)
}

type result struct {
	stdout, stderr string
	code           int
}

// paced is a command run at a test's pace: the test reads its output line by line and writes
// to its stdin when it is ready for the next step. It is killed when the test ends.
type paced struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

func startPaced(t *testing.T, name string, args ...string) *paced {
	t.Helper()
	cmd := exec.Command(name, args...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return &paced{cmd, stdin, bufio.NewScanner(stdout)}
}

// expect reads the next line of output and requires it to be want.
func (p *paced) expect(t *testing.T, want string) {
	t.Helper()
	require.True(t, p.lines.Scan(), "output ended before %q", want)
	require.Equal(t, want, p.lines.Text())
}

func runCmd(t *testing.T, stdin string, name string, args ...string) result {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			if name == endoBin {
				t.Fatalf("%s %v: endo itself was killed: %v", name, args, err)
			}
			code = 128 + int(ws.Signal()) // as a shell reports it
		}
	} else if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return result{out.String(), errb.String(), code}
}

// endo runs a program in a fresh sandbox over the test rootfs.
func endo(t *testing.T, args ...string) result {
	t.Helper()
	return runCmd(t, "", endoBin, append([]string{"run", "--rootfs", rootfs, "--"}, args...)...)
}

// native runs the same program on the host, chrooted into the same rootfs.
func native(t *testing.T, args ...string) result {
	t.Helper()
	return runCmd(t, "", "chroot", append([]string{rootfs}, args...)...)
}

// stubs lists the stub processes on the machine and their parents' pids.
func stubs() map[string]string {
	out := map[string]string{}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.HasPrefix(b, []byte("endo-stub\x00")) {
			continue
		}
		dir := filepath.Dir(p)
		st, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		if len(f) >= 2 {
			out[dir] = f[1]
		}
	}
	return out
}

// requireNoStubs checks that no stub is left: none orphaned, none under this test's endo. Stubs
// of other sandboxes running on the machine (their endo still alive) are not this test's.
func requireNoStubs(t *testing.T) {
	t.Helper()
	for dir, ppid := range stubs() {
		parent, _ := os.ReadFile("/proc/" + ppid + "/cmdline")
		if ppid == "1" || bytes.HasPrefix(parent, []byte(endoBin)) {
			t.Errorf("a stub process is left behind: %s (parent %s)", dir, ppid)
		}
	}
}

func TestProgramsPrintWhatTheyPrintNatively(t *testing.T) {
	for _, args := range [][]string{
		{"/bin/hello"},
		{"/bin/hello", "a", "b"},
		{"echo", "hello", "from", "endo"},
		{"cat", "/data.txt"},
		{"ls", "/"},
		{"ls", "-l", "/bin"},
		{"ls", "-la", "/etc"},
		{"wc", "/data.txt"},
		{"uname", "-s", "-m"},
		{"true"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			want := native(t, args...)
			got := endo(t, args...)
			require.Equal(t, want, got)
		})
	}
	requireNoStubs(t)
}

func TestUnameReportsTheSandbox(t *testing.T) {
	got := endo(t, "uname", "-r", "-v")
	require.Equal(t, 0, got.code)
	require.Contains(t, got.stdout, "endo")
	require.NotEqual(t, native(t, "uname", "-r", "-v").stdout, got.stdout)
}

func TestExitStatusPropagates(t *testing.T) {
	require.Equal(t, 1, endo(t, "false").code)
	require.Equal(t, 139, endo(t, "/bin/segv").code, "killed by SIGSEGV: 128+11")
	require.Equal(t, native(t, "/bin/segv").code, 139)
}

func TestStdinReachesTheTenant(t *testing.T) {
	got := runCmd(t, "piped data\n", endoBin, "run", "--rootfs", rootfs, "--", "cat")
	require.Equal(t, result{"piped data\n", "", 0}, got)
}

// A tenant that jumps to the stub's own syscall instruction gets nothing from the host: the
// filter kills it.
func TestJumpIntoTheStubIsKilled(t *testing.T) {
	for _, call := range []string{"execve", "open", "mmap"} {
		t.Run(call, func(t *testing.T) {
			got := endo(t, "/bin/hostile", "jump", call)
			require.NotContains(t, got.stdout, "ESCAPED")
			require.Equal(t, 128+31, got.code, "killed by SIGSYS")
			require.Contains(t, got.stderr, "forbidden host system call")
		})
	}
	requireNoStubs(t)
}

// Paths are resolved inside the rootfs: a file that exists only on the host is not there.
func TestPathsStayInTheRootfs(t *testing.T) {
	host, err := os.CreateTemp("", "endo-host-only-")
	require.NoError(t, err)
	host.WriteString("host secret\n")
	host.Close()
	defer os.Remove(host.Name())
	link := filepath.Join(rootfs, "escape-link")
	require.NoError(t, os.Symlink(host.Name(), link))
	defer os.Remove(link)

	for _, p := range []string{
		"../../../../../../.." + host.Name(),
		host.Name(),
		"/escape-link",
		"/bin/../../../.." + host.Name(),
	} {
		got := endo(t, "cat", p)
		require.NotContains(t, got.stdout, "host secret", p)
		require.NotEqual(t, 0, got.code, p)
		require.Contains(t, got.stderr, "No such file or directory", p)
	}
}

func TestMemoryOutsideTheGrant(t *testing.T) {
	// 64 MiB of grant: a tenant that touches 200 MiB is OOM-killed inside the sandbox, which
	// survives to report it.
	got := runCmd(t, "", endoBin, "run", "--memory", fmt.Sprint(64<<20), "--rootfs", rootfs, "--", "/bin/hostile", "grab", "200")
	require.NotContains(t, got.stdout, "GOT")
	require.Equal(t, 128+9, got.code, "killed by SIGKILL, as the OOM killer does")
	require.Contains(t, got.stderr, "out of memory")
	// The OOM kill takes one process; the shell that started it goes on.
	got = runCmd(t, "", endoBin, "run", "--memory", fmt.Sprint(64<<20), "--rootfs", rootfs, "--",
		"sh", "-c", "dd if=/dev/zero bs=1M count=200 2>/dev/null | sort > /dev/null; echo after $?")
	require.Equal(t, "after 137\n", got.stdout, got.stderr)
	require.Equal(t, 0, got.code)
	// Writing to the stub's read-only pages or to a wild address is a fault.
	require.Equal(t, 139, endo(t, "/bin/hostile", "write-setup").code)
	require.Equal(t, 139, endo(t, "/bin/hostile", "wild").code)
	requireNoStubs(t)
}

func TestBadInputGetsOneClearLine(t *testing.T) {
	garbage := filepath.Join(rootfs, "bin", "garbage")
	require.NoError(t, os.WriteFile(garbage, bytes.Repeat([]byte{0x7f, 'E', 'L', 'F', 0xff}, 40), 0o755))
	defer os.Remove(garbage)
	truncated := filepath.Join(rootfs, "bin", "truncated")
	hello, err := os.ReadFile(filepath.Join(rootfs, "bin", "hello"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(truncated, hello[:4096], 0o755))
	defer os.Remove(truncated)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--rootfs", rootfs, "--", "/bin/garbage"}, "not a valid ELF"},
		{[]string{"run", "--rootfs", rootfs, "--", "/bin/truncated"}, "not a valid ELF executable"},
		{[]string{"run", "--rootfs", rootfs, "--", "/bin/nonexistent"}, "no such file"},
		{[]string{"run", "--rootfs", rootfs, "--", "nonexistent"}, "not found in $PATH"},
		{[]string{"run", "--rootfs", "/nonexistent-rootfs", "--", "/bin/echo"}, "rootfs /nonexistent-rootfs"},
	} {
		got := runCmd(t, "", endoBin, c.args...)
		require.NotEqual(t, 0, got.code, c.args)
		require.Empty(t, got.stdout)
		require.Equal(t, 1, strings.Count(got.stderr, "\n"), "one line: %q", got.stderr)
		require.Contains(t, got.stderr, c.want)
		requireNoStubs(t)
	}
}

func TestReportListsUnimplementedCalls(t *testing.T) {
	got := runCmd(t, "", endoBin, "run", "--report", "--rootfs", rootfs, "--", "/bin/hostile", "unimplemented")
	require.Equal(t, 0, got.code)
	require.Contains(t, got.stdout, "errno 38", "ENOSYS reached the tenant")
	require.Contains(t, got.stderr, "io_setup: 1")
}

// Shell scripts with pipelines, subshells, command substitution, loops, background jobs, wait,
// trap and kill print what they print natively.
func TestShellScriptsMatchNative(t *testing.T) {
	for name, script := range map[string]string{
		"pipeline":       `echo one two three | tr ' ' '\n' | sort | head -2`,
		"subshell":       `(echo in; exit 3); echo status $?`,
		"substitution":   `x=$(echo inner); echo "got $x" $(seq 1 3)`,
		"loop":           `for i in 1 2 3; do echo line $i; done | wc -l`,
		"while":          `i=0; while [ $i -lt 5 ]; do i=$((i+1)); done; echo $i`,
		"background":     `sleep 0.1 & p=$!; echo started; wait $p; echo waited $?`,
		"kill":           `sleep 10 & p=$!; kill $p; wait $p 2>/dev/null; echo status $?`,
		"trap":           `trap 'echo caught USR1' USR1; kill -USR1 $$; echo after`,
		"xargs":          `printf 'a\nb\nc\n' | xargs -n1 echo item`,
		"find":           `find /bin -name 's*' | sort`,
		"exec":           `exec echo replaced`,
		"exit":           `false || exit 7`,
		"grep-sed":       `grep -c root /etc/passwd; echo hello | sed s/h/j/`,
		"expr":           `expr 6 \* 7`,
		"clock-in-child": `(date +%Y); date +%Y | cat`,
		"sigpipe":        `yes | head -1; cat /bin/busybox | head -c 3 | wc -c`,
	} {
		t.Run(name, func(t *testing.T) {
			want := native(t, "sh", "-c", script)
			got := endo(t, "sh", "-c", script)
			require.Equal(t, want, got)
		})
	}
	requireNoStubs(t)
}

// A fork-heavy script: every child is its own stub; none is left after.
func TestManyChildren(t *testing.T) {
	got := endo(t, "sh", "-c", `for i in $(seq 1 30); do echo $i | cat > /dev/null; done; echo done`)
	require.Equal(t, result{"done\n", "", 0}, got)
	requireNoStubs(t)
}

// pthreads: eight threads, a mutex and a condition variable give the right result; a thread's
// crash kills the whole process with its signal.
func TestThreads(t *testing.T) {
	want := native(t, "/bin/threads", "count", "20000")
	require.Equal(t, "counter 160000 turns 8 joined 280\n", want.stdout)
	require.Equal(t, want, endo(t, "/bin/threads", "count", "20000"))
	require.Equal(t, 139, endo(t, "/bin/threads", "crash").code)
	requireNoStubs(t)
}

// Threads that spin without a system call share the vCPUs: the kernelet preempts a task at
// the end of its time slice when another waits (here three busy threads on one vCPU).
func TestBusyThreadsShareAVCPU(t *testing.T) {
	got := runCmd(t, "", endoBin, "run", "--cpus", "1", "--rootfs", rootfs, "--", "/bin/spin", "3")
	require.Equal(t, result{"spin ok 3\n", "", 0}, got)
}

// A signal handler that changes the vector registers leaves the interrupted code's as they were:
// the frame carries the FPU state.
func TestSignalHandlerKeepsFPUState(t *testing.T) {
	require.Equal(t, result{"fpu ok\n", "", 0}, endo(t, "/bin/sigfpu"))
}

// Copy-on-write after fork: 100 children each read, then write the parent's page; everyone
// sees their own data and the reads take no fault. The first child's write is a copy-on-write
// fault; later children find the page copied at fork, since their siblings wrote it (memgrant's
// tests show that part).
func TestCopyOnWriteFork(t *testing.T) {
	got := runCmd(t, "", endoBin, "run", "--report", "--rootfs", rootfs, "--", "/bin/cow")
	require.Equal(t, "cow ok\n", got.stdout, got.stderr)
	m := regexp.MustCompile(`page faults served by the sandbox: (\d+) reads, (\d+) writes`).FindStringSubmatch(got.stderr)
	require.NotNil(t, m, got.stderr)
	reads, _ := strconv.Atoi(m[1])
	writes, _ := strconv.Atoi(m[2])
	require.Equal(t, 0, reads, "reads after fork take no fault")
	require.GreaterOrEqual(t, writes, 1, "the first child's write is a copy-on-write fault")
	requireNoStubs(t)
}

// /proc is the sandbox's own: busybox ps lists the container's processes (and only them) from
// their stat and cmdline files, self is the reader, and maps shows the program's mappings.
func TestProcAndPs(t *testing.T) {
	// The loop waits until the background sleep has exec'd (its comm changes from sh); it is
	// bounded so that a missing /proc fails the test instead of hanging it.
	got := endo(t, "sh", "-c", `sleep 5 & for i in $(seq 1000); do [ "$(cat /proc/$!/comm)" = sleep ] && break; done; /bin/ps; kill $!`)
	require.Equal(t, 0, got.code, got.stderr)
	lines := strings.Split(strings.TrimSpace(got.stdout), "\n")
	require.Len(t, lines, 4, got.stdout)
	require.Regexp(t, `^\s*PID\s+USER\s+COMMAND$`, lines[0])
	require.Regexp(t, `^\s*1 root\s+sh -c sleep 5 & for i`, lines[1])
	require.Regexp(t, `^\s*2 root\s+sleep 5$`, lines[2])
	require.Regexp(t, `^\s*\d+ root\s+/bin/ps$`, lines[3])

	// The reader of /proc/self/stat is the shell's pid after exec.
	got = endo(t, "sh", "-c", `echo $$; exec cat /proc/self/stat`)
	require.Equal(t, 0, got.code, got.stderr)
	pid, stat, _ := strings.Cut(got.stdout, "\n")
	require.Regexp(t, `^`+pid+` \(cat\) R `, stat)

	got = endo(t, "cat", "/proc/version")
	require.Equal(t, 0, got.code, got.stderr)
	require.Contains(t, got.stdout, "endo")

	// Only the container's pids: the shell (1) and ls (2), never the host's.
	got = endo(t, "sh", "-c", "ls /proc; true")
	require.Equal(t, 0, got.code, got.stderr)
	var pids []string
	for _, name := range strings.Fields(got.stdout) {
		if _, err := strconv.Atoi(name); err == nil {
			pids = append(pids, name)
		}
	}
	require.Equal(t, []string{"1", "2"}, pids, got.stdout)
	require.Contains(t, strings.Fields(got.stdout), "self")

	got = endo(t, "sh", "-c", "cat /proc/1/maps; true")
	require.Equal(t, 0, got.code, got.stderr)
	// sh is a symlink to busybox: maps names the file itself, as Linux's does.
	require.Regexp(t, `(?m)^[0-9a-f]+-[0-9a-f]+ r-xp [0-9a-f]+ 00:00 0 +/bin/busybox$`, got.stdout)
	require.Regexp(t, `(?m) \[stack\]$`, got.stdout)
	requireNoStubs(t)
}

// A signal ends a program blocked reading a pipe: endo passes its own signals to the program,
// and the program's wait in the host poll is cut short.
func TestSignalEndsABlockedRead(t *testing.T) {
	cmd := exec.Command(endoBin, "run", "--rootfs", rootfs, "--", "cat")
	w, err := cmd.StdinPipe() // never written, never closed: cat blocks in read
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, cmd.Start())
	// Once the program's stub exists, endo catches signals (it does from before the spawn).
	deadline := time.Now().Add(10 * time.Second)
	for !hasStubChild(cmd.Process.Pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // and cat is blocked in its read
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, 128+15, ee.ExitCode())
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("cat did not end on SIGTERM")
	}
	requireNoStubs(t)
}

// hasStubChild reports whether process pid has a stub among its children.
func hasStubChild(pid int) bool {
	for _, ppid := range stubs() {
		if ppid == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}
