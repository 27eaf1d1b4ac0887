package shim

import (
	goruntime "runtime"

	"github.com/endovisor/endo/cgroupfair"

	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	eventsapi "github.com/containerd/containerd/api/events"
	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/protobuf"
	cshim "github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/containerd/ttrpc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/endovisor/endo/runtime"
	"github.com/endovisor/endo/sandbox/control"
)

// Event topics (containerd's core/runtime constants; that package drags in mount helpers).
const (
	topicCreate      = "/tasks/create"
	topicStart       = "/tasks/start"
	topicOOM         = "/tasks/oom"
	topicExit        = "/tasks/exit"
	topicDelete      = "/tasks/delete"
	topicExecAdded   = "/tasks/exec-added"
	topicExecStarted = "/tasks/exec-started"
)

// Service is the task API v3 of one pod's shim.
type Service struct {
	publisher cshim.Publisher
	sd        shutdown.Service
	namespace string
	events    chan event

	mu         sync.Mutex
	sb         *sandboxProc // booted by the first Create
	containers map[string]*container
}

type event struct {
	topic string
	msg   any
}

type container struct {
	id     string
	bundle *runtime.Bundle
	rootfs bool // we mounted <bundle>/rootfs
	init   *process
	execs  map[string]*process
}

// process is one init or exec as containerd sees it.
type process struct {
	containerID string
	execID      string // "" for the init
	state       *runtime.Proc
	io          *procIO
	cfg         ioConfig
}

// eventID is the id containerd's TaskExit carries: the container id for an init, else the exec id.
func (p *process) eventID() string {
	if p.execID == "" {
		return p.containerID
	}
	return p.execID
}

// NewService makes the task service; events go out in order through publisher.
func NewService(ctx context.Context, publisher cshim.Publisher, sd shutdown.Service) (*Service, error) {
	ns, _ := namespaces.Namespace(ctx)
	s := &Service{
		publisher:  publisher,
		sd:         sd,
		namespace:  ns,
		events:     make(chan event, 256),
		containers: map[string]*container{},
	}
	go s.forward(ctx)
	sd.RegisterCallback(func(ctx context.Context) error {
		s.mu.Lock()
		sb := s.sb
		s.sb = nil
		s.mu.Unlock()
		if sb != nil {
			sb.Stop(ctx)
		}
		return nil
	})
	return s, nil
}

// RegisterTTRPC makes Service a shim.TTRPCService.
func (s *Service) RegisterTTRPC(server *ttrpc.Server) error {
	taskv3.RegisterTTRPCTaskService(server, s)
	return nil
}

// forward publishes events one at a time, in the order they were queued: containerd expects
// Create, Start, (OOM,) Exit, Delete.
func (s *Service) forward(ctx context.Context) {
	ns := s.namespace
	for e := range s.events {
		pctx := namespaces.WithNamespace(context.WithoutCancel(ctx), ns)
		if err := s.publisher.Publish(pctx, e.topic, e.msg); err != nil {
			log.G(ctx).WithError(err).WithField("topic", e.topic).Error("endo: publish event")
		}
	}
}

func (s *Service) send(topic string, msg any) { s.events <- event{topic, msg} }

