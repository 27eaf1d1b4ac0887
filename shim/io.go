package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/console"
	"github.com/containerd/containerd/v2/pkg/sys/reaper"
	"github.com/containerd/fifo"
	"golang.org/x/sys/unix"

	"github.com/endovisor/endo/sandbox/control"
)

// procIO is the host side of one tenant process's stdio. The tenant gets plain host files
// (pipes, a pty slave, or a log file); the shim copies between them and containerd's FIFOs or
// logging binary, so that a client that comes and goes never blocks or kills the tenant.
type procIO struct {
	tenant control.Stdio // sent to the sandbox, then closed here

	console   console.Console // pty master, terminal only
	stdinW    io.WriteCloser  // what the tenant reads from, non-terminal
	stdinOnce sync.Once
	closers   []io.Closer
	outputs   sync.WaitGroup // output copies
	cancel    context.CancelFunc
}

// ioConfig is what containerd asked for.
type ioConfig struct {
	namespace, id         string
	stdin, stdout, stderr string
	terminal              bool
	width, height         uint // first terminal size; 0: 80x24
}

// newProcIO opens what c names. Empty paths mean no stream (the tenant gets /dev/null).
func newProcIO(ctx context.Context, c ioConfig) (_ *procIO, retErr error) {
	// The copies outlive the request that made them: opening a FIFO is cancelled only by Close.
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &procIO{cancel: cancel}
	defer func() {
		if retErr != nil {
			p.tenant.Close()
			p.Close()
		}
	}()
	if c.terminal {
		return p, p.openTerminal(ctx, c)
	}
	if c.stdin != "" {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("stdin pipe: %w", err)
		}
		p.tenant.Stdin, p.stdinW = r, w
		in, err := fifo.OpenFifo(ctx, c.stdin, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return nil, fmt.Errorf("open stdin %s: %w", c.stdin, err)
		}
		p.closers = append(p.closers, in)
		go func() {
			_, _ = io.Copy(w, in)
			p.CloseStdin()
		}()
	}
	if c.stdout == "" && c.stderr == "" {
		return p, nil
	}
	u, err := url.Parse(c.stdout)
	if c.stdout == "" {
		u, err = url.Parse(c.stderr)
	}
	if err != nil {
		return nil, fmt.Errorf("stdio uri %q: %w", c.stdout, err)
	}
	switch u.Scheme {
	case "", "fifo":
		for _, s := range []struct {
			path string
			dst  **os.File
		}{{c.stdout, &p.tenant.Stdout}, {c.stderr, &p.tenant.Stderr}} {
			if s.path == "" {
				continue
			}
			r, w, err := os.Pipe()
			if err != nil {
				return nil, fmt.Errorf("output pipe: %w", err)
			}
			*s.dst = w
			p.copyOut(ctx, r, s.path)
		}
		return p, nil
	case "file":
		f, err := os.OpenFile(u.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
		if err != nil {
			return nil, fmt.Errorf("open log file %s: %w", u.Path, err)
		}
		p.tenant.Stdout, p.tenant.Stderr = f, f
		return p, nil
	case "binary", "binary-v2":
		return p, p.startLogger(ctx, c, u)
	}
	return nil, fmt.Errorf("stdio uri %q: unknown scheme %q", c.stdout, u.Scheme)
}

// copyOut copies what the tenant writes on r to the FIFO at path. The FIFO is opened in the
// background (it blocks until containerd's reader is there); if the reader goes away, the rest is
// drained so that the tenant never blocks on a full pipe.
func (p *procIO) copyOut(ctx context.Context, r *os.File, path string) {
	p.outputs.Add(1)
	p.closers = append(p.closers, r)
	go func() {
		defer p.outputs.Done()
		defer r.Close()
		w, err := fifo.OpenFifo(ctx, path, unix.O_WRONLY, 0)
		if err != nil {
			_, _ = io.Copy(io.Discard, r)
			return
		}
		defer w.Close()
		if _, err := io.Copy(w, r); err != nil {
			_, _ = io.Copy(io.Discard, r)
		}
	}()
}

