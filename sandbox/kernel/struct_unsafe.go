package kernel

import "unsafe"

// structBytes is the memory of a plain struct of the host's ABI (a timespec, an itimerspec, a
// statfs), which is the tenant's too: the bytes a system call copies in or out.
func structBytes[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}
