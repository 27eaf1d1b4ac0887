package shim

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	cshim "github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/fifo"
	"github.com/containerd/typeurl/v2"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/endovisor/endo/sandbox/control"
)

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mounts)")
	}
}

func isMounted(t *testing.T, path string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

func TestRootfsMountAndStop(t *testing.T) {
	needRoot(t)
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "marker"), []byte("x"), 0o644))
	bundle := t.TempDir()
	target := filepath.Join(bundle, "rootfs")
	require.NoError(t, mountRootfs([]*types.Mount{{Type: "bind", Source: src, Options: []string{"rbind", "ro"}}}, target))
	require.True(t, isMounted(t, target))
	_, err := os.ReadFile(filepath.Join(target, "marker"))
	require.NoError(t, err)
	err = os.WriteFile(filepath.Join(target, "new"), nil, 0o644)
	require.ErrorIs(t, err, syscall.EROFS, "ro must be honoured on a bind mount")

	// The delete action unmounts and reports the recorded exit; a second delete is a no-op.
	at := time.Now().Truncate(time.Second)
	require.NoError(t, writeExit(bundle, exitRecord{Pid: 7, Status: 3, ExitedAt: at}))
	ctx := context.WithValue(namespaces.WithNamespace(context.Background(), "t"), cshim.OptsKey{}, cshim.Opts{BundlePath: bundle})
	m := NewManager(RuntimeName)
	for range 2 {
		st, err := m.Stop(ctx, "c1")
		require.NoError(t, err)
		require.Equal(t, 3, st.ExitStatus)
		require.Equal(t, 7, st.Pid)
		require.True(t, st.ExitedAt.Equal(at))
		require.False(t, isMounted(t, target))
	}
	// Without a record the container died with its shim.
	require.NoError(t, os.Remove(filepath.Join(bundle, exitFile)))
	st, err := m.Stop(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, 137, st.ExitStatus)
}

func TestMountFailureLeavesNothing(t *testing.T) {
	needRoot(t)
	target := filepath.Join(t.TempDir(), "rootfs")
	err := mountRootfs([]*types.Mount{
		{Type: "bind", Source: t.TempDir(), Options: []string{"rbind"}},
		{Type: "bind", Source: "/does/not/exist", Options: []string{"rbind"}},
	}, target)
	require.ErrorContains(t, err, "/does/not/exist")
	require.False(t, isMounted(t, target))
}

// Start of a second container of a pod whose shim already listens returns that shim's address
// without starting another.
func TestStartJoinsThePodShim(t *testing.T) {
	bundle := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"root":{"path":"rootfs"},"process":{"args":["sh"]},
	"annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-id":"pod-a"}}`), 0o644))
	sockDir, err := os.MkdirTemp("/tmp", "es-")
	require.NoError(t, err)
	defer os.RemoveAll(sockDir)
	ctx := namespaces.WithNamespace(context.Background(), "t")
	addr, err := cshim.CreateSocketAddress(ctx, sockDir, "/run/c.sock", "pod-a", false)
	require.NoError(t, err)
	l, err := cshim.NewSocket(addr)
	require.NoError(t, err)
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	wd, _ := os.Getwd()
	require.NoError(t, os.Chdir(bundle))
	defer os.Chdir(wd)
	res, err := NewManager(RuntimeName).Start(ctx, &bootapi.BootstrapParams{
		InstanceID: "app1", Namespace: "t", ContainerdGrpcAddress: "/run/c.sock", SocketDir: &sockDir,
	})
	require.NoError(t, err)
	require.Equal(t, addr, res.Address)
	require.Equal(t, int32(3), res.Version)
	require.Equal(t, "ttrpc", res.Protocol)

	// A broken config.json fails start with one line naming the bundle.
	require.NoError(t, os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"process":`), 0o644))
	_, err = NewManager(RuntimeName).Start(ctx, &bootapi.BootstrapParams{InstanceID: "app2", Namespace: "t", SocketDir: &sockDir})
	require.ErrorContains(t, err, bundle)
	require.NotContains(t, err.Error(), "\n")
}

