package memgrant

import (
	"golang.org/x/sys/unix"
)

// PatchText replaces the bytes old at addr by new (as long) in the frame that backs addr, in one
// atomic store, so that a thread executing them sees one version or the other. The bytes must
// lie in one aligned 16-byte block, in private memory that is executable and not writable (tenant
// code): the frame may be shared with other address spaces that map the same code at the same
// place (the page cache), and all of them see the change. It fails with EAGAIN if the bytes are
// no longer old.
func (as *AddressSpace) PatchText(addr uint64, old, new []byte) error {
	if len(old) != len(new) || len(old) == 0 || len(old) > 16 {
		return errf(unix.EINVAL, "patch %d bytes for %d at %#x", len(new), len(old), addr)
	}
	blockLen := uint64(16)
	if addr&^7 == (addr+uint64(len(old))-1)&^7 {
		blockLen = 8
	}
	start := addr &^ (blockLen - 1)
	if addr+uint64(len(old)) > start+blockLen {
		return errf(unix.EINVAL, "patch at %#x: %d bytes cross a 16-byte block", addr, len(old))
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if err := as.usable(); err != nil {
		return err
	}
	_, v := as.find(addr)
	if v == nil {
		return errf(unix.EFAULT, "patch at %#x: not mapped", addr)
	}
	if v.prot&ProtExec == 0 || v.prot&ProtWrite != 0 || v.flags&MapShared != 0 || v.obj != nil {
		return errf(unix.EPERM, "patch at %#x: not private read-only code (%v)", addr, v.prot)
	}
	p := as.pt.get(addr &^ (PageSize - 1))
	if !p.present() {
		return errf(unix.EFAULT, "patch at %#x: page not present", addr)
	}
	page := as.g.FrameBytes(p.frame)
	off := start & (PageSize - 1)
	if !swapBlock(page[off:off+blockLen], int(addr-start), old, new) {
		return errf(unix.EAGAIN, "patch at %#x: the code changed", addr)
	}
	return nil
}
