package control

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// BootConfig is what the shim tells `endo boot` on its command line. It lives here, not in
// package sandbox, so that the shim can build the command line without linking the kernel.
type BootConfig struct {
	Socket      string // unix socket to serve the control API on
	Pod         string // the pod's id: names the process for logs and leftover checks
	MemoryBytes int64  // the pod's grant; 0: the sandbox's default
	VCPUs       int    // 0: the node's CPUs
	Hostname    string
}

// Args renders c as the arguments that follow `endo boot`.
func (c BootConfig) Args() []string {
	args := []string{"--socket", c.Socket}
	if c.Pod != "" {
		args = append(args, "--pod", c.Pod)
	}
	if c.MemoryBytes > 0 {
		args = append(args, "--memory", fmt.Sprint(c.MemoryBytes))
	}
	if c.VCPUs > 0 {
		args = append(args, "--vcpus", fmt.Sprint(c.VCPUs))
	}
	if c.Hostname != "" {
		args = append(args, "--hostname", c.Hostname)
	}
	return args
}

// ParseBootArgs reads back what Args wrote:
//
//	--socket PATH [--pod ID] [--memory BYTES] [--vcpus N] [--hostname NAME]
func ParseBootArgs(args []string) (BootConfig, error) {
	var c BootConfig
	fs := flag.NewFlagSet("endo boot", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.Socket, "socket", "", "unix socket to serve the control API on")
	fs.StringVar(&c.Pod, "pod", "", "the pod's id")
	fs.Int64Var(&c.MemoryBytes, "memory", 0, "the pod's memory grant in bytes")
	fs.IntVar(&c.VCPUs, "vcpus", 0, "number of vCPUs")
	fs.StringVar(&c.Hostname, "hostname", "", "host name of the pod")
	if err := fs.Parse(args); err != nil {
		return BootConfig{}, fmt.Errorf("endo boot: %w", err)
	}
	if fs.NArg() != 0 {
		return BootConfig{}, fmt.Errorf("endo boot: unexpected argument %q", fs.Arg(0))
	}
	if c.Socket == "" {
		return BootConfig{}, errors.New("endo boot: --socket is required")
	}
	return c, nil
}
