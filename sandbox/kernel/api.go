package kernel

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Config describes one kernel: one per sandbox, shared by every container of the pod.
type Config struct {
	// MemoryBytes is the size of the grant (the pod's memory limit).
	MemoryBytes int64
	// VCPUs is the number of vCPUs the kernelet schedules tasks on.
	VCPUs int
	// Hostname is what uname(2) reports as the node name.
	Hostname string
	// Log receives the kernel's own diagnostics (crossing timings, OOM kills). nil: discard.
	Log func(format string, args ...any)
	// NoCallPatching keeps every system call on the trapping path: call sites of tenant code are
	// never rewritten to enter the sandbox without a signal (for comparison and diagnosis).
	NoCallPatching bool
}

// Mount makes a host directory or file visible at Dest inside a container.
type Mount struct {
	Dest     string // absolute path inside the container
	Source   string // host path
	ReadOnly bool
}

// ProcessSpec is one program to start in the sandbox.
type ProcessSpec struct {
	Container string   // container id, for accounting and Pids
	Rootfs    string   // host directory that is the container's "/"
	Mounts    []Mount  // extra mounts, applied over Rootfs
	Argv      []string // Argv[0] is resolved against PATH in Env when it has no slash
	Env       []string
	Cwd       string // absolute, inside the container; "" means "/"
	// The user and groups the process runs as (the OCI process user); all zero: root.
	UID, GID uint32
	Groups   []uint32
	// Host files given to the tenant as fds 0, 1 and 2; nil means /dev/null.
	Stdin, Stdout, Stderr *os.File
}

// ExitStatus is how a tenant process ended.
type ExitStatus struct {
	Code      int         // exit code when Signal is 0
	Signal    unix.Signal // the signal that killed it, or 0
	OOMKilled bool        // killed because the grant was exhausted
}

// WaitStatus is the status a shell would report: Code, or 128+Signal.
func (e ExitStatus) WaitStatus() int {
	if e.Signal != 0 {
		return 128 + int(e.Signal)
	}
	return e.Code
}

func (e ExitStatus) String() string {
	if e.Signal != 0 {
		return fmt.Sprintf("killed by signal %d", int(e.Signal))
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// Stats is the kernel's own accounting for one container.
type Stats struct {
	MemoryBytes int64         // bytes of grant held by the container's processes
	CPUTime     time.Duration // tenant and kernel time of its tasks
	Pids        int           // live processes
	StolenNanos int64         // how long its tasks' carriers waited for a host CPU, ended tasks too
}
