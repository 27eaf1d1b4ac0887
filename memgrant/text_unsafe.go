package memgrant

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// cas128 is LOCK CMPXCHG16B on the 16-byte aligned word at p: the low quadword first.
//
//go:noescape
func cas128(p *uint64, old0, old1, new0, new1 uint64) bool

// swapBlock replaces the bytes of block (8 or 16 bytes, aligned in the sandbox's mapping of the
// memory file) by the same bytes with want in place of have at off, in one atomic store: a thread
// that executes them sees the old or the new instruction, never a mix. It reports false if the
// bytes are no longer have.
func swapBlock(block []byte, off int, have, want []byte) bool {
	next := append([]byte(nil), block...)
	cur := append([]byte(nil), block...)
	copy(cur[off:], have)
	copy(next[off:], want)
	p := (*uint64)(unsafe.Pointer(&block[0]))
	if len(block) == 8 {
		return atomic.CompareAndSwapUint64(p, binary.LittleEndian.Uint64(cur), binary.LittleEndian.Uint64(next))
	}
	return cas128(p, binary.LittleEndian.Uint64(cur), binary.LittleEndian.Uint64(cur[8:]),
		binary.LittleEndian.Uint64(next), binary.LittleEndian.Uint64(next[8:]))
}
