package sandbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/endovisor/endo/runtime"
	"github.com/endovisor/endo/sandbox/control"
	"github.com/endovisor/endo/sandbox/kernel"
)

// pod holds the containers of one sandbox and implements the control API on the kernel.
type pod struct {
	opts Options
	logf func(string, ...any)

	mu         sync.Mutex
	k          *kernel.Kernel
	kernelErr  error // why there is no kernel
	containers map[string]*container
	down       bool
}

type container struct {
	id     string
	rootfs string
	mounts []kernel.Mount
	init   *proc
	execs  map[string]*proc
}

// proc is one tenant process: created by Create/Exec, spawned by Start.
type proc struct {
	state    *runtime.Proc
	spec     kernel.ProcessSpec
	stdio    control.Stdio
	terminal bool
	kp       *kernel.Process // nil until started
}

func newPod(opts Options, logf func(string, ...any)) *pod {
	return &pod{opts: opts, logf: logf, containers: map[string]*container{}}
}

func (p *pod) setKernel(k *kernel.Kernel, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.k, p.kernelErr = k, err
}

// kernel returns the kernel, or why there is none.
func (p *pod) kernel() (*kernel.Kernel, error) {
	if p.down {
		return nil, fmt.Errorf("sandbox is shutting down: %w", errdefs.ErrUnavailable)
	}
	if p.k == nil {
		return nil, p.kernelErr
	}
	return p.k, nil
}

func convertMounts(ms []runtime.Mount) []kernel.Mount {
	out := make([]kernel.Mount, 0, len(ms))
	for _, m := range ms {
		out = append(out, kernel.Mount{Dest: m.Dest, Source: m.Source, ReadOnly: m.ReadOnly})
	}
	return out
}

func (c *container) spec(id string, pr runtime.Process, st control.Stdio) kernel.ProcessSpec {
	return kernel.ProcessSpec{
		Container: id,
		Rootfs:    c.rootfs,
		Mounts:    c.mounts,
		Argv:      pr.Argv,
		Env:       pr.Env,
		Cwd:       pr.Cwd,
		UID:       pr.UID,
		GID:       pr.GID,
		Groups:    pr.AdditionalGids,
		Stdin:     st.Stdin,
		Stdout:    st.Stdout,
		Stderr:    st.Stderr,
	}
}

func (p *pod) Create(_ context.Context, r *control.CreateRequest, st control.Stdio) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.kernel(); err != nil {
		st.Close()
		return err
	}
	if r.ID == "" || r.Rootfs == "" {
		st.Close()
		return fmt.Errorf("create: id and rootfs are required: %w", errdefs.ErrInvalidArgument)
	}
	if _, ok := p.containers[r.ID]; ok {
		st.Close()
		return fmt.Errorf("container %s: %w", r.ID, errdefs.ErrAlreadyExists)
	}
	c := &container{id: r.ID, rootfs: r.Rootfs, mounts: convertMounts(r.Mounts), execs: map[string]*proc{}}
	c.init = &proc{state: runtime.NewProc(r.ID), spec: c.spec(r.ID, r.Process, st), stdio: st, terminal: r.Process.Terminal}
	p.containers[r.ID] = c
	p.logf("container %s created: %q", r.ID, r.Process.Argv)
	return nil
}

func (p *pod) Exec(_ context.Context, r *control.ExecRequest, st control.Stdio) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, err := p.container(r.ID)
	if err != nil {
		st.Close()
		return err
	}
	if _, ok := c.execs[r.ExecID]; ok || r.ExecID == "" {
		st.Close()
		return fmt.Errorf("exec %q in %s: %w", r.ExecID, r.ID, errdefs.ErrAlreadyExists)
	}
	c.execs[r.ExecID] = &proc{state: runtime.NewProc(r.ExecID), spec: c.spec(r.ID, r.Process, st), stdio: st, terminal: r.Process.Terminal}
	return nil
}

