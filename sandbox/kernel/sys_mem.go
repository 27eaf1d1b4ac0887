package kernel

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/endovisor/endo/memgrant"
	"golang.org/x/sys/unix"
)

const protKnown = unix.PROT_READ | unix.PROT_WRITE | unix.PROT_EXEC

func sysMmap(t *Task, a sysargs) (uint64, error) {
	addr, length, prot, flags, fd, off := a[0], a[1], a[2], a[3], a[4], a[5]
	if length == 0 || off%memgrant.PageSize != 0 || prot&^(protKnown|unix.PROT_GROWSDOWN|unix.PROT_GROWSUP) != 0 {
		return 0, unix.EINVAL
	}
	var mf memgrant.MapFlags
	switch flags & unix.MAP_TYPE {
	case unix.MAP_PRIVATE, unix.MAP_SHARED, unix.MAP_SHARED_VALIDATE:
	default:
		return 0, unix.EINVAL
	}
	shared := flags&unix.MAP_TYPE != unix.MAP_PRIVATE
	if flags&unix.MAP_FIXED != 0 {
		mf |= memgrant.MapFixed
	}
	if flags&unix.MAP_FIXED_NOREPLACE != 0 {
		mf |= memgrant.MapFixedNoReplace
	}
	if flags&unix.MAP_GROWSDOWN != 0 {
		mf |= memgrant.MapGrowsDown
	}
	if flags&unix.MAP_NORESERVE != 0 {
		mf |= memgrant.MapNoReserve
	}
	if flags&unix.MAP_STACK != 0 && length > stackEager {
		// A thread's stack (8 MiB from glibc, mapped PROT_NONE and then opened with mprotect)
		// is populated at first touch, as the main stack below its top: populated at once,
		// each thread held 8 MiB of the grant. Its faults fill a little at a time (memgrant's
		// stack window).
		mf |= memgrant.MapNoReserve | memgrant.MapStack
	}
	if shared && flags&unix.MAP_ANONYMOUS != 0 {
		mf |= memgrant.MapShared // the same frames in every process that inherits it
	}
	mprot := memgrant.Prot(prot & protKnown)
	var fill memgrant.FillFunc
	name := ""
	if flags&unix.MAP_ANONYMOUS == 0 {
		f, err := t.file(fd)
		if err != nil {
			return 0, err
		}
		defer f.DecRef()
		if f.Flags()&unix.O_ACCMODE == unix.O_WRONLY {
			return 0, unix.EACCES
		}
		st, err := f.Stat()
		if err != nil {
			return 0, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return 0, unix.ENODEV
		}
		if shared && prot&unix.PROT_WRITE != 0 {
			// Writes would have to reach the file: not there yet.
			t.p.k.cfg.Log("pid %d: writable shared file mappings are not supported", t.p.pid)
			return 0, fmt.Errorf("shared writable file mapping: %w", unix.ENODEV)
		}
		name = f.Path()
		fill = func(o uint64, dst []byte) error {
			_, err := f.Pread(dst, int64(off+o))
			return err
		}
		// Cached code is cached for one address (see mapSegment): it needs a fixed one.
		cacheable := mprot&memgrant.ProtExec == 0 || mf&memgrant.MapFixed != 0
		if key, ok := keyOf(f, off, length); ok && cacheable && int64(length) <= t.p.k.pages.budget {
			// Cached pages, copied into the mapping or shared by it: fill is used now only.
			return t.p.k.pages.mapSegment(t.p.k, t.p.as, addr, length, mprot, mf, name, key, fill)
		}
		if f.HostFd() < 0 {
			// The sandbox's own files are small: Map copies them now, while f is held.
			return t.p.k.svc.Map(t.p.as, addr, length, mprot, mf, name, fill)
		}
		// A mapping too big for the cache is lazy: its fill runs at faults, long after f is
		// closed, so it reads through a descriptor of its own (closed when the mapping and
		// its fill are gone and collected).
		hf, err := unix.FcntlInt(uintptr(f.HostFd()), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return 0, fmt.Errorf("mmap %s: %w", name, err)
		}
		own := os.NewFile(uintptr(hf), name)
		fill = func(o uint64, dst []byte) error {
			_, err := own.ReadAt(dst, int64(off+o))
			if err == io.EOF {
				err = nil // past the end of the file: zeros, as on Linux
			}
			return err
		}
	}
	at, err := t.p.k.svc.Map(t.p.as, addr, length, mprot, mf, name, fill)
	if errors.Is(err, memgrant.ErrExhausted) && fill == nil && mf&memgrant.MapNoReserve == 0 {
		// Like Linux's overcommit: the mapping is granted, its pages come on first touch, and
		// a touch the grant cannot serve is the OOM kill (see Task.fault).
		at, err = t.p.k.svc.Map(t.p.as, addr, length, mprot, mf|memgrant.MapNoReserve, name, fill)
	}
	if err != nil {
		return 0, err
	}
	return at, nil
}

