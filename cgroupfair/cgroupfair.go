// Package cgroupfair puts a pod's sandbox in the pod's cgroup, so that Linux divides CPU and
// memory between pods while the kernelet divides a pod's share between its tasks, and sizes the
// pod's vCPUs from its CPU limits. It works on cgroup v1 (also in the hybrid layout) and v2,
// through github.com/containerd/cgroups/v3.
//
// It must never move a process that is not the pod's sandbox (or its stubs, which follow it), nor
// a thread but a measuring one of the sandbox itself (LeaveWithThread), and never delete a cgroup
// it did not create.
package cgroupfair

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Pod is one pod's cgroup.
type Pod struct {
	path string
	v1   cgroup1.Cgroup
	v2   *cgroup2.Manager
}

// PathFor is the cgroup a pod's sandbox goes in: the cgroupsPath of the pod's sandbox container,
// or, for a lone container that has none, one of Endo's own named for the container.
func PathFor(cgroupsPath, id string) (string, error) {
	if cgroupsPath == "" {
		return path.Join("/endo", id), nil
	}
	if strings.Contains(cgroupsPath, ":") {
		return "", fmt.Errorf("cgroupfair: systemd cgroup path %q: only cgroupfs paths are supported yet", cgroupsPath)
	}
	if !path.IsAbs(cgroupsPath) {
		return "", fmt.Errorf("cgroupfair: cgroup path %q is not absolute", cgroupsPath)
	}
	return path.Clean(cgroupsPath), nil
}

func unified() bool { return cgroups.Mode() == cgroups.Unified }

// SandboxOverheadBytes is the memory the sandbox itself needs beside the pod's grant (the Go
// runtime, stubs, page tables): a pod cgroup's memory limit is raised by this much, as
// Kubernetes does for a RuntimeClass's overhead (deploy/runtimeclass.yaml declares the same).
const SandboxOverheadBytes = 64 << 20

// Create makes the pod's cgroup with the pod's limits (or opens it, if the runtime's caller
// made it already, and applies the limits). The memory limit gets the sandbox's overhead on top:
// the pod's own memory is the grant, whose exhaustion the sandbox handles as an OOM kill inside
// the pod; the cgroup's limit is the wall behind it.
func Create(p string, res *specs.LinuxResources) (*Pod, error) {
	res = withOverhead(res)
	if unified() {
		m, err := cgroup2.NewManager("/sys/fs/cgroup", p, cgroup2.ToResources(res))
		if err != nil {
			return nil, fmt.Errorf("cgroupfair: create %s (v2): %w", p, err)
		}
		return &Pod{path: p, v2: m}, nil
	}
	cg, err := cgroup1.New(cgroup1.StaticPath(p), res)
	if err != nil {
		return nil, fmt.Errorf("cgroupfair: create %s (v1): %w", p, err)
	}
	return &Pod{path: p, v1: cg}, nil
}

// Load opens an existing pod cgroup.
func Load(p string) (*Pod, error) {
	if unified() {
		m, err := cgroup2.Load(p)
		if err != nil {
			return nil, fmt.Errorf("cgroupfair: load %s (v2): %w", p, err)
		}
		return &Pod{path: p, v2: m}, nil
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(p))
	if err != nil {
		return nil, fmt.Errorf("cgroupfair: load %s (v1): %w", p, err)
	}
	return &Pod{path: p, v1: cg}, nil
}

// Path is the pod's cgroup path.
func (p *Pod) Path() string { return p.path }

// Add moves a process (all its threads) into the pod's cgroup.
func (p *Pod) Add(pid int) error {
	var err error
	if p.v2 != nil {
		err = p.v2.AddProc(uint64(pid))
	} else {
		err = p.v1.Add(cgroup1.Process{Pid: pid})
	}
	if err != nil {
		return fmt.Errorf("cgroupfair: add pid %d to %s: %w", pid, p.path, err)
	}
	return nil
}

