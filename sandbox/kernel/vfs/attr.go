package vfs

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// Chown is chown(2) (follow) or lchown(2). uid or gid -1 leaves that id alone. The tenant's
// request is the only reason this package ever changes a host file's owner.
func (fs *FS) Chown(cwd, p string, uid, gid int, follow bool) error {
	if !fs.enter() {
		return unix.EBADF
	}
	defer fs.exit()
	r, err := fs.resolve(cwd, p)
	if err != nil {
		return err
	}
	res, r, err := fs.synthAt(r, follow)
	if err != nil {
		return err
	}
	if res != nil {
		return unix.EPERM
	}
	if r.m.kind == mountDev {
		if _, err := fs.dev.lookup(r); err != nil {
			return err
		}
		return unix.EROFS
	}
	fd, err := openPath(r, follow)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if r.m.ro {
		return unix.EROFS
	}
	// fchownat accepts an O_PATH fd with AT_EMPTY_PATH; it acts on exactly the opened inode.
	return unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH)
}

// Utimens is utimensat(2) on a path: ts[0] is the access time, ts[1] the modification time;
// Nsec may be UTIME_NOW or UTIME_OMIT.
func (fs *FS) Utimens(cwd, p string, ts [2]unix.Timespec, follow bool) error {
	if !fs.enter() {
		return unix.EBADF
	}
	defer fs.exit()
	r, err := fs.resolve(cwd, p)
	if err != nil {
		return err
	}
	res, r, err := fs.synthAt(r, follow)
	if err != nil {
		return err
	}
	if res != nil {
		return unix.EPERM
	}
	if r.m.kind == mountDev {
		if _, err := fs.dev.lookup(r); err != nil {
			return err
		}
		return unix.EROFS
	}
	fd, err := openPath(r, follow)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if r.m.ro {
		return unix.EROFS
	}
	err = unix.UtimesNanoAt(fd, "", ts[:], unix.AT_EMPTY_PATH)
	if err == unix.EINVAL || err == unix.ENOENT {
		// Kernels without AT_EMPTY_PATH for utimensat: go through the fd's /proc link, which
		// names exactly the opened inode (a symlink itself when !follow).
		flags := 0
		if !follow {
			flags = unix.AT_SYMLINK_NOFOLLOW
		}
		err = unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), ts[:], flags)
	}
	return err
}

// Statfs is statfs(2) on a path.
func (fs *FS) Statfs(cwd, p string) (unix.Statfs_t, error) {
	if !fs.enter() {
		return unix.Statfs_t{}, unix.EBADF
	}
	defer fs.exit()
	r, err := fs.resolve(cwd, p)
	if err != nil {
		return unix.Statfs_t{}, err
	}
	res, r, err := fs.synthAt(r, true)
	if err != nil {
		return unix.Statfs_t{}, err
	}
	if res != nil {
		return procStatfs(), nil
	}
	if r.m.kind == mountDev {
		if _, err := fs.dev.lookup(r); err != nil {
			return unix.Statfs_t{}, err
		}
		return devStatfs(), nil
	}
	fd, err := openPath(r, true)
	if err != nil {
		return unix.Statfs_t{}, err
	}
	defer unix.Close(fd)
	return hostStatfs(fd, r.m.ro)
}

func hostStatfs(fd int, ro bool) (unix.Statfs_t, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return st, err
	}
	if ro {
		st.Flags |= unix.ST_RDONLY
	}
	return st, nil
}

// devStatfs describes the synthetic /dev as a small tmpfs, as devtmpfs reports itself.
func devStatfs() unix.Statfs_t {
	return unix.Statfs_t{Type: unix.TMPFS_MAGIC, Bsize: 4096, Namelen: 255, Frsize: 4096, Flags: unix.ST_NOSUID}
}

// Statfs is fstatfs(2).
func (f *File) Statfs() (unix.Statfs_t, error) {
	if f.syn != nil {
		return procStatfs(), nil
	}
	if f.dev != nil {
		return devStatfs(), nil
	}
	return hostStatfs(f.fd, f.mount != nil && f.mount.ro)
}

// Chown is fchown(2).
func (f *File) Chown(uid, gid int) error {
	if f.syn != nil {
		return unix.EPERM
	}
	if f.dev != nil {
		return unix.EROFS
	}
	if f.mount != nil && f.mount.ro {
		return unix.EROFS
	}
	return unix.Fchownat(f.fd, "", uid, gid, unix.AT_EMPTY_PATH)
}

// Utimens is futimens(2).
func (f *File) Utimens(ts [2]unix.Timespec) error {
	if f.syn != nil {
		return unix.EPERM
	}
	if f.dev != nil {
		return unix.EROFS
	}
	if f.flags.Load()&unix.O_PATH != 0 {
		return unix.EBADF
	}
	if f.mount != nil && f.mount.ro {
		return unix.EROFS
	}
	err := unix.UtimesNanoAt(f.fd, "", ts[:], unix.AT_EMPTY_PATH)
	if err == unix.EINVAL || err == unix.ENOENT {
		err = unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(f.fd), ts[:], 0)
	}
	return err
}

// Fallocate is fallocate(2).
func (f *File) Fallocate(mode uint32, off, length int64) error {
	if f.dev != nil || f.syn != nil {
		return unix.ENODEV
	}
	if f.mount != nil && f.mount.ro {
		return unix.EROFS
	}
	return ignoreEINTR(func() error { return unix.Fallocate(f.fd, mode, off, length) })
}

// Sync is sync(2) for the container: syncfs(2) of each of its mounts' host file systems (not
// the whole host's).
func (fs *FS) Sync() {
	if !fs.enter() {
		return
	}
	defer fs.exit()
	for _, m := range fs.mounts {
		if m.kind != mountHost {
			continue
		}
		// The mount's fd is O_PATH, which syncfs refuses: a readable one to the same root.
		fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(m.fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		unix.Syncfs(fd)
		unix.Close(fd)
	}
}

// Syncfs is syncfs(2): the file system holding f. The sandbox's own files have nothing to sync.
func (f *File) Syncfs() error {
	if f.fd < 0 || f.syn != nil || f.dev != nil || f.anon != nil {
		return nil
	}
	if f.flags.Load()&unix.O_PATH != 0 {
		return unix.EBADF
	}
	return unix.Syncfs(f.fd)
}
