package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/containerd/ttrpc"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Handler is what the sandbox does for each call. Errors should carry errdefs classes
// (ErrNotFound for an unknown container, ...); the server sends them with their class.
type Handler interface {
	Create(ctx context.Context, req *CreateRequest, stdio Stdio) error
	Exec(ctx context.Context, req *ExecRequest, stdio Stdio) error
	Start(ctx context.Context, req *ProcRequest) (*StartReply, error)
	Signal(ctx context.Context, req *SignalRequest) error
	// Wait blocks until the process exits.
	Wait(ctx context.Context, req *ProcRequest) (*WaitReply, error)
	Pids(ctx context.Context, id string) (*PidsReply, error)
	Stats(ctx context.Context, id string) (*StatsReply, error)
	ResizePty(ctx context.Context, req *ResizeRequest) error
	Update(ctx context.Context, req *UpdateRequest) error
	Delete(ctx context.Context, req *ProcRequest) error
	// Shutdown stops every process; Serve calls it once, before it stops serving, so that
	// pending Waits get their replies.
	Shutdown()
}

// ErrShimGone is returned by Serve when the shim's session ended without a Shutdown call.
var ErrShimGone = errors.New("control: the shim closed its session")

// How long the sandbox waits for the shim to connect, and for stdio files to follow a call.
const (
	connectTimeout = 30 * time.Second
	stdioTimeout   = 10 * time.Second
)

// Serve listens on the unix socket path, accepts the shim's session and ttrpc connections, unlinks
// the socket and serves h until the shim calls Shutdown (returns nil), the session ends
// (ErrShimGone) or ctx ends.
func Serve(ctx context.Context, path string, h Handler) error {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("control: listen %s: %w", path, err)
	}
	session, rpc, err := acceptPair(l)
	l.Close() // unlinks path: nobody else may connect
	if err != nil {
		h.Shutdown()
		return err
	}
	defer session.Close()

	s := &server{h: h, stdio: newStdioStore(), shutdown: make(chan struct{})}
	srv, err := ttrpc.NewServer(ttrpc.WithServerHandshaker(ttrpc.UnixSocketRequireSameUser()))
	if err != nil {
		h.Shutdown()
		return fmt.Errorf("control: %w", err)
	}
	srv.RegisterService(ServiceName, &ttrpc.ServiceDesc{Methods: s.methods()})
	go func() { _ = srv.Serve(ctx, &oneConn{c: rpc, closed: make(chan struct{})}) }()

	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			seq, st, err := recvStdio(session)
			if err != nil {
				return
			}
			s.stdio.put(seq, st)
		}
	}()

	var result error
	select {
	case <-s.shutdown:
	case <-gone:
		result = ErrShimGone
	case <-ctx.Done():
		result = ctx.Err()
	}
	h.Shutdown()
	s.stdio.close()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	return result
}

// acceptPair accepts the session and the ttrpc connection, in either order, from our own user.
func acceptPair(l *net.UnixListener) (session, rpc *net.UnixConn, err error) {
	deadline := time.Now().Add(connectTimeout)
	_ = l.SetDeadline(deadline)
	for session == nil || rpc == nil {
		c, err := l.AcceptUnix()
		if err != nil {
			for _, o := range []*net.UnixConn{session, rpc} {
				if o != nil {
					o.Close()
				}
			}
			return nil, nil, fmt.Errorf("control: accept shim: %w", err)
		}
		tag, err := readTag(c, deadline)
		if err != nil {
			c.Close()
			continue
		}
		switch {
		case tag == tagSession && session == nil:
			session = c
		case tag == tagRPC && rpc == nil:
			rpc = c
		default:
			c.Close()
		}
	}
	return session, rpc, nil
}

