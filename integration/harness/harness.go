// Package harness runs Endo's end-to-end tests against a real, private containerd: it starts the
// containerd built by integration/tools.sh on its own root, state and sockets, runs ctr and nerdctl
// against it, imports the busybox test image, and finds what a container left behind on the host.
//
// It must never touch the host's own containerd (/run/containerd, /var/lib/containerd) and never
// hide a leftover: whatever a test leaves (tasks, shims, mounts) is reported as a test failure
// before it is cleaned up.
package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "embed"
)

// RuntimeEndo and RuntimeRunc are the runtime types tests pass to ctr and nerdctl.
const (
	RuntimeEndo = "io.containerd.endo.v1"
	RuntimeRunc = "io.containerd.runc.v2"
)

//go:embed containerd.toml.tmpl
var configTemplate string

// Options change how Start runs containerd.
type Options struct {
	// WithoutEndo lets a test that only uses runc run without the repo's binaries
	// (`make build`). By default Start fails when they are missing.
	WithoutEndo bool
	// Snapshotter used by ctr and nerdctl ("overlayfs" if empty; "native" is the fallback).
	Snapshotter string
	// Namespace for ctr and nerdctl (a fresh "endo-test-N" if empty, so cgroup dirs made under
	// it are this daemon's alone and can be removed at the end).
	Namespace string
	// Timeout for each Ctr and Nerdctl call (1 minute if zero).
	Timeout time.Duration
}

// Containerd is one private containerd daemon.
type Containerd struct {
	dir         string
	ns          string
	snapshotter string
	timeout     time.Duration
	paths       Paths
	cmd         *exec.Cmd
	exited      chan struct{}
	exitErr     error
	logPath     string
	// hostFifos are the entries of the host's FIFO dir before start (see removeHostFifos).
	hostFifos map[string]bool
}

// Paths are the binaries and directories the harness uses.
type Paths struct {
	Repo     string // repository root (where go.mod is)
	RepoBin  string // Makefile's output: endo, containerd-shim-endo-v1
	ToolsBin string // tools.sh output: containerd, ctr, containerd-shim-runc-v2, nerdctl
}

// FindPaths locates the repo root from the working directory and the binary directories.
// ENDO_TOOLS overrides the tools cache directory (default <repo>/.cache, binaries in its bin/).
func FindPaths() (Paths, error) {
	wd, err := os.Getwd()
	if err != nil {
		return Paths{}, fmt.Errorf("getwd: %w", err)
	}
	dir := wd
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return Paths{}, fmt.Errorf("no go.mod above %s", wd)
		}
		dir = parent
	}
	p := Paths{Repo: dir, RepoBin: filepath.Join(dir, ".cache", "bin"), ToolsBin: filepath.Join(dir, ".cache", "bin")}
	if tools := os.Getenv("ENDO_TOOLS"); tools != "" {
		p.ToolsBin = filepath.Join(tools, "bin")
	}
	return p, nil
}