func TestMetricsMatchHostCgroupVersion(t *testing.T) {
	r := control.StatsReply{MemoryBytes: 3 << 20, MemoryLimit: 1 << 30, CPUNanos: 5_000_000, Pids: 2}
	a, err := metrics(r, true)
	require.NoError(t, err)
	m, err := typeurl.UnmarshalAny(a)
	require.NoError(t, err)
	m2 := m.(*v2.Metrics)
	require.Equal(t, uint64(3<<20), m2.Memory.Usage)
	require.Equal(t, uint64(5000), m2.CPU.UsageUsec)
	require.Equal(t, uint64(2), m2.Pids.Current)

	a, err = metrics(r, false)
	require.NoError(t, err)
	m, err = typeurl.UnmarshalAny(a)
	require.NoError(t, err)
	m1 := m.(*v1.Metrics)
	require.Equal(t, uint64(3<<20), m1.Memory.Usage.Usage)
	require.Equal(t, uint64(5_000_000), m1.CPU.Usage.Total)
}

// The tenant's files are plain pipes; the shim copies to and from containerd's FIFOs.
func TestProcIOFifos(t *testing.T) {
	dir := t.TempDir()
	paths := map[string]string{}
	for _, n := range []string{"in", "out", "err"} {
		paths[n] = filepath.Join(dir, n)
		require.NoError(t, unix.Mkfifo(paths[n], 0o600))
	}
	ctx := context.Background()
	// containerd's side of the FIFOs.
	out, err := fifo.OpenFifo(ctx, paths["out"], unix.O_RDONLY|unix.O_NONBLOCK, 0)
	require.NoError(t, err)
	defer out.Close()
	errf, err := fifo.OpenFifo(ctx, paths["err"], unix.O_RDONLY|unix.O_NONBLOCK, 0)
	require.NoError(t, err)
	defer errf.Close()
	in, err := fifo.OpenFifo(ctx, paths["in"], unix.O_WRONLY|unix.O_NONBLOCK, 0)
	require.NoError(t, err)

	p, err := newProcIO(ctx, ioConfig{id: "c", stdin: paths["in"], stdout: paths["out"], stderr: paths["err"]})
	require.NoError(t, err)
	defer p.Close()
	tenant := p.tenant
	p.tenant = control.Stdio{} // the "sandbox" owns these now

	_, err = in.Write([]byte("typed"))
	require.NoError(t, err)
	in.Close()
	got, err := io.ReadAll(tenant.Stdin)
	require.NoError(t, err)
	require.Equal(t, "typed", string(got))

	_, err = tenant.Stdout.WriteString("hello\n")
	require.NoError(t, err)
	_, err = tenant.Stderr.WriteString("oops\n")
	require.NoError(t, err)
	tenant.Close()
	p.WaitOutput(5 * time.Second)
	b, err := io.ReadAll(out)
	require.NoError(t, err)
	require.Equal(t, "hello\n", string(b))
	b, err = io.ReadAll(errf)
	require.NoError(t, err)
	require.Equal(t, "oops\n", string(b))
}

func TestProcIOFileLog(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "log")
	p, err := newProcIO(context.Background(), ioConfig{id: "c", stdout: "file://" + logPath, stderr: "file://" + logPath})
	require.NoError(t, err)
	_, err = p.tenant.Stdout.WriteString("a")
	require.NoError(t, err)
	_, err = p.tenant.Stderr.WriteString("b")
	require.NoError(t, err)
	p.sent()
	p.Close()
	b, err := os.ReadFile(logPath)
	require.NoError(t, err)
	require.Equal(t, "ab", string(b))
}

func TestProcIOTerminal(t *testing.T) {
	p, err := newProcIO(context.Background(), ioConfig{id: "c", terminal: true})
	require.NoError(t, err)
	defer p.Close()
	require.NotNil(t, p.tenant.Stdin)
	require.Same(t, p.tenant.Stdin, p.tenant.Stdout)
	require.NoError(t, p.Resize(100, 40))
	ws, err := unix.IoctlGetWinsize(int(p.tenant.Stdout.Fd()), unix.TIOCGWINSZ)
	require.NoError(t, err)
	require.Equal(t, uint16(100), ws.Col)
	require.Equal(t, uint16(40), ws.Row)
	p.sent()
}