// lookup finds a process; s.mu held.
func (s *Service) lookup(id, execID string) (*container, *process, error) {
	c, ok := s.containers[id]
	if !ok {
		return nil, nil, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	if execID == "" {
		return c, c.init, nil
	}
	p, ok := c.execs[execID]
	if !ok {
		return nil, nil, fmt.Errorf("exec %s in container %s: %w", execID, id, errdefs.ErrNotFound)
	}
	return c, p, nil
}

// sandbox returns the running sandbox; s.mu held.
func (s *Service) sandbox() (*sandboxProc, error) {
	if s.sb == nil || !s.sb.Alive() {
		return nil, fmt.Errorf("%w: %w", errSandboxGone, errdefs.ErrUnavailable)
	}
	return s.sb, nil
}

// taskPid is the pid containerd gets for an init: the sandbox's host pid, a real process whose
// namespaces are the pod's (CRI reads /proc/<pid>/ns of the pod's sandbox task).
func (s *Service) taskPid() uint32 {
	if s.sb == nil {
		return 0
	}
	return uint32(s.sb.Pid())
}

func toGRPC(err error) error { return control.ToGRPC(err) }

// Create mounts the rootfs, boots the pod's sandbox if this is the pod's first container, and
// creates the container in it.
func (s *Service) Create(ctx context.Context, r *taskv3.CreateTaskRequest) (_ *taskv3.CreateTaskResponse, retErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.containers[r.ID]; ok {
		return nil, toGRPC(fmt.Errorf("container %s: %w", r.ID, errdefs.ErrAlreadyExists))
	}
	if r.Checkpoint != "" || r.ParentCheckpoint != "" {
		return nil, toGRPC(fmt.Errorf("restore from checkpoint: %w", errdefs.ErrNotImplemented))
	}
	b, err := runtime.LoadBundle(r.Bundle)
	if err != nil {
		return nil, toGRPC(fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument))
	}
	c := &container{id: r.ID, bundle: b, execs: map[string]*process{}}
	if err := mountRootfs(r.Rootfs, b.Rootfs); err != nil {
		return nil, toGRPC(err)
	}
	c.rootfs = len(r.Rootfs) > 0
	defer func() {
		if retErr != nil && c.rootfs {
			_ = unmountAll(b.Rootfs)
		}
	}()

	booted := false
	if s.sb == nil {
		sb, err := bootSandbox(ctx, groupID(r.ID, b), b)
		if err != nil {
			return nil, toGRPC(fmt.Errorf("boot sandbox: %w", err))
		}
		s.sb, booted = sb, true
		go s.watchSandbox(ctx, sb)
	}
	defer func() {
		if retErr != nil && booted && len(s.containers) == 0 {
			s.sb.Stop(ctx)
			s.sb = nil
		}
	}()
	sb, err := s.sandbox()
	if err != nil {
		return nil, toGRPC(err)
	}

	cfg := ioConfig{namespace: s.namespace, id: r.ID, stdin: r.Stdin, stdout: r.Stdout, stderr: r.Stderr, terminal: r.Terminal || b.Process.Terminal,
		width: b.Process.ConsoleWidth, height: b.Process.ConsoleHeight}
	pio, err := newProcIO(ctx, cfg)
	if err != nil {
		return nil, toGRPC(err)
	}
	err = sb.client.Create(ctx, control.CreateRequest{ID: r.ID, Rootfs: b.Rootfs, Process: b.Process, Mounts: b.Mounts}, pio.tenant)
	pio.sent()
	if err != nil {
		pio.Close()
		return nil, toGRPC(fmt.Errorf("create %s: %w", r.ID, err))
	}
	c.init = &process{containerID: r.ID, state: runtime.NewProc(r.ID), io: pio, cfg: cfg}
	s.containers[r.ID] = c
	pid := s.taskPid()
	s.send(topicCreate, &eventsapi.TaskCreate{
		ContainerID: r.ID,
		Bundle:      r.Bundle,
		Rootfs:      r.Rootfs,
		IO:          &eventsapi.TaskIO{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: cfg.terminal},
		Pid:         pid,
	})
	return &taskv3.CreateTaskResponse{Pid: pid}, nil
}

// watchSandbox ends every process of the pod when the sandbox dies under us (killed, crashed):
// containerd must see the tasks exit, not hang.
func (s *Service) watchSandbox(ctx context.Context, sb *sandboxProc) {
	<-sb.exited
	s.mu.Lock()
	var procs []*process
	for _, c := range s.containers {
		procs = append(procs, c.init)
		for _, e := range c.execs {
			procs = append(procs, e)
		}
	}
	s.mu.Unlock()
	for _, p := range procs {
		if p.state.Status() == runtime.Created {
			// Never started: no waiter will report it.
			s.exited(p, runtime.Exit{Status: 128 + int(syscall.SIGKILL)})
		}
	}
	// Started processes: their Wait calls fail now that the connection is gone, and each
	// waiter reports its process killed.
}

