package crossing

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Offsets in struct seccomp_data.
const (
	seccompNr     = 0
	seccompArch   = 4
	seccompIPLo   = 8
	seccompIPHi   = 12
	seccompArgsLo = 16 // + 8*i
)

const (
	auditArchX86_64 = 0xc000003e
	x32SyscallBit   = 0x40000000
)

// filterBuilder assembles a seccomp program with symbolic jump targets: x/net/bpf takes
// relative skips, which are easy to get wrong by hand.
type filterBuilder struct {
	insns  []bpf.Instruction
	jumps  map[int][2]string // index of a JumpIf → labels for true and false ("" = next)
	labels map[string]int
}

func newFilterBuilder() *filterBuilder {
	return &filterBuilder{jumps: map[int][2]string{}, labels: map[string]int{}}
}

func (b *filterBuilder) load(off uint32) {
	b.insns = append(b.insns, bpf.LoadAbsolute{Off: off, Size: 4})
}

func (b *filterBuilder) jump(cond bpf.JumpTest, val uint32, ifTrue, ifFalse string) {
	b.jumps[len(b.insns)] = [2]string{ifTrue, ifFalse}
	b.insns = append(b.insns, bpf.JumpIf{Cond: cond, Val: val})
}

func (b *filterBuilder) ret(action uint32) { b.insns = append(b.insns, bpf.RetConstant{Val: action}) }

func (b *filterBuilder) label(name string) { b.labels[name] = len(b.insns) }

// Every program starts and ends the same way: labels "kill", "trap" and "allow" are defined here.
func (b *filterBuilder) finish() ([]bpf.RawInstruction, error) {
	b.label("kill")
	b.ret(unix.SECCOMP_RET_KILL_PROCESS)
	b.label("trap")
	b.ret(unix.SECCOMP_RET_TRAP)
	b.label("allow")
	b.ret(unix.SECCOMP_RET_ALLOW)
	for i, targets := range b.jumps {
		j := b.insns[i].(bpf.JumpIf)
		for k, name := range targets {
			skip := 0
			if name != "" {
				at, ok := b.labels[name]
				if !ok {
					return nil, fmt.Errorf("seccomp filter: no label %q", name)
				}
				skip = at - i - 1
			}
			if skip < 0 || skip > 255 {
				return nil, fmt.Errorf("seccomp filter: jump from %d to %q out of range", i, name)
			}
			if k == 0 {
				j.SkipTrue = uint8(skip)
			} else {
				j.SkipFalse = uint8(skip)
			}
		}
		b.insns[i] = j
	}
	return bpf.Assemble(b.insns)
}

// checkArch kills any call that is not a native x86-64 one (int 0x80 and x32 numbers included).
func (b *filterBuilder) checkArch() {
	b.load(seccompArch)
	b.jump(bpf.JumpEqual, auditArchX86_64, "", "kill")
	b.load(seccompNr)
	b.jump(bpf.JumpGreaterOrEqual, x32SyscallBit, "kill", "")
}

// checkIP jumps to outside unless the instruction pointer (the address after the syscall
// instruction) lies in (text.Start, text.End].
func (b *filterBuilder) checkIP(text Range, outside string) {
	b.load(seccompIPHi)
	b.jump(bpf.JumpEqual, uint32(text.Start>>32), "", outside)
	b.load(seccompIPLo)
	b.jump(bpf.JumpGreaterThan, uint32(text.Start), "", outside)
	b.jump(bpf.JumpGreaterThan, uint32(text.End), outside, "")
}

// archPrctlSetFS is the "arch_prctl" label: only ARCH_SET_FS, the handler's TLS change.
func (b *filterBuilder) archPrctlSetFS() {
	b.label("arch_prctl")
	b.load(argHi(0))
	b.jump(bpf.JumpEqual, 0, "", "kill")
	b.load(argLo(0))
	b.jump(bpf.JumpEqual, archSetFS, "allow", "kill")
}

func argLo(i int) uint32 { return uint32(seccompArgsLo + 8*i) }
func argHi(i int) uint32 { return uint32(seccompArgsLo + 8*i + 4) }

// Range is a half-open range of addresses.
type Range struct{ Start, End uint64 }

// tenantFilter is the filter of every tenant thread: any call from outside the stub's text traps
// (SIGSYS, to the handler); from the stub's text only the handler's own calls are allowed, with
// their arguments checked; anything else kills the stub.
func tenantFilter(text Range) ([]bpf.RawInstruction, error) {
	if text.Start>>32 != text.End>>32 {
		return nil, fmt.Errorf("stub text %#x-%#x crosses a 4 GiB boundary", text.Start, text.End)
	}
	slots := Range{SysmsgBase + sysmsgThreads, SysmsgBase + sysmsgSize}
	b := newFilterBuilder()
	b.checkArch()
	b.checkIP(text, "trap")
	b.load(seccompNr)
	b.jump(bpf.JumpEqual, unix.SYS_FUTEX, "futex", "")
	b.jump(bpf.JumpEqual, unix.SYS_RT_SIGRETURN, "allow", "")
	b.jump(bpf.JumpEqual, unix.SYS_EXIT, "allow", "")
	b.jump(bpf.JumpEqual, unix.SYS_SCHED_YIELD, "allow", "") // a ring's turn (stub.c, handler)
	b.jump(bpf.JumpEqual, unix.SYS_ARCH_PRCTL, "arch_prctl", "kill")

	// futex: wait or wake, shared (no private flag), on a word in the thread slots.
	b.label("futex")
	b.load(argLo(1))
	b.jump(bpf.JumpEqual, futexOpWait, "futex_addr", "")
	b.jump(bpf.JumpEqual, futexOpWake, "futex_addr", "kill")
	b.label("futex_addr")
	b.load(argHi(0))
	b.jump(bpf.JumpEqual, uint32(slots.Start>>32), "", "kill")
	b.load(argLo(0))
	b.jump(bpf.JumpGreaterOrEqual, uint32(slots.Start), "", "kill")
	b.jump(bpf.JumpGreaterOrEqual, uint32(slots.End), "kill", "allow")

	b.archPrctlSetFS()
	return b.finish()
}

