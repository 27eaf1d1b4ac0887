package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	cshim "github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/log"

	"github.com/endovisor/endo/runtime"
)

// RuntimeName is the runtime type containerd knows Endo by.
const RuntimeName = "io.containerd.endo.v1"

// defaultSocketDir is containerd's own default for shim sockets (defaults.DefaultStateDir + "/s").
const defaultSocketDir = "/run/containerd/s"

// exitFile records a container's init exit in its bundle, for `delete` after the shim is gone.
const exitFile = "endo-exit.json"

// Manager implements containerd's shim.Shim: the short-lived `start` and `delete` actions.
type Manager struct{ name string }

// NewManager returns the manager for runtime name (normally RuntimeName).
func NewManager(name string) *Manager { return &Manager{name: name} }

// Name is the runtime name.
func (m *Manager) Name() string { return m.name }

// groupID is the pod a bundle belongs to: containers with the same group share one shim (and so
// one sandbox). A lone container is its own group.
func groupID(id string, b *runtime.Bundle) string {
	if b.SandboxID != "" {
		return b.SandboxID
	}
	return id
}

// Start runs in the bundle directory: it finds or starts the pod's shim daemon and returns its
// address.
func (m *Manager) Start(ctx context.Context, params *bootapi.BootstrapParams) (_ *bootapi.BootstrapResult, retErr error) {
	id := params.GetInstanceID()
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	b, err := runtime.LoadBundle(cwd)
	if err != nil {
		return nil, err
	}
	result := &bootapi.BootstrapResult{Version: 3, Protocol: "ttrpc"}

	dir := params.GetSocketDir()
	if dir == "" {
		dir = defaultSocketDir
	}
	addr, err := cshim.CreateSocketAddress(ctx, dir, params.GetContainerdGrpcAddress(), groupID(id, b), false)
	if err != nil {
		return nil, fmt.Errorf("socket address: %w", err)
	}
	l, err := cshim.NewSocket(addr)
	if err != nil {
		if !cshim.SocketEaddrinuse(err) {
			return nil, fmt.Errorf("create shim socket: %w", err)
		}
		// Another container of the pod started the pod's shim already: share it.
		if cshim.CanConnect(addr) {
			result.Address = addr
			return result, nil
		}
		if err := cshim.RemoveSocket(addr); err != nil {
			return nil, fmt.Errorf("remove stale shim socket: %w", err)
		}
		if l, err = cshim.NewSocket(addr); err != nil {
			return nil, fmt.Errorf("create shim socket: %w", err)
		}
	}
	defer func() {
		if retErr != nil {
			l.Close()
			_ = cshim.RemoveSocket(addr)
		}
	}()
	f, err := l.File()
	if err != nil {
		return nil, fmt.Errorf("shim socket file: %w", err)
	}
	defer f.Close()

	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-namespace", ns, "-id", id, "-address", params.GetContainerdGrpcAddress()}
	if params.GetLogLevel() <= bootapi.LogLevel_LOG_LEVEL_DEBUG {
		args = append(args, "-debug")
	}
	cmd := exec.Command(self, args...)
	cmd.Dir = cwd
	// The daemon reads TTRPC_ADDRESS (its event publisher) from the environment we pass on.
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	if a := params.GetContainerdTtrpcAddress(); a != "" && os.Getenv("TTRPC_ADDRESS") == "" {
		cmd.Env = append(cmd.Env, "TTRPC_ADDRESS="+a)
	}
	// Its own process group: signals to containerd's group must not reach the pod.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.ExtraFiles = []*os.File{f} // fd 3: the listening socket
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start shim daemon: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	if err := cshim.AdjustOOMScore(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("adjust shim oom score: %w", err)
	}
	result.Address = addr
	return result, nil
}

// exitRecord is what exitFile holds.
type exitRecord struct {
	Pid      int       `json:"pid"`
	Status   int       `json:"status"`
	ExitedAt time.Time `json:"exited_at"`
}

func writeExit(bundle string, r exitRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := filepath.Join(bundle, exitFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(bundle, exitFile))
}

func readExit(bundle string) (exitRecord, error) {
	var r exitRecord
	data, err := os.ReadFile(filepath.Join(bundle, exitFile))
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(data, &r)
}

// Stop is the `delete` action, run by containerd after every task delete and after it lost a
// shim. It cleans up this one container only: its rootfs mount. The sandbox needs no help: it
// ends when its shim's session ends, and the shim ends with its last container.
func (m *Manager) Stop(ctx context.Context, id string) (cshim.StopStatus, error) {
	bundle := ""
	if o, ok := ctx.Value(cshim.OptsKey{}).(cshim.Opts); ok {
		bundle = o.BundlePath
	}
	if bundle == "" {
		cwd, err := os.Getwd()
		if err != nil {
			return cshim.StopStatus{}, err
		}
		bundle = cwd
	}
	if err := unmountAll(filepath.Join(bundle, "rootfs")); err != nil {
		log.G(ctx).WithError(err).Warn("endo: unmount rootfs")
	}
	removeStaleSocket(ctx, bundle)
	if r, err := readExit(bundle); err == nil {
		return cshim.StopStatus{Pid: r.Pid, ExitStatus: r.Status, ExitedAt: r.ExitedAt}, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		log.G(ctx).WithError(err).Warn("endo: read exit record")
	}
	// No record: the shim died before its container exited, so the container died with it.
	return cshim.StopStatus{ExitStatus: 128 + int(syscall.SIGKILL), ExitedAt: time.Now()}, nil
}

// removeStaleSocket removes the shim socket containerd used for this bundle when nobody answers
// on it: the shim died without its own cleanup (killed), and a live pod shim is never touched.
func removeStaleSocket(ctx context.Context, bundle string) {
	data, err := os.ReadFile(filepath.Join(bundle, "bootstrap.json"))
	if err != nil {
		return
	}
	var b struct {
		Address string `json:"address"`
	}
	if json.Unmarshal(data, &b) != nil || b.Address == "" || cshim.CanConnect(b.Address) {
		return
	}
	if err := cshim.RemoveSocket(b.Address); err != nil {
		log.G(ctx).WithError(err).Warn("endo: remove stale shim socket")
	}
}

// Info reports the runtime's name and version; Endo takes no runtime options yet.
func (m *Manager) Info(ctx context.Context, optionsR io.Reader) (*types.RuntimeInfo, error) {
	if _, err := io.Copy(io.Discard, optionsR); err != nil {
		return nil, fmt.Errorf("read runtime options: %w", err)
	}
	return &types.RuntimeInfo{
		Name:    m.name,
		Version: &types.RuntimeVersion{Version: Version},
	}, nil
}

// Version of the shim, reported by Info and Connect.
var Version = "0.1.0-dev"