// Start starts an init or exec in the sandbox.
func (s *Service) Start(ctx context.Context, r *taskv3.StartRequest) (*taskv3.StartResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, p, err := s.lookup(r.ID, r.ExecID)
	if err != nil {
		return nil, toGRPC(err)
	}
	if p.state.Status() != runtime.Created {
		return nil, toGRPC(fmt.Errorf("start %s: process is %s: %w", p.eventID(), p.state.Status(), errdefs.ErrFailedPrecondition))
	}
	if r.ExecID != "" && c.init.state.Status() != runtime.Running {
		return nil, toGRPC(fmt.Errorf("exec %s: container %s is %s: %w", r.ExecID, r.ID, c.init.state.Status(), errdefs.ErrFailedPrecondition))
	}
	sb, err := s.sandbox()
	if err != nil {
		return nil, toGRPC(err)
	}
	spid, err := sb.client.Start(ctx, r.ID, r.ExecID)
	if err != nil {
		return nil, toGRPC(err)
	}
	pid := s.taskPid()
	if r.ExecID != "" {
		pid = uint32(spid)
	}
	if err := p.state.Start(int(pid)); err != nil {
		return nil, toGRPC(err)
	}
	if r.ExecID == "" {
		s.send(topicStart, &eventsapi.TaskStart{ContainerID: r.ID, Pid: pid})
	} else {
		s.send(topicExecStarted, &eventsapi.TaskExecStarted{ContainerID: r.ID, ExecID: r.ExecID, Pid: pid})
	}
	// The waiter starts after the start event is queued, so the exit always follows it.
	go s.wait(sb, p)
	return &taskv3.StartResponse{Pid: pid}, nil
}

// wait waits for a started process to exit in the sandbox and reports it.
func (s *Service) wait(sb *sandboxProc, p *process) {
	w, err := sb.client.Wait(context.Background(), p.containerID, p.execID)
	e := runtime.Exit{Status: w.Status, OOMKilled: w.OOMKilled, At: w.ExitedAt}
	if err != nil {
		// The sandbox is gone, and the process with it.
		e = runtime.Exit{Status: 128 + int(syscall.SIGKILL), At: time.Now()}
	}
	p.io.WaitOutput(2 * time.Second)
	s.exited(p, e)
}

// exited records an exit and publishes it (TaskOOM first when the pod ran out of memory). It
// holds s.mu from the state change to the queued event, so that a Delete prompted by the exit
// (which takes s.mu) cannot queue TaskDelete before TaskExit.
func (s *Service) exited(p *process, e runtime.Exit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !p.state.SetExited(e) {
		return
	}
	e, _ = p.state.Exit()
	pid := uint32(p.state.Pid())
	if p.execID == "" {
		if c := s.containers[p.containerID]; c != nil {
			if err := writeExit(c.bundle.Path, exitRecord{Pid: int(pid), Status: e.Status, ExitedAt: e.At}); err != nil {
				log.L.WithError(err).Warn("endo: record exit")
			}
		}
	}
	if e.OOMKilled {
		s.send(topicOOM, &eventsapi.TaskOOM{ContainerID: p.containerID})
	}
	s.send(topicExit, &eventsapi.TaskExit{
		ContainerID: p.containerID,
		ID:          p.eventID(),
		Pid:         pid,
		ExitStatus:  uint32(e.Status),
		ExitedAt:    protobuf.ToTimestamp(e.At),
	})
}

