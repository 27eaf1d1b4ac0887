package vfs

import (
	"sync"

	"golang.org/x/sys/unix"
)

// Anonymous files (an epoll set, an eventfd) are host objects the kernel makes for the tenant,
// with no path: the tenant sees "anon_inode:[name]" in /proc/<pid>/fd. The kernel keeps its own
// state for them (an epoll set's interest list) in Private.
//
// An epoll set must drop a file when the file's open description goes, as Linux does, without
// holding it open meanwhile (a pipe's write end in a set must still give its reader EOF once the
// tenant closes it). Release watchers are how it learns: they run when the File's last reference
// goes, while its host fd is still open.

// anonFile is what an anonymous File carries besides its host fd.
type anonFile struct {
	mayBlock bool // reads or writes may wait (an eventfd), so the kernel waits without its vCPU
	private  any
}

// ReleaseWatcher is told when a File it watches is released.
type ReleaseWatcher interface {
	// FileReleased runs once, when f's last reference is dropped, before its host fd closes. It
	// must not drop a reference of f (it has none left) nor block.
	FileReleased(f *File)
}

// releaseWatch is a File's set of release watchers.
type releaseWatch struct {
	mu       sync.Mutex
	released bool
	watchers map[ReleaseWatcher]int // watcher → how many times it watches
}

// AnonFile wraps host fd (which it takes over) as an anonymous file named "anon_inode:[name]";
// tenantFlags is what F_GETFL reports. mayBlock says whether reads or writes may wait for another
// party; private is the kernel's state for the file (see Private).
func AnonFile(fd int, name string, tenantFlags int, mayBlock bool, private any) *File {
	hostFlags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	f := &File{fd: fd, path: "anon_inode:[" + name + "]", anon: &anonFile{mayBlock: mayBlock, private: private},
		hostNB: err == nil && hostFlags&unix.O_NONBLOCK != 0}
	f.flags.Store(int32(tenantFlags))
	f.refs.Store(1)
	return f
}

// Private returns the kernel's state of an anonymous file, or nil.
func (f *File) Private() any {
	if f.anon == nil {
		return nil
	}
	return f.anon.private
}

// IsRegular reports whether the File is a host regular file.
func (f *File) IsRegular() bool { return f.fd >= 0 && f.fileType() == unix.S_IFREG }

// Watch adds w to the File's release watchers (once per call: Unwatch as often as Watch). It
// reports false when the File is released already; w is then not added.
func (f *File) Watch(w ReleaseWatcher) bool {
	f.rel.mu.Lock()
	defer f.rel.mu.Unlock()
	if f.rel.released {
		return false
	}
	if f.rel.watchers == nil {
		f.rel.watchers = map[ReleaseWatcher]int{}
	}
	f.rel.watchers[w]++
	return true
}

// Unwatch undoes one Watch of w.
func (f *File) Unwatch(w ReleaseWatcher) {
	f.rel.mu.Lock()
	defer f.rel.mu.Unlock()
	if n := f.rel.watchers[w]; n > 1 {
		f.rel.watchers[w] = n - 1
	} else {
		delete(f.rel.watchers, w)
	}
}

// fireRelease tells the watchers that f is released; DecRef calls it once, before the host fd
// closes. The watchers run without the lock, so that they may Unwatch other files.
func (f *File) fireRelease() {
	f.rel.mu.Lock()
	f.rel.released = true
	ws := f.rel.watchers
	f.rel.watchers = nil
	f.rel.mu.Unlock()
	for w := range ws {
		w.FileReleased(f)
	}
}
