package kernel

import (
	"container/list"
	"sync"

	"github.com/endovisor/endo/memgrant"
	"github.com/endovisor/endo/sandbox/kernel/vfs"
	"golang.org/x/sys/unix"
)

// pageCache keeps the pages of files as programs map them (ELF segments, mmap of a library),
// so that a program that runs again (each command of a shell script, each fork+exec of a
// server) maps the same frames copy-on-write instead of reading its file into fresh ones. Entries
// are keyed by the file's identity and change times, so a rewritten file is read anew. The
// cache holds at most its budget, the least recently used entries going first, and all of
// it goes when the grant runs short: it is memory of the pod, like Linux's page cache.
type pageCache struct {
	mu      sync.Mutex
	budget  int64
	bytes   int64
	entries map[segmentKey]*list.Element
	lru     list.List // of *cachedSegment, most recently used first
}

type segmentKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
	off, length  uint64
	code         uint64 // for executable mappings, their address: see mapSegment
}

type cachedSegment struct {
	key   segmentKey
	pages *memgrant.Pages
}

// pageCacheBudget is the most a sandbox keeps cached: an eighth of its memory, at most 64 MiB.
func pageCacheBudget(memory int64) int64 { return min(memory/8, 64<<20) }

// keyOf names the length bytes at off of file f as they are now. Only files of the host
// (the rootfs and mounts) are cached: the sandbox's own (/proc) change under one identity.
func keyOf(f *vfs.File, off, length uint64) (segmentKey, bool) {
	if f.HostFd() < 0 {
		return segmentKey{}, false
	}
	st, err := f.Stat()
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return segmentKey{}, false
	}
	return segmentKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim, off: off, length: length}, true
}

// mapSegment maps length bytes of as at addr (flags as for Map) privately from the cached
// pages of key, reading them with fill first when they are not cached.
//
// Executable pages are cached apart, per address: patched call sites (calls.go) are written into
// the cached frames and jump back to absolute addresses, so only mappings of the same code at the
// same place may share them, and no data mapping of the file sees the patches.
func (c *pageCache) mapSegment(k *Kernel, as *memgrant.AddressSpace, addr, length uint64, prot memgrant.Prot, flags memgrant.MapFlags, name string, key segmentKey, fill memgrant.FillFunc) (uint64, error) {
	if prot&memgrant.ProtExec != 0 {
		key.code = addr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var seg *cachedSegment
	if e, ok := c.entries[key]; ok {
		c.lru.MoveToFront(e)
		seg = e.Value.(*cachedSegment)
	} else {
		pages, err := k.grant.NewPages(key.length, fill)
		if err != nil {
			return 0, err
		}
		seg = &cachedSegment{key: key, pages: pages}
		if c.entries == nil {
			c.entries = make(map[segmentKey]*list.Element)
		}
		c.entries[key] = c.lru.PushFront(seg)
		c.bytes += pages.Bytes()
	}
	// The mapping holds the pages now: evicting them below only drops the cache's hold.
	at, err := k.svc.MapPages(as, addr, length, prot, flags, name, seg.pages)
	for c.bytes > c.budget && c.lru.Len() > 0 {
		c.evict(c.lru.Back())
	}
	return at, err
}

// evict drops one entry (c.mu held).
func (c *pageCache) evict(e *list.Element) {
	seg := c.lru.Remove(e).(*cachedSegment)
	delete(c.entries, seg.key)
	c.bytes -= seg.pages.Bytes()
	seg.pages.Release()
}

// drop empties the cache: memory is short, or the sandbox is closing.
func (c *pageCache) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.lru.Len() > 0 {
		c.evict(c.lru.Back())
	}
}
