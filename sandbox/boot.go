// Package sandbox is the sandbox process of one pod (`endo boot`): it creates the pod's kernel,
// serves the control API to its shim, and runs the containers of the pod as tenant processes of
// that kernel.
//
// It must never act on the host for a tenant except through the kernel proper, and never outlive
// its shim: when the shim's session ends, every tenant process is killed and Boot returns.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	goruntime "runtime"

	"github.com/endovisor/endo/runtime"
	"github.com/endovisor/endo/sandbox/control"
	"github.com/endovisor/endo/sandbox/kernel"
)

// Options configure one sandbox.
type Options struct {
	// Socket is the unix socket path to listen on for the shim (see package control). Required.
	Socket string
	// Pod is the pod's id, for the log.
	Pod string
	// MemoryBytes is the pod's grant; 0 means runtime.DefaultMemoryBytes.
	MemoryBytes int64
	// VCPUs is the number of vCPUs; 0 means the node's CPUs.
	VCPUs int
	// Hostname is the pod's host name as uname(2) reports it; "" means "endo".
	Hostname string
	// Log receives one line per notable event; nil means os.Stderr.
	Log io.Writer
}

// ParseBootFlags reads the arguments after `endo boot` (what the shim passes):
//
//	--socket PATH [--pod ID] [--memory BYTES] [--vcpus N] [--hostname NAME]
func ParseBootFlags(args []string) (Options, error) {
	c, err := control.ParseBootArgs(args)
	if err != nil {
		return Options{}, err
	}
	return Options{Socket: c.Socket, Pod: c.Pod, MemoryBytes: c.MemoryBytes, VCPUs: c.VCPUs, Hostname: c.Hostname}, nil
}

// Boot runs the sandbox until the shim calls Shutdown or goes away (both nil: every tenant process
// is killed first) or ctx ends (ctx's error). A kernel that fails to start does not end Boot: the error
// is returned to the shim by every Create, so that containerd reports it as one line.
func Boot(ctx context.Context, opts Options) error {
	if opts.Socket == "" {
		return errors.New("sandbox: Options.Socket is required")
	}
	if opts.MemoryBytes <= 0 {
		opts.MemoryBytes = runtime.DefaultMemoryBytes
	}
	if opts.VCPUs <= 0 {
		opts.VCPUs = goruntime.NumCPU()
	}
	if opts.Hostname == "" {
		opts.Hostname = "endo"
	}
	logw := opts.Log
	if logw == nil {
		logw = os.Stderr
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(logw, "endo sandbox %s[%d]: %s\n", opts.Pod, os.Getpid(), fmt.Sprintf(format, args...))
	}
	p := newPod(opts, logf)
	defer p.Shutdown()
	k, err := kernel.New(kernel.Config{
		MemoryBytes: opts.MemoryBytes,
		VCPUs:       opts.VCPUs,
		Hostname:    opts.Hostname,
		Log:         logf,
	})
	if err != nil {
		logf("kernel: %v", err)
		p.setKernel(nil, fmt.Errorf("sandbox kernel: %w", err))
	} else {
		p.setKernel(k, nil)
	}
	err = control.Serve(ctx, opts.Socket, p)
	switch {
	case errors.Is(err, control.ErrShimGone):
		// The pod's shim died: its tenants die with it (Serve shut the pod down). Not our failure.
		logf("shim gone; pod stopped")
		return nil
	case err != nil:
		return fmt.Errorf("sandbox: %w", err)
	}
	return nil
}