// Delete removes a stopped (or never started) process; for an init, the whole container.
func (s *Service) Delete(ctx context.Context, r *taskv3.DeleteRequest) (*taskv3.DeleteResponse, error) {
	s.mu.Lock()
	c, p, err := s.lookup(r.ID, r.ExecID)
	if err != nil {
		s.mu.Unlock()
		return nil, toGRPC(err)
	}
	if err := p.state.CheckDelete(); err != nil {
		s.mu.Unlock()
		return nil, toGRPC(err)
	}
	if r.ExecID == "" {
		for _, e := range c.execs {
			if err := e.state.CheckDelete(); err != nil {
				s.mu.Unlock()
				return nil, toGRPC(fmt.Errorf("delete %s: %w", r.ID, err))
			}
		}
	}
	sb := s.sb
	s.mu.Unlock()

	if p.state.Status() == runtime.Created {
		// A container deleted before it ran: the sandbox drops it as killed.
		if sb != nil && sb.Alive() {
			_ = sb.client.Signal(ctx, r.ID, r.ExecID, int(syscall.SIGKILL), false)
		}
		s.exited(p, runtime.Exit{Status: 128 + int(syscall.SIGKILL)})
	}
	if sb != nil && sb.Alive() {
		if err := sb.client.Delete(ctx, r.ID, r.ExecID); err != nil && !errdefs.IsNotFound(err) && !errdefs.IsUnavailable(err) {
			log.G(ctx).WithError(err).Warn("endo: sandbox delete")
		}
	}
	e, _ := p.state.Exit()
	resp := &taskv3.DeleteResponse{Pid: uint32(p.state.Pid()), ExitStatus: uint32(e.Status), ExitedAt: protobuf.ToTimestamp(e.At)}

	s.mu.Lock()
	defer s.mu.Unlock()
	if r.ExecID != "" {
		p.io.Close()
		delete(c.execs, r.ExecID)
		return resp, nil
	}
	p.io.Close()
	for _, e := range c.execs {
		e.io.Close()
	}
	if c.rootfs {
		if err := unmountAll(c.bundle.Rootfs); err != nil {
			log.G(ctx).WithError(err).Warn("endo: unmount rootfs")
		}
	}
	delete(s.containers, r.ID)
	s.send(topicDelete, &eventsapi.TaskDelete{
		ContainerID: r.ID,
		ID:          r.ID,
		Pid:         resp.Pid,
		ExitStatus:  resp.ExitStatus,
		ExitedAt:    resp.ExitedAt,
	})
	// The pod is empty: its sandbox has nothing left to run.
	if len(s.containers) == 0 && s.sb != nil {
		s.sb.Stop(ctx)
		s.sb = nil
	}
	return resp, nil
}

// Exec adds a process to a running container.
func (s *Service) Exec(ctx context.Context, r *taskv3.ExecProcessRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[r.ID]
	if !ok {
		return nil, toGRPC(fmt.Errorf("container %s: %w", r.ID, errdefs.ErrNotFound))
	}
	if _, ok := c.execs[r.ExecID]; ok {
		return nil, toGRPC(fmt.Errorf("exec %s: %w", r.ExecID, errdefs.ErrAlreadyExists))
	}
	if st := c.init.state.Status(); st != runtime.Running {
		return nil, toGRPC(fmt.Errorf("exec in %s: container is %s: %w", r.ID, st, errdefs.ErrFailedPrecondition))
	}
	var spec specs.Process
	if r.Spec == nil {
		return nil, toGRPC(fmt.Errorf("exec %s: no process spec: %w", r.ExecID, errdefs.ErrInvalidArgument))
	}
	// The Any holds the runtime-spec Process as JSON (typeurl's encoding of non-proto types).
	if err := json.Unmarshal(r.Spec.GetValue(), &spec); err != nil {
		return nil, toGRPC(fmt.Errorf("exec %s: process spec: %w: %w", r.ExecID, err, errdefs.ErrInvalidArgument))
	}
	proc, err := runtime.ProcessFromOCI(&spec)
	if err != nil {
		return nil, toGRPC(fmt.Errorf("exec %s: %w: %w", r.ExecID, err, errdefs.ErrInvalidArgument))
	}
	sb, err := s.sandbox()
	if err != nil {
		return nil, toGRPC(err)
	}
	cfg := ioConfig{namespace: s.namespace, id: r.ID, stdin: r.Stdin, stdout: r.Stdout, stderr: r.Stderr, terminal: r.Terminal || proc.Terminal,
		width: proc.ConsoleWidth, height: proc.ConsoleHeight}
	pio, err := newProcIO(ctx, cfg)
	if err != nil {
		return nil, toGRPC(err)
	}
	err = sb.client.Exec(ctx, control.ExecRequest{ID: r.ID, ExecID: r.ExecID, Process: proc}, pio.tenant)
	pio.sent()
	if err != nil {
		pio.Close()
		return nil, toGRPC(fmt.Errorf("exec %s: %w", r.ExecID, err))
	}
	c.execs[r.ExecID] = &process{containerID: r.ID, execID: r.ExecID, state: runtime.NewProc(r.ExecID), io: pio, cfg: cfg}
	s.send(topicExecAdded, &eventsapi.TaskExecAdded{ContainerID: r.ID, ExecID: r.ExecID})
	return &emptypb.Empty{}, nil
}

