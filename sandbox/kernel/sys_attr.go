package kernel

import (
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"
)

// Links, modes, owners, times and file system statistics: the calls of ln, chmod, chown, touch,
// mkfifo and df. The vfs package does the work; these read the tenant's arguments.

func sysSymlink(t *Task, a sysargs) (uint64, error) { return symlinkat(t, a[0], atFDCWD, a[1]) }
func sysSymlinkat(t *Task, a sysargs) (uint64, error) {
	return symlinkat(t, a[0], a[1], a[2])
}

func symlinkat(t *Task, targetAddr, dirfd, linkAddr uint64) (uint64, error) {
	target, err := t.path(targetAddr)
	if err != nil {
		return 0, err
	}
	base, p, err := t.pathAt(dirfd, linkAddr)
	if err != nil {
		return 0, err
	}
	return 0, t.p.fs.Symlink(base, target, p)
}

func sysLink(t *Task, a sysargs) (uint64, error) { return linkat(t, atFDCWD, a[0], atFDCWD, a[1], 0) }
func sysLinkat(t *Task, a sysargs) (uint64, error) {
	return linkat(t, a[0], a[1], a[2], a[3], a[4])
}

func linkat(t *Task, olddir, oldAddr, newdir, newAddr, flags uint64) (uint64, error) {
	if flags != 0 {
		// AT_SYMLINK_FOLLOW and AT_EMPTY_PATH are not served: link(2)'s own behaviour only.
		t.p.k.countUnimplemented(unix.SYS_LINKAT)
		return 0, unix.EINVAL
	}
	from, to, err := t.pathPair(olddir, oldAddr, newdir, newAddr)
	if err != nil {
		return 0, err
	}
	return 0, t.p.fs.Link("/", from, to)
}

func sysChmod(t *Task, a sysargs) (uint64, error) { return fchmodat(t, atFDCWD, a[0], a[1]) }

// fchmodat(dirfd, path, mode): the kernel's call has no flags (glibc's fourth argument is its own).
func sysFchmodat(t *Task, a sysargs) (uint64, error) { return fchmodat(t, a[0], a[1], a[2]) }

func fchmodat(t *Task, dirfd, addr, mode uint64) (uint64, error) {
	base, p, err := t.pathAt(dirfd, addr)
	if err != nil {
		return 0, err
	}
	return 0, t.p.fs.Chmod(base, p, uint32(mode)&0o7777)
}

func sysFchmod(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	return 0, f.Chmod(uint32(a[1]) & 0o7777)
}

func sysChown(t *Task, a sysargs) (uint64, error) {
	return fchownat(t, atFDCWD, a[0], a[1], a[2], 0)
}
func sysLchown(t *Task, a sysargs) (uint64, error) {
	return fchownat(t, atFDCWD, a[0], a[1], a[2], unix.AT_SYMLINK_NOFOLLOW)
}
func sysFchownat(t *Task, a sysargs) (uint64, error) {
	return fchownat(t, a[0], a[1], a[2], a[3], a[4])
}

func fchownat(t *Task, dirfd, addr, uid, gid, flags uint64) (uint64, error) {
	if flags&^(unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH) != 0 {
		return 0, unix.EINVAL
	}
	if flags&unix.AT_EMPTY_PATH != 0 {
		if p, err := t.p.k.svc.ReadString(t.p.as, addr, pathMax); err == nil && p == "" {
			return fchown(t, dirfd, uid, gid)
		}
	}
	base, p, err := t.pathAt(dirfd, addr)
	if err != nil {
		return 0, err
	}
	return 0, t.p.fs.Chown(base, p, int(int32(uid)), int(int32(gid)), flags&unix.AT_SYMLINK_NOFOLLOW == 0)
}

func sysFchown(t *Task, a sysargs) (uint64, error) { return fchown(t, a[0], a[1], a[2]) }

func fchown(t *Task, fd, uid, gid uint64) (uint64, error) {
	f, err := t.file(fd)
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	return 0, f.Chown(int(int32(uid)), int(int32(gid)))
}

// utimensat(dirfd, path, times, flags); a NULL path is futimens on dirfd, NULL times is now.
func sysUtimensat(t *Task, a sysargs) (uint64, error) {
	ts := [2]unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
	if a[2] != 0 {
		var b [32]byte
		if err := t.p.k.svc.CopyIn(t.p.as, b[:], a[2]); err != nil {
			return 0, err
		}
		for i := range ts {
			ts[i] = unix.Timespec{Sec: int64(binary.LittleEndian.Uint64(b[16*i:])), Nsec: int64(binary.LittleEndian.Uint64(b[16*i+8:]))}
			if n := ts[i].Nsec; n != unix.UTIME_NOW && n != unix.UTIME_OMIT && (n < 0 || n >= 1e9) {
				return 0, unix.EINVAL
			}
		}
	}
	flags := a[3]
	if flags&^(unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH) != 0 {
		return 0, unix.EINVAL
	}
	if a[1] == 0 {
		return 0, futimens(t, a[0], ts)
	}
	if flags&unix.AT_EMPTY_PATH != 0 {
		if p, err := t.p.k.svc.ReadString(t.p.as, a[1], pathMax); err == nil && p == "" {
			return 0, futimens(t, a[0], ts)
		}
	}
	return utimesAt(t, a[0], a[1], ts, flags&unix.AT_SYMLINK_NOFOLLOW == 0)
}

func futimens(t *Task, fd uint64, ts [2]unix.Timespec) error {
	f, err := t.file(fd)
	if err != nil {
		return err
	}
	defer f.DecRef()
	return f.Utimens(ts)
}