func sysMunmap(t *Task, a sysargs) (uint64, error) {
	if a[0]%memgrant.PageSize != 0 || a[1] == 0 {
		return 0, unix.EINVAL
	}
	return 0, t.p.k.svc.Unmap(t.p.as, a[0], pageUp(a[1]))
}

func sysMprotect(t *Task, a sysargs) (uint64, error) {
	if a[0]%memgrant.PageSize != 0 || a[2]&^(protKnown|unix.PROT_GROWSDOWN|unix.PROT_GROWSUP) != 0 {
		return 0, unix.EINVAL
	}
	if a[1] == 0 {
		return 0, nil
	}
	return 0, t.p.k.svc.Protect(t.p.as, a[0], pageUp(a[1]), memgrant.Prot(a[2]&protKnown))
}

// brk grows or shrinks the heap above the program; like Linux it returns the old break when it
// cannot move it.
func sysBrk(t *Task, a sysargs) (uint64, error) {
	p := t.p
	p.mu.Lock()
	defer p.mu.Unlock()
	want := a[0]
	if want < p.brkStart || want > p.brkStart+(1<<40) {
		return p.brk, nil
	}
	oldTop, newTop := pageUp(p.brk), pageUp(want)
	switch {
	case newTop > oldTop:
		if _, err := p.k.svc.Map(p.as, oldTop, newTop-oldTop, memgrant.ProtRead|memgrant.ProtWrite,
			memgrant.MapFixedNoReplace, "[heap]", nil); err != nil {
			return p.brk, nil
		}
	case newTop < oldTop:
		if err := p.k.svc.Unmap(p.as, newTop, oldTop-newTop); err != nil {
			return p.brk, nil
		}
	}
	p.brk = want
	return want, nil
}

func sysMadvise(t *Task, a sysargs) (uint64, error) {
	addr, length, advice := a[0], a[1], a[2]
	if addr%memgrant.PageSize != 0 {
		return 0, unix.EINVAL
	}
	length = pageUp(length)
	switch advice {
	case unix.MADV_DONTNEED, unix.MADV_FREE:
		// MADV_FREE may drop the pages at once, as Linux does under pressure.
		if length == 0 {
			return 0, nil
		}
		return 0, t.p.as.Discard(addr, length)
	case unix.MADV_NORMAL, unix.MADV_RANDOM, unix.MADV_SEQUENTIAL, unix.MADV_WILLNEED,
		unix.MADV_DONTFORK, unix.MADV_DOFORK, unix.MADV_MERGEABLE, unix.MADV_UNMERGEABLE,
		unix.MADV_HUGEPAGE, unix.MADV_NOHUGEPAGE, unix.MADV_DONTDUMP, unix.MADV_DODUMP,
		unix.MADV_COLD, unix.MADV_PAGEOUT:
		// Hints: the grant maps eagerly and never swaps, so there is nothing to do.
		return 0, nil
	}
	return 0, unix.EINVAL
}

// mremap(old, oldLen, newLen, flags, newAddr).
func sysMremap(t *Task, a sysargs) (uint64, error) {
	const (
		mremapMaymove   = 1
		mremapFixed     = 2
		mremapDontunmap = 4
	)
	if a[0]%memgrant.PageSize != 0 || a[3]&^(mremapMaymove|mremapFixed|mremapDontunmap) != 0 || a[2] == 0 {
		return 0, unix.EINVAL
	}
	var f memgrant.RemapFlags
	if a[3]&mremapMaymove != 0 {
		f |= memgrant.RemapMayMove
	}
	if a[3]&mremapFixed != 0 {
		f |= memgrant.RemapFixed
	}
	if a[3]&mremapDontunmap != 0 {
		f |= memgrant.RemapDontUnmap
	}
	return t.p.as.Remap(a[0], pageUp(a[1]), pageUp(a[2]), f, a[4])
}