// Kill signals a process, or with All every process of the container.
func (s *Service) Kill(ctx context.Context, r *taskv3.KillRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	_, p, err := s.lookup(r.ID, r.ExecID)
	sb := s.sb
	s.mu.Unlock()
	if err != nil {
		return nil, toGRPC(err)
	}
	if p.state.Status() == runtime.Stopped {
		return nil, toGRPC(fmt.Errorf("process %s already finished: %w", p.eventID(), errdefs.ErrNotFound))
	}
	if sb == nil || !sb.Alive() {
		return nil, toGRPC(fmt.Errorf("%w: %w", errSandboxGone, errdefs.ErrNotFound))
	}
	wasCreated := p.state.Status() == runtime.Created
	if wasCreated && r.All {
		// Kill with all reaches running processes only; a process that never started is the
		// one to end here.
		r.All = false
	}
	if err := sb.client.Signal(ctx, r.ID, r.ExecID, int(r.Signal), r.All); err != nil {
		return nil, toGRPC(err)
	}
	if wasCreated {
		// The sandbox ended it without running it; nobody waits on it, so report it here.
		s.exited(p, runtime.Exit{Status: 128 + int(r.Signal)})
	}
	return &emptypb.Empty{}, nil
}

// State reports a process.
func (s *Service) State(ctx context.Context, r *taskv3.StateRequest) (*taskv3.StateResponse, error) {
	s.mu.Lock()
	c, p, err := s.lookup(r.ID, r.ExecID)
	s.mu.Unlock()
	if err != nil {
		return nil, toGRPC(err)
	}
	st := tasktypes.Status_UNKNOWN
	switch p.state.Status() {
	case runtime.Created:
		st = tasktypes.Status_CREATED
	case runtime.Running:
		st = tasktypes.Status_RUNNING
	case runtime.Stopped:
		st = tasktypes.Status_STOPPED
	}
	pid := uint32(p.state.Pid())
	if pid == 0 && r.ExecID == "" {
		s.mu.Lock()
		pid = s.taskPid()
		s.mu.Unlock()
	}
	resp := &taskv3.StateResponse{
		ID:       p.eventID(),
		Bundle:   c.bundle.Path,
		Pid:      pid,
		Status:   st,
		Stdin:    p.cfg.stdin,
		Stdout:   p.cfg.stdout,
		Stderr:   p.cfg.stderr,
		Terminal: p.cfg.terminal,
		ExecID:   r.ExecID,
	}
	if e, ok := p.state.Exit(); ok {
		resp.ExitStatus = uint32(e.Status)
		resp.ExitedAt = protobuf.ToTimestamp(e.At)
	}
	return resp, nil
}

