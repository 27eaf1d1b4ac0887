package control

import (
	"os"
	"time"

	"github.com/endovisor/endo/runtime"
)

// ServiceName is the ttrpc service of the control API.
const ServiceName = "endo.control.v1.Control"

// Stdio are the host files the tenant gets as fds 0-2; nil means /dev/null. For a terminal all
// three are the pty's slave.
type Stdio struct {
	Stdin, Stdout, Stderr *os.File
}

// CreateRequest creates a container in the sandbox; its init process starts with Start.
type CreateRequest struct {
	ID      string          `json:"id"`
	Rootfs  string          `json:"rootfs"` // host path, already mounted by the shim
	Process runtime.Process `json:"process"`
	Mounts  []runtime.Mount `json:"mounts,omitempty"`
	// stdio is the sequence number of the session message that carried the files.
	Stdio uint64 `json:"stdio,omitempty"`
}

// ExecRequest adds a process to a container; it starts with Start.
type ExecRequest struct {
	ID      string          `json:"id"`
	ExecID  string          `json:"exec_id"`
	Process runtime.Process `json:"process"`
	Stdio   uint64          `json:"stdio,omitempty"`
}

// ProcRequest names a container's init (ExecID "") or one of its execs.
type ProcRequest struct {
	ID     string `json:"id"`
	ExecID string `json:"exec_id,omitempty"`
}

// StartReply is the sandbox pid of the started process.
type StartReply struct {
	Pid int `json:"pid"`
}

// SignalRequest sends a signal to a process, or with All to every process of the container.
type SignalRequest struct {
	ID     string `json:"id"`
	ExecID string `json:"exec_id,omitempty"`
	Signal int    `json:"signal"`
	All    bool   `json:"all,omitempty"`
}

// WaitReply is how a process ended.
type WaitReply struct {
	Status    int       `json:"status"` // code, or 128+signal
	Signal    int       `json:"signal,omitempty"`
	OOMKilled bool      `json:"oom_killed,omitempty"`
	ExitedAt  time.Time `json:"exited_at"`
}

// PidsReply lists the sandbox pids of a container's processes.
type PidsReply struct {
	Pids []int `json:"pids"`
}

// StatsReply is the sandbox's accounting of one container.
type StatsReply struct {
	MemoryBytes int64 `json:"memory_bytes"`
	MemoryLimit int64 `json:"memory_limit"` // the pod's grant
	CPUNanos    int64 `json:"cpu_nanos"`
	Pids        int   `json:"pids"`
	// StolenNanos is how long the container's carriers waited for a host CPU.
	StolenNanos int64 `json:"stolen_nanos,omitempty"`
	// MostRunnable is the most of the pod's tasks a running probe saw Linux have runnable at
	// once (0: no probe runs).
	MostRunnable int `json:"most_runnable,omitempty"`
}

// ResizeRequest tells a terminal process that its window changed (the shim resized the pty).
type ResizeRequest struct {
	ID     string `json:"id"`
	ExecID string `json:"exec_id,omitempty"`
	Width  uint32 `json:"width"`
	Height uint32 `json:"height"`
}

// UpdateRequest changes the pod's resources; VCPUs is the pod's new vCPU count.
type UpdateRequest struct {
	VCPUs int `json:"vcpus"`
}

// Empty is a reply with nothing in it.
type Empty struct{}
