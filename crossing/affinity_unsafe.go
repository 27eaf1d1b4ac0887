package crossing

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// CurrentCPU is the host CPU the calling thread runs on now (Anywhere if the host will not say).
func CurrentCPU() int {
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return Anywhere
	}
	return int(cpu)
}
