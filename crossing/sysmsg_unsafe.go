package crossing

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The sysmsg file is shared with the stub: these views point into the sandbox's mapping of it.
// Words the two sides hand over are touched only through sync/atomic.

func (s *Stub) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.sysmsg[off])) }
func (s *Stub) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.sysmsg[off])) }

func (s *Stub) regsAt(off int) *unix.PtraceRegs {
	return (*unix.PtraceRegs)(unsafe.Pointer(&s.sysmsg[off]))
}
