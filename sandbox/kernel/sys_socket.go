package kernel

import (
	"encoding/binary"
	"errors"
	"os"

	"github.com/endovisor/endo/sandbox/kernel/vfs"
	"golang.org/x/sys/unix"
)

// Sockets: only socketpair(AF_UNIX), whose two connected ends are host sockets behind tenant fds
// (asyncio's self-pipe, a parent talking to its child). read and write reach them like pipes;
// send, recv and their msg forms without addresses or control data, shutdown, the names of an
// unnamed pair and the SOL_SOCKET options are served. socket(2) itself is not: no networking.

func sysSocketpair(t *Task, a sysargs) (uint64, error) {
	domain, typ := int(a[0]), int(a[1])
	if domain != unix.AF_UNIX {
		t.p.k.countUnimplemented(unix.SYS_SOCKETPAIR)
		return 0, unix.EAFNOSUPPORT
	}
	flags := typ & (unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC)
	switch typ &^ flags {
	case unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_SEQPACKET:
	default:
		return 0, unix.EINVAL
	}
	if a[2] != 0 {
		return 0, unix.EPROTONOSUPPORT
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, typ&^flags|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	var out [2]int
	for i, hfd := range fds {
		f := vfs.HostFile(os.NewFile(uintptr(hfd), "socketpair"), "")
		if flags&unix.SOCK_NONBLOCK != 0 {
			f.SetFlags(f.Flags() | unix.O_NONBLOCK)
		}
		fd, err := t.install(f, 0, flags&unix.SOCK_CLOEXEC != 0)
		if err != nil {
			if i == 1 {
				t.p.fds.Close(out[0])
			} else {
				unix.Close(fds[1])
			}
			return 0, err
		}
		out[i] = int(fd)
	}
	var b [8]byte
	le.PutUint32(b[0:], uint32(out[0]))
	le.PutUint32(b[4:], uint32(out[1]))
	if err := t.p.k.svc.CopyOut(t.p.as, a[3], b[:]); err != nil {
		t.p.fds.Close(out[0])
		t.p.fds.Close(out[1])
		return 0, err
	}
	return 0, nil
}

// socket returns the File of a tenant socket, or ENOTSOCK.
func (t *Task) socket(fd uint64) (*vfs.File, error) {
	f, err := t.file(fd)
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK || f.HostFd() < 0 {
		f.DecRef()
		return nil, unix.ENOTSOCK
	}
	return f, nil
}

// sendFlags are the send and recv flags served.
const sendFlags = unix.MSG_DONTWAIT | unix.MSG_NOSIGNAL | unix.MSG_PEEK | unix.MSG_WAITALL | unix.MSG_TRUNC

// sockIO sends or receives one buffer: non-blocking on the host, waiting without the vCPU when
// the tenant's call may block.
func (t *Task) sockIO(f *vfs.File, buf []byte, flags int, send bool) (int, error) {
	if flags&^sendFlags != 0 {
		return 0, unix.EOPNOTSUPP
	}
	nonblock := flags&unix.MSG_DONTWAIT != 0 || f.Flags()&unix.O_NONBLOCK != 0
	hostFlags := flags&^unix.MSG_WAITALL | unix.MSG_DONTWAIT | unix.MSG_NOSIGNAL
	for {
		var n int
		var err error
		if send {
			err = unix.Sendto(f.HostFd(), buf, hostFlags, nil)
			if err == nil {
				n = len(buf)
			}
		} else {
			n, _, err = unix.Recvfrom(f.HostFd(), buf, hostFlags)
		}
		if !errors.Is(err, unix.EAGAIN) || nonblock {
			if send && errors.Is(err, unix.EPIPE) && flags&unix.MSG_NOSIGNAL == 0 {
				t.signalThread(unix.SIGPIPE)
			}
			return n, err
		}
		events := int16(unix.POLLIN)
		if send {
			events = unix.POLLOUT
		}
		if err := t.waitReady(f, events); err != nil {
			return 0, err
		}
	}
}

// sendto(fd, buf, len, flags, addr, addrlen): a connected pair takes no address.
func sysSendto(t *Task, a sysargs) (uint64, error) {
	if a[4] != 0 {
		return 0, unix.EISCONN
	}
	f, err := t.socket(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	buf := make([]byte, min(a[2], bounceMax))
	if err := t.p.k.svc.CopyIn(t.p.as, buf, a[1]); err != nil {
		return 0, err
	}
	n, err := t.sockIO(f, buf, int(a[3]), true)
	return uint64(n), err
}

// recvfrom(fd, buf, len, flags, addr, addrlen): the peer of a pair is unnamed.
func sysRecvfrom(t *Task, a sysargs) (uint64, error) {
	f, err := t.socket(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	buf := make([]byte, min(a[2], bounceMax))
	n, err := t.sockIO(f, buf, int(a[3]), false)
	if err != nil {
		return 0, err
	}
	if err := t.p.k.svc.CopyOut(t.p.as, a[1], buf[:min(n, len(buf))]); err != nil {
		return 0, err
	}
	if a[4] != 0 && a[5] != 0 {
		if err := t.unnamedAddr(a[4], a[5]); err != nil {
			return 0, err
		}
	}
	return uint64(n), nil
}

// unnamedAddr writes the address of an unnamed AF_UNIX socket: the family alone.
func (t *Task) unnamedAddr(addr, lenAddr uint64) error {
	var l [4]byte
	if err := t.p.k.svc.CopyIn(t.p.as, l[:], lenAddr); err != nil {
		return err
	}
	if le.Uint32(l[:]) >= 2 {
		var fam [2]byte
		le.PutUint16(fam[:], unix.AF_UNIX)
		if err := t.p.k.svc.CopyOut(t.p.as, addr, fam[:]); err != nil {
			return err
		}
	}
	le.PutUint32(l[:], 2)
	return t.p.k.svc.CopyOut(t.p.as, lenAddr, l[:])
}

// sendmsg and recvmsg: the iovec gathered through one buffer; names are ignored (the pair is
// connected) and control data (SCM_RIGHTS, credentials) is not served.
func sysSendmsg(t *Task, a sysargs) (uint64, error) { return msgIO(t, a, true) }
func sysRecvmsg(t *Task, a sysargs) (uint64, error) { return msgIO(t, a, false) }

func msgIO(t *Task, a sysargs, send bool) (uint64, error) {
	var hdr [56]byte // struct msghdr
	if err := t.p.k.svc.CopyIn(t.p.as, hdr[:], a[1]); err != nil {
		return 0, err
	}
	if send && le.Uint64(hdr[0:]) != 0 {
		return 0, unix.EISCONN
	}
	if le.Uint64(hdr[40:]) != 0 && send {
		return 0, unix.EOPNOTSUPP // control data
	}
	f, err := t.socket(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	bufs, err := t.iovecs(le.Uint64(hdr[16:]), le.Uint64(hdr[24:]), !send)
	if err != nil {
		return 0, err
	}
	bounce := gather(bufs, send)
	n, err := t.sockIO(f, bounce, int(a[2]), send)
	if err != nil || send {
		return uint64(n), err
	}
	scatter(bufs, bounce[:min(n, len(bounce))])
	// No name, no control data, no flags back.
	le.PutUint32(hdr[8:], 0)
	le.PutUint64(hdr[40:], 0)
	le.PutUint32(hdr[48:], 0)
	return uint64(n), t.p.k.svc.CopyOut(t.p.as, a[1], hdr[:])
}

func sysShutdown(t *Task, a sysargs) (uint64, error) {
	f, err := t.socket(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	return 0, unix.Shutdown(f.HostFd(), int(a[1]))
}

// getsockname and getpeername of an unnamed pair.
func sysGetsockname(t *Task, a sysargs) (uint64, error) {
	f, err := t.socket(a[0])
	if err != nil {
		return 0, err
	}
	f.DecRef()
	return 0, t.unnamedAddr(a[1], a[2])
}

// getsockopt and setsockopt: SOL_SOCKET options of the host socket, as they are.

// optionSocket is the socket of getsockopt(fd, level, ...) or setsockopt: only SOL_SOCKET.
func (t *Task) optionSocket(a sysargs) (*vfs.File, error) {
	f, err := t.socket(a[0])
	if err != nil {
		return nil, err
	}
	if a[1] != unix.SOL_SOCKET {
		f.DecRef()
		return nil, unix.ENOPROTOOPT
	}
	return f, nil
}

func sysGetsockopt(t *Task, a sysargs) (uint64, error) {
	f, err := t.optionSocket(a)
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	var l [4]byte
	if err := t.p.k.svc.CopyIn(t.p.as, l[:], a[4]); err != nil {
		return 0, err
	}
	v, err := unix.GetsockoptInt(f.HostFd(), unix.SOL_SOCKET, int(a[2]))
	if err != nil {
		return 0, err
	}
	if le.Uint32(l[:]) < 4 {
		return 0, unix.EINVAL
	}
	var b [4]byte
	le.PutUint32(b[:], uint32(v))
	if err := t.p.k.svc.CopyOut(t.p.as, a[3], b[:]); err != nil {
		return 0, err
	}
	le.PutUint32(l[:], 4)
	return 0, t.p.k.svc.CopyOut(t.p.as, a[4], l[:])
}

func sysSetsockopt(t *Task, a sysargs) (uint64, error) {
	f, err := t.optionSocket(a)
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	if a[4] < 4 {
		return 0, unix.EINVAL
	}
	var b [4]byte
	if err := t.p.k.svc.CopyIn(t.p.as, b[:], a[3]); err != nil {
		return 0, err
	}
	return 0, unix.SetsockoptInt(f.HostFd(), unix.SOL_SOCKET, int(a[2]), int(int32(le.Uint32(b[:]))))
}

var le = binary.LittleEndian
