package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Client is the shim's end of the control API. Safe for concurrent use.
type Client struct {
	session *net.UnixConn
	rpc     *ttrpc.Client

	mu  sync.Mutex // orders stdio frames
	seq uint64
}

// Dial connects to the sandbox listening on path, retrying while the socket does not exist yet
// (the sandbox is starting) until ctx ends. alive, if not nil, is checked between tries so that a
// sandbox that died while booting is reported at once.
func Dial(ctx context.Context, path string, alive func() error) (*Client, error) {
	for {
		c, err := dialOnce(path)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, err
		}
		if alive != nil {
			if aerr := alive(); aerr != nil {
				return nil, aerr
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("control: connect %s: %w (last: %v)", path, ctx.Err(), err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func dialOnce(path string) (*Client, error) {
	addr := &net.UnixAddr{Name: path, Net: "unix"}
	session, err := net.DialUnix("unix", nil, addr)
	if err != nil {
		return nil, fmt.Errorf("control: connect %s: %w", path, err)
	}
	if _, err := session.Write([]byte{tagSession}); err != nil {
		session.Close()
		return nil, fmt.Errorf("control: open session: %w", err)
	}
	rc, err := net.DialUnix("unix", nil, addr)
	if err != nil {
		session.Close()
		return nil, fmt.Errorf("control: connect %s: %w", path, err)
	}
	if _, err := rc.Write([]byte{tagRPC}); err != nil {
		session.Close()
		rc.Close()
		return nil, fmt.Errorf("control: open rpc: %w", err)
	}
	return &Client{session: session, rpc: ttrpc.NewClient(rc)}, nil
}

// Close drops both connections; the sandbox takes that as its shim being gone.
func (c *Client) Close() error {
	err := c.rpc.Close()
	c.session.Close()
	return err
}

func (c *Client) call(ctx context.Context, name string, req, reply any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("control %s: encode: %w", name, err)
	}
	var out wrapperspb.BytesValue
	if err := c.rpc.Call(ctx, ServiceName, name, wrapperspb.Bytes(data), &out); err != nil {
		return FromGRPC(err)
	}
	if reply == nil {
		return nil
	}
	if err := json.Unmarshal(out.Value, reply); err != nil {
		return fmt.Errorf("control %s: decode: %w", name, err)
	}
	return nil
}

// sendStdio sends the files and returns the frame's number for the call that uses them.
func (c *Client) sendStdio(s Stdio) (uint64, error) {
	if s.Stdin == nil && s.Stdout == nil && s.Stderr == nil {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	if err := sendStdio(c.session, c.seq, s); err != nil {
		return 0, err
	}
	return c.seq, nil
}

// Create creates a container; the sandbox gets its own copies of the stdio files, so the caller
// may close its own once Create returns.
func (c *Client) Create(ctx context.Context, req CreateRequest, stdio Stdio) error {
	seq, err := c.sendStdio(stdio)
	if err != nil {
		return err
	}
	req.Stdio = seq
	return c.call(ctx, "Create", &req, nil)
}

// Exec adds a process to a container; stdio as for Create.
func (c *Client) Exec(ctx context.Context, req ExecRequest, stdio Stdio) error {
	seq, err := c.sendStdio(stdio)
	if err != nil {
		return err
	}
	req.Stdio = seq
	return c.call(ctx, "Exec", &req, nil)
}

// Start starts a created init or exec and returns its sandbox pid.
func (c *Client) Start(ctx context.Context, id, execID string) (int, error) {
	var r StartReply
	err := c.call(ctx, "Start", &ProcRequest{ID: id, ExecID: execID}, &r)
	return r.Pid, err
}

// Signal signals one process, or every process of container id when all is set.
func (c *Client) Signal(ctx context.Context, id, execID string, sig int, all bool) error {
	return c.call(ctx, "Signal", &SignalRequest{ID: id, ExecID: execID, Signal: sig, All: all}, nil)
}

// Wait blocks until the process exits.
func (c *Client) Wait(ctx context.Context, id, execID string) (WaitReply, error) {
	var r WaitReply
	err := c.call(ctx, "Wait", &ProcRequest{ID: id, ExecID: execID}, &r)
	return r, err
}

// Pids lists the sandbox pids of container id.
func (c *Client) Pids(ctx context.Context, id string) ([]int, error) {
	var r PidsReply
	err := c.call(ctx, "Pids", &ProcRequest{ID: id}, &r)
	return r.Pids, err
}

// Stats returns the sandbox's accounting of container id.
func (c *Client) Stats(ctx context.Context, id string) (StatsReply, error) {
	var r StatsReply
	err := c.call(ctx, "Stats", &ProcRequest{ID: id}, &r)
	return r, err
}

// Update tells the sandbox the pod's new resources.
func (c *Client) Update(ctx context.Context, req UpdateRequest) error {
	return c.call(ctx, "Update", &req, nil)
}

// ResizePty tells a terminal process that its window changed.
func (c *Client) ResizePty(ctx context.Context, req ResizeRequest) error {
	return c.call(ctx, "ResizePty", &req, nil)
}

// Delete forgets a stopped process (ExecID "" : the container and all its execs).
func (c *Client) Delete(ctx context.Context, id, execID string) error {
	return c.call(ctx, "Delete", &ProcRequest{ID: id, ExecID: execID}, nil)
}

// Shutdown asks the sandbox to kill every process and exit. The sandbox may close the
// connection before its reply is written; that is the shutdown happening, not a failure.
func (c *Client) Shutdown(ctx context.Context) error {
	err := c.call(ctx, "Shutdown", &Empty{}, nil)
	if errors.Is(err, ttrpc.ErrClosed) {
		return nil
	}
	return err
}