// readTag checks the peer's user and reads the connection's tag byte.
func readTag(c *net.UnixConn, deadline time.Time) (byte, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	if int(cred.Uid) != os.Geteuid() {
		return 0, fmt.Errorf("control: peer uid %d is not ours", cred.Uid)
	}
	_ = c.SetReadDeadline(deadline)
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Time{})
	return b[0], nil
}

type server struct {
	h        Handler
	stdio    *stdioStore
	once     sync.Once
	shutdown chan struct{}
}

// method adapts a typed handler to ttrpc: JSON in a BytesValue each way.
func method[Req any](fn func(context.Context, *Req) (any, error)) ttrpc.Method {
	return func(ctx context.Context, unmarshal func(any) error) (any, error) {
		var in wrapperspb.BytesValue
		if err := unmarshal(&in); err != nil {
			return nil, ToGRPC(err)
		}
		req := new(Req)
		if err := json.Unmarshal(in.Value, req); err != nil {
			return nil, ToGRPC(fmt.Errorf("control: decode request: %w", err))
		}
		out, err := fn(ctx, req)
		if err != nil {
			return nil, ToGRPC(err)
		}
		if out == nil {
			out = Empty{}
		}
		data, err := json.Marshal(out)
		if err != nil {
			return nil, ToGRPC(fmt.Errorf("control: encode reply: %w", err))
		}
		return wrapperspb.Bytes(data), nil
	}
}

func (s *server) methods() map[string]ttrpc.Method {
	h := s.h
	return map[string]ttrpc.Method{
		"Create": method(func(ctx context.Context, r *CreateRequest) (any, error) {
			st, err := s.stdio.take(r.Stdio, stdioTimeout)
			if err != nil {
				return nil, err
			}
			return nil, h.Create(ctx, r, st)
		}),
		"Exec": method(func(ctx context.Context, r *ExecRequest) (any, error) {
			st, err := s.stdio.take(r.Stdio, stdioTimeout)
			if err != nil {
				return nil, err
			}
			return nil, h.Exec(ctx, r, st)
		}),
		"Start": method(func(ctx context.Context, r *ProcRequest) (any, error) {
			return h.Start(ctx, r)
		}),
		"Signal": method(func(ctx context.Context, r *SignalRequest) (any, error) {
			return nil, h.Signal(ctx, r)
		}),
		"Wait": method(func(ctx context.Context, r *ProcRequest) (any, error) {
			return h.Wait(ctx, r)
		}),
		"Pids": method(func(ctx context.Context, r *ProcRequest) (any, error) {
			return h.Pids(ctx, r.ID)
		}),
		"Stats": method(func(ctx context.Context, r *ProcRequest) (any, error) {
			return h.Stats(ctx, r.ID)
		}),
		"ResizePty": method(func(ctx context.Context, r *ResizeRequest) (any, error) {
			return nil, h.ResizePty(ctx, r)
		}),
		"Update": method(func(ctx context.Context, r *UpdateRequest) (any, error) {
			return nil, h.Update(ctx, r)
		}),
		"Delete": method(func(ctx context.Context, r *ProcRequest) (any, error) {
			return nil, h.Delete(ctx, r)
		}),
		"Shutdown": method(func(ctx context.Context, _ *Empty) (any, error) {
			s.once.Do(func() { close(s.shutdown) })
			return nil, nil
		}),
	}
}

// oneConn is a listener that yields one connection, then blocks until closed: the sandbox serves
// exactly one ttrpc client, its shim.
type oneConn struct {
	mu     sync.Mutex
	c      net.Conn
	closed chan struct{}
	once   sync.Once
}

func (o *oneConn) Accept() (net.Conn, error) {
	o.mu.Lock()
	c := o.c
	o.c = nil
	o.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-o.closed
	return nil, net.ErrClosed
}

func (o *oneConn) Close() error {
	o.once.Do(func() { close(o.closed) })
	return nil
}

func (o *oneConn) Addr() net.Addr { return &net.UnixAddr{Name: "endo-control", Net: "unix"} }