func utimesAt(t *Task, dirfd, addr uint64, ts [2]unix.Timespec, follow bool) (uint64, error) {
	base, p, err := t.pathAt(dirfd, addr)
	if err != nil {
		return 0, err
	}
	return 0, t.p.fs.Utimens(base, p, ts, follow)
}

// utimes(path, timeval[2]) and futimesat(dirfd, path, timeval[2]): microseconds; NULL is now.
func sysUtimes(t *Task, a sysargs) (uint64, error) { return futimesat(t, atFDCWD, a[0], a[1]) }
func sysFutimesat(t *Task, a sysargs) (uint64, error) {
	return futimesat(t, a[0], a[1], a[2])
}

func futimesat(t *Task, dirfd, addr, tvAddr uint64) (uint64, error) {
	ts := [2]unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
	if tvAddr != 0 {
		var b [32]byte
		if err := t.p.k.svc.CopyIn(t.p.as, b[:], tvAddr); err != nil {
			return 0, err
		}
		for i := range ts {
			usec := int64(binary.LittleEndian.Uint64(b[16*i+8:]))
			if usec < 0 || usec >= 1e6 {
				return 0, unix.EINVAL
			}
			ts[i] = unix.Timespec{Sec: int64(binary.LittleEndian.Uint64(b[16*i:])), Nsec: usec * 1000}
		}
	}
	return utimesAt(t, dirfd, addr, ts, true)
}

// utime(path, struct utimbuf {actime, modtime}): seconds; NULL is now.
func sysUtime(t *Task, a sysargs) (uint64, error) {
	ts := [2]unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
	if a[1] != 0 {
		var b [16]byte
		if err := t.p.k.svc.CopyIn(t.p.as, b[:], a[1]); err != nil {
			return 0, err
		}
		ts[0] = unix.Timespec{Sec: int64(binary.LittleEndian.Uint64(b[0:]))}
		ts[1] = unix.Timespec{Sec: int64(binary.LittleEndian.Uint64(b[8:]))}
	}
	return utimesAt(t, atFDCWD, a[0], ts, true)
}

func sysStatfs(t *Task, a sysargs) (uint64, error) {
	base, p, err := t.pathAt(atFDCWD, a[0])
	if err != nil {
		return 0, err
	}
	st, err := t.p.fs.Statfs(base, p)
	if err != nil {
		return 0, err
	}
	return 0, copyOutStatfs(t, a[1], &st)
}

func sysFstatfs(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	st, err := f.Statfs()
	if err != nil {
		return 0, err
	}
	return 0, copyOutStatfs(t, a[1], &st)
}

// copyOutStatfs writes a struct statfs, whose layout unix.Statfs_t has on amd64.
func copyOutStatfs(t *Task, addr uint64, st *unix.Statfs_t) error {
	return t.p.k.svc.CopyOut(t.p.as, addr, structBytes(st))
}

func sysTruncate(t *Task, a sysargs) (uint64, error) {
	if int64(a[1]) < 0 {
		return 0, unix.EINVAL
	}
	base, p, err := t.pathAt(atFDCWD, a[0])
	if err != nil {
		return 0, err
	}
	return 0, t.p.fs.Truncate(base, p, int64(a[1]))
}

func sysMknod(t *Task, a sysargs) (uint64, error) { return mknodat(t, atFDCWD, a[0], a[1], a[2]) }
func sysMknodat(t *Task, a sysargs) (uint64, error) {
	return mknodat(t, a[0], a[1], a[2], a[3])
}

func mknodat(t *Task, dirfd, addr, mode, dev uint64) (uint64, error) {
	base, p, err := t.pathAt(dirfd, addr)
	if err != nil {
		return 0, err
	}
	t.p.mu.Lock()
	umask := t.p.umask
	t.p.mu.Unlock()
	m := uint32(mode)
	return 0, t.p.fs.Mknod(base, p, m&unix.S_IFMT|m&^umask&0o7777, dev)
}

// sync and syncfs flush the container's files: its mounts' file systems on the host.
func sysSync(t *Task, a sysargs) (uint64, error) {
	t.blocking(func() { t.p.fs.Sync() })
	return 0, nil
}

func sysSyncfs(t *Task, a sysargs) (uint64, error) {
	f, err := t.file(a[0])
	if err != nil {
		return 0, err
	}
	defer f.DecRef()
	var serr error
	t.blocking(func() { serr = f.Syncfs() })
	return 0, serr
}

// sysinfo: the pod's memory as the sandbox's grant, its processes, the sandbox's uptime.
func sysSysinfo(t *Task, a sysargs) (uint64, error) {
	k := t.p.k
	total := uint64(k.grant.Size())
	free := total - min(total, uint64(k.grant.UsedBytes()))
	k.mu.Lock()
	procs := len(k.procs)
	k.mu.Unlock()
	var b [112]byte // struct sysinfo on amd64
	le := binary.LittleEndian
	le.PutUint64(b[0:], uint64(time.Since(procBoot).Seconds()))
	// loads[3] stay 0, as /proc/loadavg shows them
	le.PutUint64(b[32:], total)
	le.PutUint64(b[40:], free)
	le.PutUint16(b[80:], uint16(min(procs, 0xffff)))
	le.PutUint32(b[104:], 1) // mem_unit
	return 0, k.svc.CopyOut(t.p.as, a[0], b[:])
}

// syslog (dmesg): the kernel's log is not the tenant's to read, as without CAP_SYSLOG.
func sysSyslog(t *Task, a sysargs) (uint64, error) { return 0, unix.EPERM }