func (p *procIO) openTerminal(ctx context.Context, c ioConfig) error {
	master, slavePath, err := console.NewPty()
	if err != nil {
		return fmt.Errorf("new pty: %w", err)
	}
	p.console = master
	slave, err := os.OpenFile(slavePath, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return fmt.Errorf("open pty %s: %w", slavePath, err)
	}
	p.tenant = control.Stdio{Stdin: slave, Stdout: slave, Stderr: slave}
	// Clients resize only after start (ctr on Linux never sends a size with create); a tenant
	// that asks at once must still see a real terminal size, so start from the spec's or 80x24.
	w, h := c.width, c.height
	if w == 0 || h == 0 {
		w, h = 80, 24
	}
	if err := master.Resize(console.WinSize{Width: uint16(w), Height: uint16(h)}); err != nil {
		return fmt.Errorf("size pty: %w", err)
	}
	if c.stdin != "" {
		in, err := fifo.OpenFifo(ctx, c.stdin, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("open stdin %s: %w", c.stdin, err)
		}
		p.closers = append(p.closers, in)
		go func() { _, _ = io.Copy(master, in) }()
	}
	if c.stdout != "" {
		p.outputs.Add(1)
		go func() {
			defer p.outputs.Done()
			w, err := fifo.OpenFifo(ctx, c.stdout, unix.O_WRONLY, 0)
			if err != nil {
				_, _ = io.Copy(io.Discard, master)
				return
			}
			defer w.Close()
			// Ends with EIO once every copy of the slave is closed: the tenant is gone.
			_, _ = io.Copy(w, master)
		}()
	}
	return nil
}

// startLogger runs containerd's logging binary protocol: the binary reads the tenant's stdout on
// fd 3 and stderr on fd 4, and says it is ready by writing to (v2) or closing fd 5.
func (p *procIO) startLogger(ctx context.Context, c ioConfig, u *url.URL) error {
	var args []string
	for k, vs := range u.Query() {
		args = append(args, k)
		if len(vs) > 0 && vs[0] != "" {
			args = append(args, vs[0])
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("logger pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return fmt.Errorf("logger pipe: %w", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return fmt.Errorf("logger pipe: %w", err)
	}
	defer readyR.Close()
	p.tenant.Stdout, p.tenant.Stderr = outW, errW
	cmd := exec.Command(u.Path, args...)
	cmd.Env = append(os.Environ(), "CONTAINER_ID="+c.id, "CONTAINER_NAMESPACE="+c.namespace)
	cmd.ExtraFiles = []*os.File{outR, errR, readyW}
	ec, err := reaper.Default.Start(cmd)
	outR.Close()
	errR.Close()
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start logger %s: %w", u.Path, err)
	}
	go func() { _, _ = reaper.Default.Wait(cmd, ec) }()
	ready := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := readyR.Read(b[:])
		if errors.Is(err, io.EOF) {
			err = nil
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			return fmt.Errorf("logger %s: %w", u.Path, err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		return fmt.Errorf("logger %s: not ready after 10s", u.Path)
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGKILL)
		return ctx.Err()
	}
	return nil
}

// sent closes the shim's copies of the tenant's files once the sandbox holds its own: from then
// on, end of file on the output pipes means the tenant is done with them.
func (p *procIO) sent() {
	p.tenant.Close()
	p.tenant = control.Stdio{}
}

// CloseStdin gives the tenant end of file on stdin.
func (p *procIO) CloseStdin() {
	p.stdinOnce.Do(func() {
		if p.stdinW != nil {
			p.stdinW.Close()
		}
	})
}

// Resize resizes the terminal.
func (p *procIO) Resize(width, height uint32) error {
	if p.console == nil {
		return errors.New("process has no terminal")
	}
	return p.console.Resize(console.WinSize{Width: uint16(width), Height: uint16(height)})
}

// WaitOutput waits until the tenant's output is copied out, at most d: a background process that
// inherited stdout must not hold the exit back for ever.
func (p *procIO) WaitOutput(d time.Duration) {
	done := make(chan struct{})
	go func() {
		p.outputs.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// Close releases everything.
func (p *procIO) Close() {
	p.cancel()
	p.CloseStdin()
	for _, c := range p.closers {
		c.Close()
	}
	if p.console != nil {
		p.console.Close()
	}
}
