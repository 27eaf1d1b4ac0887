package shim

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/endovisor/endo/cgroupfair"

	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/pkg/sys/reaper"
	"github.com/containerd/log"

	"github.com/endovisor/endo/runtime"
	"github.com/endovisor/endo/sandbox/control"
)

// sandboxBinary is the name of the sandbox executable.
const sandboxBinary = "endo"

// sandboxProc is the pod's `endo boot` process, a child of the shim.
type sandboxProc struct {
	cmd    *exec.Cmd
	client *control.Client
	cgroup *cgroupfair.Pod
	cgOnce sync.Once

	exited chan struct{} // closed when the process is gone
	mu     sync.Mutex
	status int
}

// findSandboxBinary looks next to the shim first, so that a shim and its sandbox come from the
// same build, then on PATH.
func findSandboxBinary() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), sandboxBinary)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(sandboxBinary)
	if err != nil {
		return "", fmt.Errorf("find sandbox binary %q next to the shim or on PATH: %w", sandboxBinary, err)
	}
	return p, nil
}

// socketParent is where the sandbox's short-lived control socket goes. The socket exists only
// until the shim has connected (the sandbox then unlinks it); a short directory keeps the path
// under the 108-byte limit whatever containerd's state dir is.
func socketParent() string {
	if fi, err := os.Stat("/run"); err == nil && fi.IsDir() && syscall.Access("/run", 2) == nil {
		return "/run"
	}
	return os.TempDir()
}

// bootSandbox starts `endo boot` sized for bundle b and connects to it.
func bootSandbox(ctx context.Context, pod string, b *runtime.Bundle) (_ *sandboxProc, retErr error) {
	bin, err := findSandboxBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(socketParent(), "endo-")
	if err != nil {
		return nil, fmt.Errorf("sandbox socket dir: %w", err)
	}
	defer os.RemoveAll(dir)
	cfg := control.BootConfig{
		Socket:      filepath.Join(dir, "control.sock"),
		Pod:         pod,
		MemoryBytes: b.Resources.MemoryBytes,
		VCPUs:       b.Resources.VCPUs,
		Hostname:    b.Hostname,
	}
	// The pod's cgroup: the sandbox, and the stubs it starts, live there, so that Linux divides
	// CPU and memory between pods (see package cgroupfair).
	var lres *specs.LinuxResources
	cgPath := ""
	if b.Spec.Linux != nil {
		lres, cgPath = b.Spec.Linux.Resources, b.Spec.Linux.CgroupsPath
	}
	cgPath, err = cgroupfair.PathFor(cgPath, pod)
	if err != nil {
		return nil, err
	}
	cg, err := cgroupfair.Create(cgPath, lres)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"boot"}, cfg.Args()...)...)
	cmd.Dir = "/"
	// The sandbox's diagnostics go where the shim's go: containerd's shim log.
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Belt and braces: the sandbox also ends when its session with us closes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	ec, err := reaper.Default.StartLocked(cmd)
	if err != nil {
		cg.Delete()
		return nil, fmt.Errorf("start sandbox %s: %w", bin, err)
	}
	s := &sandboxProc{cmd: cmd, cgroup: cg, exited: make(chan struct{})}
	go func() {
		st, err := reaper.Default.Wait(cmd, ec)
		if err != nil {
			st = -1
		}
		s.mu.Lock()
		s.status = st
		s.mu.Unlock()
		close(s.exited)
		log.G(ctx).WithField("pid", cmd.Process.Pid).WithField("status", st).Info("endo: sandbox exited")
	}()
	defer func() {
		if retErr != nil {
			s.kill()
		}
	}()
	if err := cg.Add(cmd.Process.Pid); err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	alive := func() error {
		select {
		case <-s.exited:
			return fmt.Errorf("sandbox exited during boot (status %d); see the shim log", s.exitStatus())
		default:
			return nil
		}
	}
	c, err := control.Dial(dctx, cfg.Socket, alive)
	if err != nil {
		return nil, err
	}
	s.client = c
	return s, nil
}

// Pid is the sandbox's host pid.
func (s *sandboxProc) Pid() int { return s.cmd.Process.Pid }

func (s *sandboxProc) exitStatus() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Alive says whether the process still runs.
func (s *sandboxProc) Alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// errSandboxGone reports calls made after the sandbox died.
var errSandboxGone = errors.New("the pod's sandbox has exited")

func (s *sandboxProc) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	if s.client != nil {
		s.client.Close()
	}
	s.removeCgroup()
}

// removeCgroup deletes the pod's cgroup once the sandbox's stubs, which die with it, are gone.
func (s *sandboxProc) removeCgroup() {
	s.cgOnce.Do(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := s.cgroup.Delete()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				log.L.WithError(err).Warn("endo: pod cgroup left behind")
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// Stop asks the sandbox to shut down, and kills it if it has not within a few seconds.
func (s *sandboxProc) Stop(ctx context.Context) {
	if s.Alive() && s.client != nil {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = s.client.Shutdown(sctx)
		cancel()
	}
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		log.G(ctx).Warn("endo: sandbox did not exit after Shutdown; killing it")
	}
	s.kill()
}
