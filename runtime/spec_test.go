package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const goodSpec = `{
  "ociVersion": "1.1.0",
  "hostname": "web",
  "root": {"path": "rootfs"},
  "process": {
    "terminal": true,
    "user": {"uid": 1000, "gid": 1000, "additionalGids": [5]},
    "args": ["sh", "-c", "echo hi"],
    "env": ["PATH=/bin"],
    "cwd": "/work",
    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 512}]
  },
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
    {"destination": "/data", "type": "bind", "source": "/srv/data", "options": ["rbind", "ro"]},
    {"destination": "/etc/hosts", "source": "hosts", "options": ["bind"]}
  ],
  "annotations": {
    "io.kubernetes.cri.container-type": "container",
    "io.kubernetes.cri.sandbox-id": "pod1"
  },
  "linux": {"resources": {"memory": {"limit": 268435456}, "cpu": {"quota": 150000, "period": 100000}}}
}`

func writeBundle(t *testing.T, config string) string {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644))
	return dir
}

func TestLoadBundle(t *testing.T) {
	dir := writeBundle(t, goodSpec)
	b, err := LoadBundle(dir)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "rootfs"), b.Rootfs)
	require.Equal(t, []string{"sh", "-c", "echo hi"}, b.Process.Argv)
	require.Equal(t, "/work", b.Process.Cwd)
	require.True(t, b.Process.Terminal)
	require.Equal(t, uint32(1000), b.Process.UID)
	require.Equal(t, []uint32{5}, b.Process.AdditionalGids)
	require.Equal(t, []Rlimit{{Type: "RLIMIT_NOFILE", Soft: 512, Hard: 1024}}, b.Process.Rlimits)
	require.Equal(t, []Mount{
		{Dest: "/data", Source: "/srv/data", ReadOnly: true},
		{Dest: "/etc/hosts", Source: filepath.Join(dir, "hosts")},
	}, b.Mounts)
	require.Equal(t, ContainerTypeContainer, b.ContainerType)
	require.Equal(t, "pod1", b.SandboxID)
	require.False(t, b.BootsSandbox())
	require.Equal(t, "web", b.Hostname)
	require.Equal(t, int64(256<<20), b.Resources.MemoryBytes)
	require.GreaterOrEqual(t, b.Resources.VCPUs, 1)
}

func TestLoneContainerBootsSandboxWithDefaults(t *testing.T) {
	b, err := ParseSpec("/b", []byte(`{"root":{"path":"/r"},"process":{"args":["true"]}}`))
	require.NoError(t, err)
	require.True(t, b.BootsSandbox())
	require.Equal(t, "/r", b.Rootfs)
	require.Equal(t, "/", b.Process.Cwd)
	require.Equal(t, DefaultMemoryBytes, b.Resources.MemoryBytes)
}

func TestBrokenConfigIsOneClearLine(t *testing.T) {
	for name, tc := range map[string]struct{ config, want string }{
		"syntax":     {"{\n  \"process\": {\n", "config.json: unexpected end of JSON input"},
		"no process": {`{"root":{"path":"rootfs"}}`, "process is missing"},
		"no args":    {`{"root":{"path":"rootfs"},"process":{"args":[]}}`, "process.args is empty"},
		"no root":    {`{"process":{"args":["sh"]}}`, "root.path is missing"},
		"rel cwd":    {`{"root":{"path":"r"},"process":{"args":["sh"],"cwd":"tmp"}}`, `process.cwd "tmp" is not absolute`},
		"bad mount":  {`{"root":{"path":"r"},"process":{"args":["sh"]},"mounts":[{"destination":"/x","type":"nfs","source":"h:/x"}]}`, `mount /x: type "nfs" is not supported`},
		"wrong type": {`{"root":{"path":"r"},"process":{"args":"sh"}}`, "cannot unmarshal string"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := writeBundle(t, tc.config)
			_, err := LoadBundle(dir)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.Contains(t, err.Error(), dir)
			require.False(t, strings.Contains(err.Error(), "\n"), "error must be one line: %q", err)
		})
	}
	_, err := LoadBundle(filepath.Join(t.TempDir(), "nope"))
	require.ErrorContains(t, err, "read config.json")
}
