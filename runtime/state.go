package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/errdefs"
)

// Status is where a process is in its life.
type Status int

// A process goes Created → Running → Stopped; a created process that never starts can go
// straight to Stopped (its sandbox died, or it was deleted).
const (
	Created Status = iota
	Running
	Stopped
)

func (s Status) String() string {
	switch s {
	case Created:
		return "created"
	case Running:
		return "running"
	case Stopped:
		return "stopped"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// Exit is how a process ended.
type Exit struct {
	Status    int       // the shell's view: code, or 128+signal
	OOMKilled bool      // killed because the pod's memory was exhausted
	At        time.Time // when the exit was observed
}

// Proc is the state machine of one container init or exec process. Safe for concurrent use.
type Proc struct {
	ID string // container id for an init, exec id for an exec

	mu     sync.Mutex
	status Status
	pid    int
	exit   Exit
	done   chan struct{}
}

// NewProc returns a process in state Created.
func NewProc(id string) *Proc {
	return &Proc{ID: id, done: make(chan struct{})}
}

// Start moves Created → Running with the process's pid.
func (p *Proc) Start(pid int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status != Created {
		return fmt.Errorf("process %s is %s, not created: %w", p.ID, p.status, errdefs.ErrFailedPrecondition)
	}
	p.status, p.pid = Running, pid
	return nil
}

// SetExited moves the process to Stopped. Only the first exit counts; it reports whether this
// call was that one.
func (p *Proc) SetExited(e Exit) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status == Stopped {
		return false
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	p.status, p.exit = Stopped, e
	close(p.done)
	return true
}

// Status is the current state.
func (p *Proc) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Pid is the pid given to Start, 0 before.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// Exit returns the exit and true once the process is Stopped.
func (p *Proc) Exit() (Exit, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit, p.status == Stopped
}

// Done is closed when the process stops.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait blocks until the process stops or ctx ends.
func (p *Proc) Wait(ctx context.Context) (Exit, error) {
	select {
	case <-p.done:
		e, _ := p.Exit()
		return e, nil
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
}

// CheckDelete says whether the process may be deleted: not while it runs.
func (p *Proc) CheckDelete() error {
	if s := p.Status(); s == Running {
		return fmt.Errorf("process %s is running; kill it first: %w", p.ID, errdefs.ErrFailedPrecondition)
	}
	return nil
}