// Clone flags of the control thread's new tenant threads (see stub.c, OP_CLONE).
const cloneThreadFlags = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
	unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_CHILD_CLEARTID

// controlFilter is the control thread's filter: from the stub's text only, mmap of the grant file
// (shared, fixed, populated) below TenantMax, mprotect and munmap below TenantMax, futex, its ack
// write, clone of a tenant thread and what that thread does before it takes the tenant filter
// (its slice timer among it), and exit. The control thread only runs commands from a page the tenant cannot write; the filter
// is the second wall. Its threads inherit it under the tenant filter, so for calls from the stub's
// text it allows what the tenant filter allows too, and calls from elsewhere trap as there.
func controlFilter(text Range) ([]bpf.RawInstruction, error) {
	const addrHiMax = TenantMax>>32 - 1 // addr < that+1 <<32 and len < 4 GiB keep the end below TenantMax
	b := newFilterBuilder()
	b.checkArch()
	b.checkIP(text, "trap")
	b.load(seccompNr)
	b.jump(bpf.JumpEqual, unix.SYS_MMAP, "mmap", "")
	b.jump(bpf.JumpEqual, unix.SYS_MPROTECT, "range", "")
	b.jump(bpf.JumpEqual, unix.SYS_MUNMAP, "range", "")
	b.jump(bpf.JumpEqual, unix.SYS_FUTEX, "allow", "")
	b.jump(bpf.JumpEqual, unix.SYS_WRITE, "write", "")
	b.jump(bpf.JumpEqual, unix.SYS_CLONE, "clone", "")
	b.jump(bpf.JumpEqual, unix.SYS_SIGALTSTACK, "allow", "")
	b.jump(bpf.JumpEqual, unix.SYS_RT_SIGPROCMASK, "allow", "")
	b.jump(bpf.JumpEqual, unix.SYS_GETTID, "allow", "")
	b.jump(bpf.JumpEqual, unix.SYS_TIMER_CREATE, "allow", "")
	b.jump(bpf.JumpEqual, unix.SYS_TIMER_SETTIME, "allow", "")
	b.jump(bpf.JumpEqual, unix.SYS_SECCOMP, "allow", "")
	b.jump(bpf.JumpEqual, unix.SYS_RT_SIGRETURN, "allow", "")
	b.jump(bpf.JumpEqual, unix.SYS_ARCH_PRCTL, "arch_prctl", "")
	b.jump(bpf.JumpEqual, unix.SYS_EXIT, "allow", "")
	b.jump(bpf.JumpEqual, unix.SYS_SCHED_YIELD, "allow", "")
	b.jump(bpf.JumpEqual, unix.SYS_EXIT_GROUP, "allow", "kill")

	b.label("mmap")
	b.load(argLo(4))
	b.jump(bpf.JumpEqual, fdGrant, "", "kill")
	b.load(argLo(3))
	b.jump(bpf.JumpEqual, unix.MAP_SHARED|unix.MAP_FIXED|unix.MAP_POPULATE, "", "kill")
	b.load(argHi(3))
	b.jump(bpf.JumpEqual, 0, "range", "kill")

	b.label("range")
	b.load(argHi(0))
	b.jump(bpf.JumpGreaterThan, addrHiMax, "kill", "")
	b.load(argHi(1))
	b.jump(bpf.JumpEqual, 0, "allow", "kill")

	b.label("write")
	b.load(argLo(0))
	b.jump(bpf.JumpEqual, fdAck, "", "kill")
	b.load(argHi(0))
	b.jump(bpf.JumpEqual, 0, "allow", "kill")

	b.label("clone")
	b.load(argLo(0))
	b.jump(bpf.JumpEqual, cloneThreadFlags, "", "kill")
	b.load(argHi(0))
	b.jump(bpf.JumpEqual, 0, "", "kill")
	b.load(argLo(1)) // no stack of its own: the new thread uses none
	b.jump(bpf.JumpEqual, 0, "", "kill")
	b.load(argHi(1))
	b.jump(bpf.JumpEqual, 0, "allow", "kill")

	b.archPrctlSetFS()
	return b.finish()
}

// putFprog writes a struct sock_fprog at off in the setup page, its filter right after, with the
// pointer as the stub will see it.
func putFprog(setup []byte, fprogOff, progOff int, prog []bpf.RawInstruction) error {
	if len(prog) > setupMaxInsns {
		return fmt.Errorf("seccomp filter has %d instructions, room for %d", len(prog), setupMaxInsns)
	}
	binary.LittleEndian.PutUint16(setup[fprogOff:], uint16(len(prog)))
	binary.LittleEndian.PutUint64(setup[fprogOff+8:], uint64(SysmsgBase+sysmsgSetup+progOff))
	for i, ins := range prog {
		o := progOff + 8*i
		binary.LittleEndian.PutUint16(setup[o:], ins.Op)
		setup[o+2] = ins.Jt
		setup[o+3] = ins.Jf
		binary.LittleEndian.PutUint32(setup[o+4:], ins.K)
	}
	return nil
}
