package shim

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/containerd/containerd/api/types"
	"golang.org/x/sys/unix"
)

// mountFlags are the mount(8) options that are flags rather than file system data.
var mountFlags = map[string]struct {
	clear bool
	flag  uintptr
}{
	"ro":          {false, unix.MS_RDONLY},
	"rw":          {true, unix.MS_RDONLY},
	"bind":        {false, unix.MS_BIND},
	"rbind":       {false, unix.MS_BIND | unix.MS_REC},
	"nosuid":      {false, unix.MS_NOSUID},
	"suid":        {true, unix.MS_NOSUID},
	"nodev":       {false, unix.MS_NODEV},
	"dev":         {true, unix.MS_NODEV},
	"noexec":      {false, unix.MS_NOEXEC},
	"exec":        {true, unix.MS_NOEXEC},
	"relatime":    {false, unix.MS_RELATIME},
	"norelatime":  {true, unix.MS_RELATIME},
	"noatime":     {false, unix.MS_NOATIME},
	"atime":       {true, unix.MS_NOATIME},
	"strictatime": {false, unix.MS_STRICTATIME},
	"sync":        {false, unix.MS_SYNCHRONOUS},
	"async":       {true, unix.MS_SYNCHRONOUS},
	"remount":     {false, unix.MS_REMOUNT},
	"defaults":    {false, 0},
}

// mountRootfs mounts containerd's snapshot mounts (overlay or bind, one normally) on target, in
// order. On error, whatever it mounted is unmounted again.
//
// containerd's core/mount.All would do this and also handle overlay lowerdir lists longer than a
// page, which this does not; moving to it needs github.com/moby/sys/mountinfo in go.sum.
func mountRootfs(ms []*types.Mount, target string) (retErr error) {
	if len(ms) == 0 {
		return nil
	}
	if err := os.MkdirAll(target, 0o711); err != nil {
		return fmt.Errorf("rootfs %s: %w", target, err)
	}
	defer func() {
		if retErr != nil {
			_ = unmountAll(target)
		}
	}()
	for _, m := range ms {
		var flags uintptr
		var data []string
		for _, o := range m.Options {
			if f, ok := mountFlags[o]; ok {
				if f.clear {
					flags &^= f.flag
				} else {
					flags |= f.flag
				}
				continue
			}
			data = append(data, o)
		}
		typ := m.Type
		if typ == "bind" || typ == "rbind" {
			flags |= unix.MS_BIND
		}
		// A bind mount ignores MS_RDONLY on the first call; read-only needs a remount.
		first := flags
		if flags&unix.MS_BIND != 0 {
			first &^= unix.MS_RDONLY
		}
		if err := unix.Mount(m.Source, target, typ, first, strings.Join(data, ",")); err != nil {
			return fmt.Errorf("mount %s (%s) on %s: %w", m.Source, m.Type, target, err)
		}
		if flags&unix.MS_BIND != 0 && flags&unix.MS_RDONLY != 0 {
			if err := unix.Mount("", target, "", flags|unix.MS_REMOUNT, ""); err != nil {
				return fmt.Errorf("remount %s read-only: %w", target, err)
			}
		}
	}
	return nil
}

// unmountAll removes every mount stacked on target (lazily: a tenant file still open must not
// keep the bundle busy). A path that is not a mount point, or does not exist, is done.
func unmountAll(target string) error {
	for range 64 {
		err := unix.Unmount(target, unix.MNT_DETACH)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		default:
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 64 unmounts", target)
}
