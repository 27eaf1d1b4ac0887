package control

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Connection tags: the first byte the shim writes on each connection says what it is for.
const (
	tagSession byte = 'S'
	tagRPC     byte = 'T'
)

// A session frame is frameSize bytes: the sequence number (little endian) and a mask of which of
// stdin/stdout/stderr follow, in that order, as SCM_RIGHTS on the frame's first byte.
const frameSize = 16

// sendStdio sends the present files of s as one frame numbered seq.
func sendStdio(conn *net.UnixConn, seq uint64, s Stdio) error {
	var frame [frameSize]byte
	binary.LittleEndian.PutUint64(frame[:8], seq)
	var fds []int
	for i, f := range []*os.File{s.Stdin, s.Stdout, s.Stderr} {
		if f != nil {
			frame[8] |= 1 << i
			fds = append(fds, int(f.Fd()))
		}
	}
	n, _, err := conn.WriteMsgUnix(frame[:], unix.UnixRights(fds...), nil)
	if err != nil {
		return fmt.Errorf("send stdio %d: %w", seq, err)
	}
	if n != frameSize {
		return fmt.Errorf("send stdio %d: short write %d", seq, n)
	}
	return nil
}

// recvStdio reads one frame and its files.
func recvStdio(conn *net.UnixConn) (uint64, Stdio, error) {
	var frame [frameSize]byte
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(frame[:], oob)
	if err != nil {
		return 0, Stdio{}, err
	}
	if n == 0 {
		return 0, Stdio{}, io.EOF
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return 0, Stdio{}, fmt.Errorf("parse stdio rights: %w", err)
		}
		for _, m := range msgs {
			got, err := unix.ParseUnixRights(&m)
			if err != nil {
				return 0, Stdio{}, fmt.Errorf("parse stdio rights: %w", err)
			}
			fds = append(fds, got...)
		}
	}
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if n < frameSize {
		if _, err := io.ReadFull(conn, frame[n:]); err != nil {
			closeAll()
			return 0, Stdio{}, fmt.Errorf("read stdio frame: %w", err)
		}
	}
	seq := binary.LittleEndian.Uint64(frame[:8])
	mask := frame[8]
	var files [3]*os.File
	next := 0
	for i := range 3 {
		if mask&(1<<i) == 0 {
			continue
		}
		if next >= len(fds) {
			closeAll()
			return 0, Stdio{}, fmt.Errorf("stdio %d: mask %#x but %d files", seq, mask, len(fds))
		}
		unix.CloseOnExec(fds[next])
		files[i] = os.NewFile(uintptr(fds[next]), fmt.Sprintf("stdio-%d-%d", seq, i))
		next++
	}
	for _, fd := range fds[next:] {
		unix.Close(fd)
	}
	return seq, Stdio{Stdin: files[0], Stdout: files[1], Stderr: files[2]}, nil
}

// Close closes every file of s.
func (s Stdio) Close() {
	seen := map[*os.File]bool{}
	for _, f := range []*os.File{s.Stdin, s.Stdout, s.Stderr} {
		if f != nil && !seen[f] {
			seen[f] = true
			f.Close()
		}
	}
}

// stdioStore holds received files until the ttrpc call that names them arrives; the two travel on
// different connections, so either may come first.
type stdioStore struct {
	mu     sync.Mutex
	cond   *sync.Cond
	files  map[uint64]Stdio
	closed bool
}

func newStdioStore() *stdioStore {
	s := &stdioStore{files: map[uint64]Stdio{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *stdioStore) put(seq uint64, st Stdio) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		st.Close()
		return
	}
	s.files[seq] = st
	s.cond.Broadcast()
}

// take waits up to timeout for frame seq; seq 0 means no files.
func (s *stdioStore) take(seq uint64, timeout time.Duration) (Stdio, error) {
	if seq == 0 {
		return Stdio{}, nil
	}
	timer := time.AfterFunc(timeout, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if st, ok := s.files[seq]; ok {
			delete(s.files, seq)
			return st, nil
		}
		if s.closed {
			return Stdio{}, errors.New("stdio: session closed")
		}
		if !time.Now().Before(deadline) {
			return Stdio{}, fmt.Errorf("stdio %d: not received within %v", seq, timeout)
		}
		s.cond.Wait()
	}
}

func (s *stdioStore) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for seq, st := range s.files {
		st.Close()
		delete(s.files, seq)
	}
	s.cond.Broadcast()
}
