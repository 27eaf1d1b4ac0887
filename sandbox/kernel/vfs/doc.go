// Package vfs is the file system layer of the kernel proper: one container's view of its rootfs,
// its mounts and the sandbox's own /dev, open file descriptions (File) and descriptor tables
// (FDTable).
//
// The tenant is hostile. This package must never turn a tenant path into a host path string: every
// host lookup is an openat2(2) relative to a mount's root directory fd with RESOLVE_IN_ROOT and
// RESOLVE_NO_MAGICLINKS, so ".." and symlinks (absolute or relative) stay inside that mount. It
// must never chown or chmod host files except on the tenant's request, and it never follows a
// symlink with a host call that lacks those resolve flags (name-only calls such as unlinkat,
// renameat2, linkat and mkdirat act on one component of an already-confined directory fd).
//
// Every error handed to the kernel wraps a unix.Errno (errors.Is(err, unix.ENOENT)), which the
// kernel returns to the tenant as -errno.
//
// Known simplifications of this first version:
//   - The mount for a path is chosen by longest prefix of the lexically cleaned absolute path, so
//     "link/.." means the directory holding "link" (as in a shell), not the parent of its target,
//     and a symlink is confined to the mount it starts in: it never crosses into another mount.
//   - /sys is not there yet (ENOENT); /dev holds null, zero, full, random, urandom and tty (ENXIO
//     on open), plus the mount points of mounts under /dev.
//   - /proc is served by the kernel through the Synthetic interface, in a per-process View (New
//     alone leaves it absent). Its files are read-only snapshots made at open; its magic links
//     (exe, fd/N) are readlink-only (ENOENT when a walk would follow them).
//   - Modes given to Open and Mkdir are applied by the host, which also applies the sandbox
//     process's umask: the kernel applies the tenant's umask and the sandbox runs with umask 0.
//   - A blocking host call (pipe or tty read) cannot be interrupted by a tenant signal yet.
package vfs