// Start runs a private containerd for the test and stops it in t.Cleanup. It skips the test when
// not root (containerd needs root here).
func Start(t testing.TB, opts Options) *Containerd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("integration tests need root (containerd, mounts, cgroups)")
	}
	paths, err := FindPaths()
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	for _, b := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
		if _, err := os.Stat(filepath.Join(paths.ToolsBin, b)); err != nil {
			t.Fatalf("harness: %s missing in %s: run `integration/tools.sh %s` (make tools)",
				b, paths.ToolsBin, filepath.Dir(paths.ToolsBin))
		}
	}
	if !opts.WithoutEndo {
		for _, b := range []string{"endo", "containerd-shim-endo-v1"} {
			if _, err := os.Stat(filepath.Join(paths.RepoBin, b)); err != nil {
				t.Fatalf("harness: %s missing in %s: run `make build`", b, paths.RepoBin)
			}
		}
	}

	reapStale(t)
	// /run keeps socket paths short; t.TempDir() paths can exceed the 108-byte limit.
	dir, err := os.MkdirTemp("/run", dirPrefix)
	if err != nil {
		t.Fatalf("harness: make private dir: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatalf("harness: write owner: %v", err)
	}
	c := &Containerd{
		dir:         dir,
		ns:          opts.Namespace,
		snapshotter: opts.Snapshotter,
		timeout:     opts.Timeout,
		paths:       paths,
		exited:      make(chan struct{}),
		logPath:     filepath.Join(dir, "containerd.log"),
	}
	if c.ns == "" {
		c.ns = filepath.Base(dir)
	}
	if c.snapshotter == "" {
		c.snapshotter = "overlayfs"
	}
	if c.timeout == 0 {
		c.timeout = time.Minute
	}
	c.hostFifos = listDir(hostFifoDir)
	if err := c.start(); err != nil {
		c.cleanup(t)
		t.Fatalf("harness: %v", err)
	}
	live.add(c)
	t.Cleanup(func() { c.cleanup(t) })
	return c
}

// RenderConfig returns the containerd config for a private directory (also used by demo.sh
// through the template file itself).
func RenderConfig(dir string) string {
	return strings.ReplaceAll(configTemplate, "@DIR@", dir)
}

func (c *Containerd) start() error {
	cfg := filepath.Join(c.dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(RenderConfig(c.dir)), 0o644); err != nil {
		return fmt.Errorf("write containerd config: %w", err)
	}
	for _, d := range []string{"s", "tmp", "cni/net.d"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o700); err != nil {
			return fmt.Errorf("make %s: %w", d, err)
		}
	}
	logf, err := os.Create(c.logPath)
	if err != nil {
		return fmt.Errorf("create containerd log: %w", err)
	}
	defer logf.Close()
	c.cmd = exec.Command(filepath.Join(c.paths.ToolsBin, "containerd"), "--config", cfg)
	c.cmd.Env = c.env()
	c.cmd.Stdout = logf
	c.cmd.Stderr = logf
	// Its own process group: a ^C at the terminal goes to the test, which then stops containerd
	// cleanly instead of containerd dying under live shims.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	go func() {
		c.exitErr = c.cmd.Wait()
		close(c.exited)
	}()

	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.Dial("unix", c.Address())
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("containerd exited at start (%v):\n%s", c.exitErr, c.LogTail(40))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd socket %s not up after 30s:\n%s", c.Address(), c.LogTail(40))
		}
	}
}

// env is the environment of containerd and of the tools run against it: the repo's binaries
// come first on PATH so containerd finds containerd-shim-endo-v1 there.
func (c *Containerd) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "CONTAINERD_") || strings.HasPrefix(kv, "NERDCTL_") {
			continue
		}
		env = append(env, kv)
	}
	path := c.paths.RepoBin + ":" + c.paths.ToolsBin + ":" + os.Getenv("PATH")
	return append(env, "PATH="+path)
}

// Dir is the private directory holding everything of this daemon.
func (c *Containerd) Dir() string { return c.dir }

// Address is containerd's gRPC socket path.
func (c *Containerd) Address() string { return filepath.Join(c.dir, "c.sock") }

// TTRPCAddress is containerd's ttrpc socket path.
func (c *Containerd) TTRPCAddress() string { return filepath.Join(c.dir, "c.sock.ttrpc") }

// Namespace is the containerd namespace Ctr and Nerdctl use.
func (c *Containerd) Namespace() string { return c.ns }

// Root and State are containerd's root and state directories.
func (c *Containerd) Root() string  { return filepath.Join(c.dir, "root") }
func (c *Containerd) State() string { return filepath.Join(c.dir, "state") }

// SocketDir is where shims put their sockets (the shim manager's socket_dir).
func (c *Containerd) SocketDir() string { return filepath.Join(c.dir, "s") }

