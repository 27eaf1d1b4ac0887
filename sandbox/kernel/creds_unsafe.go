package kernel

import "unsafe"

// unsafePointer is the address of a group list handed to setgroups(2).
func unsafePointer(p *uint32) unsafe.Pointer { return unsafe.Pointer(p) }
