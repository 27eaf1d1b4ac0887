package runtime

import (
	"github.com/endovisor/endo/cgroupfair"

	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Annotations set by containerd's CRI plugin (internal/cri/annotations cannot be imported).
const (
	AnnotationContainerType = "io.kubernetes.cri.container-type"
	AnnotationSandboxID     = "io.kubernetes.cri.sandbox-id"
	// ContainerTypeSandbox marks the pod's sandbox (pause) container: it boots the sandbox.
	ContainerTypeSandbox = "sandbox"
	// ContainerTypeContainer marks an application container that joins its pod's sandbox.
	ContainerTypeContainer = "container"
)

// DefaultMemoryBytes is the grant of a pod that sets no memory limit.
const DefaultMemoryBytes int64 = 2 << 30

// Process is one program to run in the sandbox, as the OCI spec describes it.
type Process struct {
	Argv     []string `json:"argv"`
	Env      []string `json:"env,omitempty"`
	Cwd      string   `json:"cwd,omitempty"`
	Terminal bool     `json:"terminal,omitempty"`
	// ConsoleWidth and ConsoleHeight are the terminal's first size (0: not given).
	ConsoleWidth  uint `json:"console_width,omitempty"`
	ConsoleHeight uint `json:"console_height,omitempty"`
	// UID, GID and AdditionalGids are the ids the process runs as in the sandbox.
	UID            uint32   `json:"uid,omitempty"`
	GID            uint32   `json:"gid,omitempty"`
	AdditionalGids []uint32 `json:"additional_gids,omitempty"`
	// Rlimits are recorded for the kernel; not yet enforced.
	Rlimits []Rlimit `json:"rlimits,omitempty"`
}

// Rlimit is one POSIX resource limit (type is the OCI name, e.g. RLIMIT_NOFILE).
type Rlimit struct {
	Type string `json:"type"`
	Soft uint64 `json:"soft"`
	Hard uint64 `json:"hard"`
}

// Mount makes a host path visible inside the container.
type Mount struct {
	Dest     string `json:"dest"`
	Source   string `json:"source"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Resources are what the pod may use; they size the sandbox's kernel.
type Resources struct {
	MemoryBytes int64 // the grant; DefaultMemoryBytes when the spec sets no limit
	VCPUs       int   // ceil(quota/period), else the node's CPUs
}

// Bundle is a parsed OCI bundle.
type Bundle struct {
	Path          string // absolute bundle directory
	Spec          *specs.Spec
	Rootfs        string // absolute host path of the container's "/"
	Process       Process
	Mounts        []Mount
	ContainerType string // ContainerTypeSandbox, ContainerTypeContainer or "" (a lone container)
	SandboxID     string // the pod's sandbox id; "" for a lone container
	Hostname      string
	Resources     Resources
}

// LoadBundle reads <dir>/config.json. Every error is one line naming the bundle.
func LoadBundle(dir string) (*Bundle, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	data, err := os.ReadFile(filepath.Join(abs, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("bundle %s: read config.json: %w", abs, err)
	}
	b, err := ParseSpec(abs, data)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: config.json: %w", abs, err)
	}
	return b, nil
}

// ParseSpec converts the bytes of a config.json found in bundle dir.
func ParseSpec(dir string, data []byte) (*Bundle, error) {
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		// json errors can quote multi-line input; keep the report on one line.
		return nil, errors.New(oneLine(err.Error()))
	}
	if s.Root == nil || s.Root.Path == "" {
		return nil, errors.New("root.path is missing")
	}
	if s.Process == nil {
		return nil, errors.New("process is missing")
	}
	proc, err := ProcessFromOCI(s.Process)
	if err != nil {
		return nil, err
	}
	mounts, err := MountsFromOCI(dir, s.Mounts)
	if err != nil {
		return nil, err
	}
	rootfs := s.Root.Path
	if !filepath.IsAbs(rootfs) {
		rootfs = filepath.Join(dir, rootfs)
	}
	b := &Bundle{
		Path:          dir,
		Spec:          &s,
		Rootfs:        rootfs,
		Process:       proc,
		Mounts:        mounts,
		ContainerType: s.Annotations[AnnotationContainerType],
		SandboxID:     s.Annotations[AnnotationSandboxID],
		Hostname:      s.Hostname,
		Resources:     ResourcesFromOCI(s.Linux),
	}
	return b, nil
}

// BootsSandbox says whether creating this container must start a new sandbox: the pod's sandbox
// container does, and so does a lone container (ctr, nerdctl); an application container of a pod
// joins the sandbox that its pod's sandbox container booted.
func (b *Bundle) BootsSandbox() bool {
	return b.ContainerType != ContainerTypeContainer || b.SandboxID == ""
}

// ProcessFromOCI converts an OCI process (config.json's or an exec's).
func ProcessFromOCI(p *specs.Process) (Process, error) {
	if p == nil {
		return Process{}, errors.New("process is missing")
	}
	if len(p.Args) == 0 || p.Args[0] == "" {
		if p.CommandLine != "" {
			return Process{}, errors.New("process.commandLine is Windows-only; set process.args")
		}
		return Process{}, errors.New("process.args is empty")
	}
	cwd := p.Cwd
	if cwd == "" {
		cwd = "/"
	}
	if !filepath.IsAbs(cwd) {
		return Process{}, fmt.Errorf("process.cwd %q is not absolute", cwd)
	}
	out := Process{
		Argv:     append([]string(nil), p.Args...),
		Env:      append([]string(nil), p.Env...),
		Cwd:      cwd,
		Terminal: p.Terminal,
		UID:      p.User.UID,
		GID:      p.User.GID,
	}
	if p.ConsoleSize != nil {
		out.ConsoleWidth, out.ConsoleHeight = p.ConsoleSize.Width, p.ConsoleSize.Height
	}
	out.AdditionalGids = append(out.AdditionalGids, p.User.AdditionalGids...)
	for _, r := range p.Rlimits {
		out.Rlimits = append(out.Rlimits, Rlimit{Type: r.Type, Soft: r.Soft, Hard: r.Hard})
	}
	return out, nil
}

// sandboxOwned are file systems the sandbox provides itself; an OCI mount of one is satisfied by
// the sandbox's own /proc, /sys, /dev and needs no host path.
var sandboxOwned = map[string]bool{
	"proc": true, "sysfs": true, "tmpfs": true, "devpts": true, "mqueue": true,
	"cgroup": true, "cgroup2": true, "shm": true,
}

// MountsFromOCI keeps the bind mounts (host paths the tenant should see) and drops the file
// systems the sandbox provides. A relative bind source is relative to the bundle dir.
func MountsFromOCI(bundle string, ms []specs.Mount) ([]Mount, error) {
	var out []Mount
	for _, m := range ms {
		bind, ro := false, false
		for _, o := range m.Options {
			switch o {
			case "bind", "rbind":
				bind = true
			case "ro":
				ro = true
			}
		}
		if m.Type == "bind" {
			bind = true
		}
		if !bind {
			if sandboxOwned[m.Type] {
				continue
			}
			return nil, fmt.Errorf("mount %s: type %q is not supported", m.Destination, m.Type)
		}
		if !filepath.IsAbs(m.Destination) {
			return nil, fmt.Errorf("mount %s: destination is not absolute", m.Destination)
		}
		src := m.Source
		if !filepath.IsAbs(src) {
			src = filepath.Join(bundle, src)
		}
		out = append(out, Mount{Dest: filepath.Clean(m.Destination), Source: src, ReadOnly: ro})
	}
	return out, nil
}

// ResourcesFromOCI sizes the kernel from linux.resources.
func ResourcesFromOCI(l *specs.Linux) Resources {
	r := Resources{MemoryBytes: DefaultMemoryBytes, VCPUs: goruntime.NumCPU()}
	if l == nil || l.Resources == nil {
		return r
	}
	if m := l.Resources.Memory; m != nil && m.Limit != nil && *m.Limit > 0 {
		r.MemoryBytes = *m.Limit
	}
	r.VCPUs = cgroupfair.VCPUs(l.Resources, goruntime.NumCPU())
	return r
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