// BundleDir is the bundle containerd makes for a task id in this daemon's namespace.
func (c *Containerd) BundleDir(id string) string {
	return filepath.Join(c.State(), "io.containerd.runtime.v2.task", c.ns, id)
}

// Paths are the binaries and repo directories in use.
func (c *Containerd) Paths() Paths { return c.paths }

// LogPath is containerd's log (shims log into it too).
func (c *Containerd) LogPath() string { return c.logPath }

// LogTail returns the last n lines of containerd's log.
func (c *Containerd) LogTail(n int) string {
	data, err := os.ReadFile(c.logPath)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", c.logPath, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// CtrCmd prepares a ctr command against this daemon, for tests that need stdin, a terminal or
// their own timeout.
func (c *Containerd) CtrCmd(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--address", c.Address(), "--namespace", c.ns}, withFifoDir(args, filepath.Join(c.dir, "fifo"))...)
	cmd := exec.CommandContext(ctx, filepath.Join(c.paths.ToolsBin, "ctr"), full...)
	cmd.Env = append(c.env(), "CONTAINERD_SNAPSHOTTER="+c.snapshotter)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// withFifoDir adds --fifo-dir to the ctr subcommands that make IO FIFOs, which would otherwise
// go to the host's /run/containerd/fifo (a test-given --fifo-dir wins: ctr takes the last).
func withFifoDir(args []string, dir string) []string {
	n := 0
	switch {
	case len(args) >= 1 && args[0] == "run":
		n = 1
	case len(args) >= 2 && (args[0] == "tasks" || args[0] == "task" || args[0] == "t") &&
		(args[1] == "start" || args[1] == "exec" || args[1] == "attach"):
		n = 2
	default:
		return args
	}
	out := append([]string{}, args[:n]...)
	out = append(out, "--fifo-dir", dir)
	return append(out, args[n:]...)
}

// Ctr runs ctr against this daemon with the harness timeout.
func (c *Containerd) Ctr(args ...string) (stdout, stderr string, err error) {
	return c.CtrIn("", args...)
}

// CtrIn is Ctr with stdin.
func (c *Containerd) CtrIn(stdin string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	return run(c.CtrCmd(ctx, args...), stdin, "ctr", args)
}

// NerdctlCmd prepares a nerdctl command against this daemon. Its state (names, hosts files, CNI
// config) lives in the private dir, never in /var/lib/nerdctl or /etc/cni.
func (c *Containerd) NerdctlCmd(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{
		"--address", c.Address(), "--namespace", c.ns, "--snapshotter", c.snapshotter,
		"--data-root", filepath.Join(c.dir, "nerdctl"),
		"--cni-netconfpath", filepath.Join(c.dir, "cni", "net.d"),
		"--cgroup-manager", "cgroupfs",
	}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(c.paths.ToolsBin, "nerdctl"), full...)
	// A missing config file means nerdctl's built-in defaults, not the host's /etc/nerdctl.
	cmd.Env = append(c.env(), "NERDCTL_TOML="+filepath.Join(c.dir, "nerdctl.toml"))
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Nerdctl runs nerdctl against this daemon with the harness timeout.
func (c *Containerd) Nerdctl(args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	return run(c.NerdctlCmd(ctx, args...), "", "nerdctl", args)
}

func run(cmd *exec.Cmd, stdin, name string, args []string) (string, string, error) {
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w (stderr: %s)", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), errb.String(), err
}

// ExitCode extracts the exit status of a failed Ctr/Nerdctl call (-1 if it did not exit).
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// liveSet holds the running daemons, so Leftovers can look under all their private dirs.
type liveSet struct {
	mu sync.Mutex
	m  map[*Containerd]struct{}
}

var live = liveSet{m: map[*Containerd]struct{}{}}

func (l *liveSet) add(c *Containerd) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[c] = struct{}{}
}

func (l *liveSet) remove(c *Containerd) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, c)
}

func (l *liveSet) list() []*Containerd {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*Containerd
	for c := range l.m {
		out = append(out, c)
	}
	return out
}