// Wait blocks until a process exits.
func (s *Service) Wait(ctx context.Context, r *taskv3.WaitRequest) (*taskv3.WaitResponse, error) {
	s.mu.Lock()
	_, p, err := s.lookup(r.ID, r.ExecID)
	s.mu.Unlock()
	if err != nil {
		return nil, toGRPC(err)
	}
	e, err := p.state.Wait(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &taskv3.WaitResponse{ExitStatus: uint32(e.Status), ExitedAt: protobuf.ToTimestamp(e.At)}, nil
}

// Pids lists the sandbox pids of the container's processes.
func (s *Service) Pids(ctx context.Context, r *taskv3.PidsRequest) (*taskv3.PidsResponse, error) {
	s.mu.Lock()
	_, _, err := s.lookup(r.ID, "")
	sb := s.sb
	s.mu.Unlock()
	if err != nil {
		return nil, toGRPC(err)
	}
	if sb == nil || !sb.Alive() {
		return &taskv3.PidsResponse{}, nil
	}
	pids, err := sb.client.Pids(ctx, r.ID)
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &taskv3.PidsResponse{}
	for _, pid := range pids {
		resp.Processes = append(resp.Processes, &tasktypes.ProcessInfo{Pid: uint32(pid)})
	}
	return resp, nil
}

// ResizePty resizes a process's terminal and tells the process.
func (s *Service) ResizePty(ctx context.Context, r *taskv3.ResizePtyRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	_, p, err := s.lookup(r.ID, r.ExecID)
	sb := s.sb
	s.mu.Unlock()
	if err != nil {
		return nil, toGRPC(err)
	}
	if err := p.io.Resize(r.Width, r.Height); err != nil {
		return nil, toGRPC(fmt.Errorf("resize %s: %w: %w", p.eventID(), err, errdefs.ErrFailedPrecondition))
	}
	if sb != nil && sb.Alive() {
		if err := sb.client.ResizePty(ctx, control.ResizeRequest{ID: r.ID, ExecID: r.ExecID, Width: r.Width, Height: r.Height}); err != nil && !errdefs.IsNotFound(err) {
			return nil, toGRPC(err)
		}
	}
	return &emptypb.Empty{}, nil
}

// CloseIO closes a process's stdin (the shim holds the writing end).
func (s *Service) CloseIO(ctx context.Context, r *taskv3.CloseIORequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	_, p, err := s.lookup(r.ID, r.ExecID)
	s.mu.Unlock()
	if err != nil {
		return nil, toGRPC(err)
	}
	if r.Stdin {
		p.io.CloseStdin()
	}
	return &emptypb.Empty{}, nil
}

// Pause is not supported yet.
func (s *Service) Pause(ctx context.Context, r *taskv3.PauseRequest) (*emptypb.Empty, error) {
	return nil, toGRPC(fmt.Errorf("pause: %w", errdefs.ErrNotImplemented))
}

// Resume is not supported yet.
func (s *Service) Resume(ctx context.Context, r *taskv3.ResumeRequest) (*emptypb.Empty, error) {
	return nil, toGRPC(fmt.Errorf("resume: %w", errdefs.ErrNotImplemented))
}

// Checkpoint is not supported.
func (s *Service) Checkpoint(ctx context.Context, r *taskv3.CheckpointTaskRequest) (*emptypb.Empty, error) {
	return nil, toGRPC(fmt.Errorf("checkpoint: %w", errdefs.ErrNotImplemented))
}

// Update of resources is not supported yet.
// Update applies new resources to the pod: its cgroup's limits, and the sandbox's vCPU count.
func (s *Service) Update(ctx context.Context, r *taskv3.UpdateTaskRequest) (*emptypb.Empty, error) {
	if r.Resources == nil {
		return nil, toGRPC(fmt.Errorf("update %s: no resources: %w", r.ID, errdefs.ErrInvalidArgument))
	}
	var res specs.LinuxResources
	// The Any holds runtime-spec LinuxResources as JSON (typeurl's encoding of non-proto types).
	if err := json.Unmarshal(r.Resources.GetValue(), &res); err != nil {
		return nil, toGRPC(fmt.Errorf("update %s: resources: %w: %w", r.ID, err, errdefs.ErrInvalidArgument))
	}
	sb, err := s.sandbox()
	if err != nil {
		return nil, toGRPC(err)
	}
	if err := sb.cgroup.Update(&res); err != nil {
		return nil, toGRPC(fmt.Errorf("update %s: %w", r.ID, err))
	}
	vcpus := cgroupfair.VCPUs(&res, goruntime.NumCPU())
	log.G(ctx).WithField("id", r.ID).WithField("vcpus", vcpus).Info("endo: pod resources updated")
	if err := sb.client.Update(ctx, control.UpdateRequest{VCPUs: vcpus}); err != nil {
		return nil, toGRPC(fmt.Errorf("update %s: %w", r.ID, err))
	}
	return &emptypb.Empty{}, nil
}

// Connect reports the shim's and the sandbox's host pids.
func (s *Service) Connect(ctx context.Context, r *taskv3.ConnectRequest) (*taskv3.ConnectResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &taskv3.ConnectResponse{ShimPid: uint32(os.Getpid()), TaskPid: s.taskPid(), Version: Version}, nil
}

// Shutdown ends the shim once it has no container left; containerd calls it after every delete.
func (s *Service) Shutdown(ctx context.Context, r *taskv3.ShutdownRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	n := len(s.containers)
	s.mu.Unlock()
	if n > 0 {
		return &emptypb.Empty{}, nil
	}
	s.sd.Shutdown()
	return &emptypb.Empty{}, nil
}