// container looks up a container; p.mu held.
func (p *pod) container(id string) (*container, error) {
	c, ok := p.containers[id]
	if !ok {
		return nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	return c, nil
}

// proc looks up an init (execID "") or exec; p.mu held.
func (p *pod) proc(id, execID string) (*container, *proc, error) {
	c, err := p.container(id)
	if err != nil {
		return nil, nil, err
	}
	if execID == "" {
		return c, c.init, nil
	}
	e, ok := c.execs[execID]
	if !ok {
		return nil, nil, fmt.Errorf("exec %s in %s: %w", execID, id, errdefs.ErrNotFound)
	}
	return c, e, nil
}

func (p *pod) Start(_ context.Context, r *control.ProcRequest) (*control.StartReply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k, err := p.kernel()
	if err != nil {
		return nil, err
	}
	c, pr, err := p.proc(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	if r.ExecID != "" && c.init.state.Status() != runtime.Running {
		return nil, fmt.Errorf("exec in %s: container is %s: %w", r.ID, c.init.state.Status(), errdefs.ErrFailedPrecondition)
	}
	if pr.state.Status() != runtime.Created {
		return nil, fmt.Errorf("start %s: process is %s: %w", pr.state.ID, pr.state.Status(), errdefs.ErrFailedPrecondition)
	}
	kp, err := k.Spawn(pr.spec)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", pr.state.ID, err)
	}
	pr.kp = kp
	if err := pr.state.Start(kp.Pid()); err != nil {
		_ = kp.Signal(unix.SIGKILL)
		return nil, err
	}
	isInit := r.ExecID == ""
	go p.reap(c, pr, isInit)
	p.logf("process %s/%s started: pid %d", r.ID, r.ExecID, kp.Pid())
	return &control.StartReply{Pid: kp.Pid()}, nil
}

// reap waits for a started process, records its exit and, for an init, kills what is left of
// its container: as in a pid namespace, the container ends with its init.
func (p *pod) reap(c *container, pr *proc, isInit bool) {
	st := pr.kp.Wait()
	// The tenant's stdio is done with; our copies must go so that the shim sees end of file.
	pr.stdio.Close()
	pr.state.SetExited(runtime.Exit{Status: st.WaitStatus(), OOMKilled: st.OOMKilled, At: time.Now()})
	p.logf("process %s/%s: %v", c.id, execName(pr, isInit), st)
	if !isInit {
		return
	}
	p.mu.Lock()
	var rest []*proc
	for _, e := range c.execs {
		rest = append(rest, e)
	}
	p.mu.Unlock()
	for _, e := range rest {
		p.stop(e, unix.SIGKILL)
	}
}

func execName(pr *proc, isInit bool) string {
	if isInit {
		return ""
	}
	return pr.state.ID
}

// stop signals a running process; a created one that never ran just ends as if killed.
func (p *pod) stop(pr *proc, sig unix.Signal) error {
	switch pr.state.Status() {
	case runtime.Created:
		if sig == unix.SIGKILL || sig == unix.SIGTERM || sig == unix.SIGINT || sig == unix.SIGHUP {
			pr.stdio.Close()
			pr.state.SetExited(runtime.Exit{Status: 128 + int(sig)})
			return nil
		}
		return fmt.Errorf("process %s is not started: %w", pr.state.ID, errdefs.ErrFailedPrecondition)
	case runtime.Running:
		if err := pr.kp.Signal(sig); err != nil {
			return fmt.Errorf("signal %d to %s: %w", int(sig), pr.state.ID, err)
		}
		return nil
	}
	return fmt.Errorf("process %s already finished: %w", pr.state.ID, errdefs.ErrNotFound)
}

func (p *pod) Signal(_ context.Context, r *control.SignalRequest) error {
	p.mu.Lock()
	c, pr, err := p.proc(r.ID, r.ExecID)
	var all []*proc
	if err == nil && r.All {
		all = append(all, c.init)
		for _, e := range c.execs {
			all = append(all, e)
		}
	}
	p.mu.Unlock()
	if err != nil {
		return err
	}
	sig := unix.Signal(r.Signal)
	if !r.All {
		return p.stop(pr, sig)
	}
	for _, x := range all {
		if x.state.Status() == runtime.Running {
			_ = p.stop(x, sig)
		}
	}
	// And every other process of the container: the tenant's own children.
	p.mu.Lock()
	k := p.k
	p.mu.Unlock()
	if k != nil {
		return k.SignalContainer(r.ID, sig)
	}
	return nil
}

func (p *pod) Wait(ctx context.Context, r *control.ProcRequest) (*control.WaitReply, error) {
	p.mu.Lock()
	_, pr, err := p.proc(r.ID, r.ExecID)
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	e, err := pr.state.Wait(ctx)
	if err != nil {
		return nil, err
	}
	reply := &control.WaitReply{Status: e.Status, OOMKilled: e.OOMKilled, ExitedAt: e.At}
	if e.Status > 128 {
		reply.Signal = e.Status - 128
	}
	return reply, nil
}

// containerKernel is the kernel, once container id is known to it (p.mu held).
func (p *pod) containerKernel(id string) (*kernel.Kernel, error) {
	k, err := p.kernel()
	if err != nil {
		return nil, err
	}
	if _, err := p.container(id); err != nil {
		return nil, err
	}
	return k, nil
}

func (p *pod) Pids(_ context.Context, id string) (*control.PidsReply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k, err := p.containerKernel(id)
	if err != nil {
		return nil, err
	}
	return &control.PidsReply{Pids: k.Pids(id)}, nil
}

func (p *pod) Stats(_ context.Context, id string) (*control.StatsReply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k, err := p.containerKernel(id)
	if err != nil {
		return nil, err
	}
	s := k.Stats(id)
	pr, _ := k.ProbeSoFar()
	return &control.StatsReply{
		MemoryBytes:  s.MemoryBytes,
		MemoryLimit:  p.opts.MemoryBytes,
		CPUNanos:     s.CPUTime.Nanoseconds(),
		Pids:         s.Pids,
		StolenNanos:  s.StolenNanos,
		MostRunnable: pr.MostRunnable,
	}, nil
}

func (p *pod) ResizePty(_ context.Context, r *control.ResizeRequest) error {
	p.mu.Lock()
	_, pr, err := p.proc(r.ID, r.ExecID)
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if !pr.terminal {
		return fmt.Errorf("process %s has no terminal: %w", pr.state.ID, errdefs.ErrFailedPrecondition)
	}
	// The shim resized the pty itself; the tenant learns of it as Linux tells a foreground job.
	if pr.state.Status() == runtime.Running {
		_ = pr.kp.Signal(unix.SIGWINCH)
	}
	return nil
}

func (p *pod) Delete(_ context.Context, r *control.ProcRequest) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, pr, err := p.proc(r.ID, r.ExecID)
	if err != nil {
		return err
	}
	if err := pr.state.CheckDelete(); err != nil {
		return err
	}
	if r.ExecID != "" {
		pr.stdio.Close()
		delete(c.execs, r.ExecID)
		return nil
	}
	for _, e := range c.execs {
		if err := e.state.CheckDelete(); err != nil {
			return fmt.Errorf("delete %s: %w", r.ID, err)
		}
	}
	c.init.stdio.Close()
	for _, e := range c.execs {
		e.stdio.Close()
	}
	delete(p.containers, r.ID)
	p.logf("container %s deleted", r.ID)
	return nil
}

// Shutdown kills every tenant process and frees the kernel; the waits of the shim then return.
func (p *pod) Shutdown() {
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		return
	}
	p.down = true
	k := p.k
	var procs []*proc
	for _, c := range p.containers {
		procs = append(procs, c.init)
		for _, e := range c.execs {
			procs = append(procs, e)
		}
	}
	p.mu.Unlock()
	if k != nil {
		if err := k.Close(); err != nil {
			p.logf("close kernel: %v", err)
		}
	}
	for _, pr := range procs {
		if pr.state.Status() == runtime.Created {
			pr.stdio.Close()
			pr.state.SetExited(runtime.Exit{Status: 128 + int(unix.SIGKILL)})
		}
	}
	// Started processes are stopped by their reap once the kernel's Close has killed them.
}

// Update resizes the pod's kernel: its vCPUs follow the pod's new CPU limit.
func (p *pod) Update(_ context.Context, r *control.UpdateRequest) error {
	p.mu.Lock()
	k, err := p.kernel()
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if err := k.SetVCPUs(r.VCPUs); err != nil {
		return err
	}
	p.logf("pod resized: %d vCPUs", r.VCPUs)
	return nil
}
