package vfs

import (
	"errors"
	"sync"

	"golang.org/x/sys/unix"
)

// DefaultFDLimit is a new table's limit (RLIMIT_NOFILE's usual soft limit).
const DefaultFDLimit = 1024

// fdEntry is one slot of a table; file nil means free.
type fdEntry struct {
	file    *File
	cloexec bool
}

// FDTable is a process's descriptor table. Threads share one; fork copies it. It is safe for
// concurrent use.
//
// References: Install and InstallAt take over one reference of the caller's (on error the caller
// keeps it); Get returns the File with a reference added, which the caller drops with DecRef when
// its call is done, so that a close on another thread cannot close the host fd under it.
type FDTable struct {
	mu    sync.Mutex
	fds   []fdEntry
	limit int
	free  int // no free slot below this index
}

// NewFDTable returns an empty table with the default limit.
func NewFDTable() *FDTable { return &FDTable{limit: DefaultFDLimit} }

// SetLimit sets the highest fd + 1 that Install may hand out (RLIMIT_NOFILE). Fds already open
// above it stay open, as in Linux.
func (t *FDTable) SetLimit(n int) {
	if n < 0 {
		n = 0
	}
	t.mu.Lock()
	t.limit = n
	t.mu.Unlock()
}

// Limit returns the current limit.
func (t *FDTable) Limit() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.limit
}

// Install puts f at the lowest free fd >= minFD and returns it: EINVAL if minFD is negative or
// not below the limit (F_DUPFD's rule), EMFILE if every fd below the limit is taken.
func (t *FDTable) Install(f *File, minFD int, cloexec bool) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if minFD < 0 || minFD >= t.limit {
		return -1, unix.EINVAL
	}
	start := max(minFD, t.free)
	fd := start
	for fd < len(t.fds) && t.fds[fd].file != nil {
		fd++
	}
	if fd >= t.limit {
		return -1, unix.EMFILE
	}
	if minFD <= t.free {
		t.free = fd + 1
	}
	t.set(fd, f, cloexec)
	return fd, nil
}

// set stores f at fd, growing the table; the lock is held.
func (t *FDTable) set(fd int, f *File, cloexec bool) {
	if fd >= len(t.fds) {
		n := max(2*len(t.fds), 16, fd+1)
		grown := make([]fdEntry, n)
		copy(grown, t.fds)
		t.fds = grown
	}
	t.fds[fd] = fdEntry{file: f, cloexec: cloexec}
}

// clear frees fd and returns what was there; the lock is held.
func (t *FDTable) clear(fd int) *File {
	f := t.fds[fd].file
	t.fds[fd] = fdEntry{}
	if fd < t.free {
		t.free = fd
	}
	return f
}

// InstallAt puts f at exactly fd with dup2 semantics: whatever was open there is closed first.
// fd must be below the limit (EBADF otherwise).
func (t *FDTable) InstallAt(fd int, f *File, cloexec bool) error {
	t.mu.Lock()
	if fd < 0 || fd >= t.limit {
		t.mu.Unlock()
		return unix.EBADF
	}
	var old *File
	if fd < len(t.fds) {
		old = t.fds[fd].file
	}
	t.set(fd, f, cloexec)
	if fd == t.free {
		t.free = fd + 1
	}
	t.mu.Unlock()
	if old != nil {
		// dup2 ignores errors from closing the old description, as Linux does.
		_ = old.DecRef()
	}
	return nil
}

// Get returns the File at fd with a reference added (the caller must DecRef it), or EBADF.
func (t *FDTable) Get(fd int) (*File, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fd < 0 || fd >= len(t.fds) || t.fds[fd].file == nil {
		return nil, unix.EBADF
	}
	f := t.fds[fd].file
	f.IncRef()
	return f, nil
}

// Close closes fd: EBADF if it is not open; otherwise the error of the last close of the host
// fd, if this was the last reference.
func (t *FDTable) Close(fd int) error {
	t.mu.Lock()
	if fd < 0 || fd >= len(t.fds) || t.fds[fd].file == nil {
		t.mu.Unlock()
		return unix.EBADF
	}
	f := t.clear(fd)
	t.mu.Unlock()
	return f.DecRef()
}

// GetCloexec reports fd's close-on-exec flag.
func (t *FDTable) GetCloexec(fd int) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fd < 0 || fd >= len(t.fds) || t.fds[fd].file == nil {
		return false, unix.EBADF
	}
	return t.fds[fd].cloexec, nil
}

// SetCloexec sets fd's close-on-exec flag.
func (t *FDTable) SetCloexec(fd int, cloexec bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fd < 0 || fd >= len(t.fds) || t.fds[fd].file == nil {
		return unix.EBADF
	}
	t.fds[fd].cloexec = cloexec
	return nil
}

// CloseOnExec closes every fd marked close-on-exec (at execve).
func (t *FDTable) CloseOnExec() {
	t.mu.Lock()
	var closing []*File
	for fd := range t.fds {
		if t.fds[fd].file != nil && t.fds[fd].cloexec {
			closing = append(closing, t.clear(fd))
		}
	}
	t.mu.Unlock()
	for _, f := range closing {
		_ = f.DecRef()
	}
}

// Fork returns a copy of the table for a child process: the same Files (shared offsets), each
// with a reference added, and the same close-on-exec flags and limit.
func (t *FDTable) Fork() *FDTable {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := &FDTable{limit: t.limit, free: t.free, fds: make([]fdEntry, len(t.fds))}
	copy(c.fds, t.fds)
	for _, e := range c.fds {
		if e.file != nil {
			e.file.IncRef()
		}
	}
	return c
}

// CloseAll closes every fd (at exit) and returns the errors of the last closes, joined.
func (t *FDTable) CloseAll() error {
	t.mu.Lock()
	var closing []*File
	for fd := range t.fds {
		if t.fds[fd].file != nil {
			closing = append(closing, t.clear(fd))
		}
	}
	t.fds = nil
	t.free = 0
	t.mu.Unlock()
	var errs []error
	for _, f := range closing {
		if err := f.DecRef(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Fds lists the open fds in increasing order (for /proc/<pid>/fd and close_range).
func (t *FDTable) Fds() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var fds []int
	for fd, e := range t.fds {
		if e.file != nil {
			fds = append(fds, fd)
		}
	}
	return fds
}