// withOverhead copies res with SandboxOverheadBytes added to a memory limit, and without what
// does not apply to a sandbox.
func withOverhead(res *specs.LinuxResources) *specs.LinuxResources {
	if res == nil {
		return &specs.LinuxResources{}
	}
	r := *res
	if res.CPU != nil {
		// The sandbox's threads never use real-time scheduling on the host (the kernelet
		// schedules the tenant's own policies), and hosts without RT group scheduling refuse
		// these files.
		c := *res.CPU
		c.RealtimePeriod, c.RealtimeRuntime = nil, nil
		r.CPU = &c
	}
	if res.Memory != nil && res.Memory.Limit != nil && *res.Memory.Limit > 0 {
		m := *res.Memory
		limit := *m.Limit + SandboxOverheadBytes
		m.Limit = &limit
		if m.Swap != nil && *m.Swap > 0 {
			swap := *m.Swap + SandboxOverheadBytes
			m.Swap = &swap
		}
		r.Memory = &m
	}
	return &r
}

// Update applies new limits to a running pod.
func (p *Pod) Update(res *specs.LinuxResources) error {
	res = withOverhead(res)
	var err error
	if p.v2 != nil {
		err = p.v2.Update(cgroup2.ToResources(res))
	} else {
		err = p.v1.Update(res)
	}
	if err != nil {
		return fmt.Errorf("cgroupfair: update %s: %w", p.path, err)
	}
	return nil
}

// Pids lists the processes in the pod's cgroup.
func (p *Pod) Pids() ([]int, error) {
	var out []int
	if p.v2 != nil {
		ps, err := p.v2.Procs(false)
		if err != nil {
			return nil, err
		}
		for _, x := range ps {
			out = append(out, int(x))
		}
		return out, nil
	}
	ps, err := p.v1.Processes(cgroup1.Cpu, false)
	if err != nil {
		return nil, err
	}
	for _, x := range ps {
		out = append(out, x.Pid)
	}
	return out, nil
}

// Delete removes the pod's cgroup; it must be empty (the sandbox and its stubs are gone).
func (p *Pod) Delete() error {
	var err error
	if p.v2 != nil {
		err = p.v2.Delete()
	} else {
		err = p.v1.Delete()
	}
	if err != nil {
		return fmt.Errorf("cgroupfair: delete %s: %w", p.path, err)
	}
	return nil
}

// VCPUs is how many vCPUs a pod gets: ceil(quota/period) when the CPU is limited, else the size
// of its cpuset, else the host's CPUs; never more than the host has, never less than one.
func VCPUs(res *specs.LinuxResources, hostCPUs int) int {
	n := hostCPUs
	if res != nil && res.CPU != nil {
		c := res.CPU
		if c.Quota != nil && *c.Quota > 0 && c.Period != nil && *c.Period > 0 {
			n = int(math.Ceil(float64(*c.Quota) / float64(*c.Period)))
		} else if c.Cpus != "" {
			if k, err := cpusetSize(c.Cpus); err == nil && k > 0 {
				n = k
			}
		}
	}
	return max(1, min(n, hostCPUs))
}

// cpusetSize counts the CPUs of a cpuset list such as "0-3,8,10-11".
func cpusetSize(s string) (int, error) {
	n := 0
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("cpuset %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return 0, fmt.Errorf("cpuset %q: %w", s, err)
			}
		}
		if b < a {
			return 0, errors.New("cpuset range backwards")
		}
		n += b - a + 1
	}
	return n, nil
}

// LeaveWithThread moves the calling thread, and no other thread of its process, to the root of
// the cgroup v1 hierarchies of the cpu and cpuacct controllers: a measuring thread (endo run
// --probe) then neither takes from the CPU share of the pod it observes nor counts as the pod's
// use. The caller must hold its OS thread (runtime.LockOSThread) for as long as that matters. On
// v2, a thread can leave its process's cgroup only inside a threaded subtree: it reports an
// error and moves nothing.
func LeaveWithThread() error {
	if unified() {
		return errors.New("cgroup v2: a thread cannot leave its process's cgroup")
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	tid := []byte(strconv.Itoa(unix.Gettid()))
	moved := 0
	for _, line := range strings.Split(string(mounts), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || g[0] != "cgroup" || f[3] != "/" {
			continue
		}
		opts := strings.Split(g[2], ",")
		if !slices.Contains(opts, "cpu") && !slices.Contains(opts, "cpuacct") {
			continue
		}
		if err := os.WriteFile(path.Join(f[4], "tasks"), tid, 0); err != nil {
			return fmt.Errorf("move thread to %s: %w", f[4], err)
		}
		moved++
	}
	if moved == 0 {
		return errors.New("no cgroup v1 cpu hierarchy mounted")
	}
	return nil
}
