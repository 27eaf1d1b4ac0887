package kernel

import (
	"github.com/endovisor/endo/crossing"
	"golang.org/x/sys/unix"
)

// Patched call sites. The first time a site "mov $nr, %eax; syscall" traps, the kernel rewrites
// it (crossing.Calls) so that its later calls reach the sandbox without a signal: a TrapCall,
// whose registers are all in the slot but whose FPU state stays in the stub thread. Whatever
// needs that state (a signal frame, a new FS base, a fresh FPU, a fork's copy of it) escalates:
// the thread is resumed at crossing.EscalateAddr, whose fault brings the full state, and then
// goes on where the call returns (or serves the call there, when it had not been served yet).

// escalation is a task's pending trip through crossing.EscalateAddr.
type escalation struct {
	ret  uint64 // where tenant code goes on
	redo bool   // the call is served only at the fault, with the full state
}

// fullStateCall reports calls that always need the thread's full state: their sites are left
// trapping, and from a patched site they escalate before they are served. exit and exit_group
// are among them: a stub whose process ended at a patched call must be settled (a round trip)
// before it can serve a fork, and the parent waits for that.
func fullStateCall(nr uint64) bool {
	switch nr {
	case unix.SYS_RT_SIGRETURN, unix.SYS_CLONE, unix.SYS_CLONE3, unix.SYS_FORK, unix.SYS_VFORK,
		unix.SYS_EXECVE, unix.SYS_EXECVEAT, unix.SYS_EXIT, unix.SYS_EXIT_GROUP:
		return true
	}
	return false
}

// escalate resumes the task at the escalation fault instead of where it would go on.
func (t *Task) escalate(redo bool) {
	r := t.th.Regs
	t.esc = &escalation{ret: r.Rip, redo: redo}
	r.Rip = crossing.EscalateAddr()
}

// endEscalation serves the trap that ends an escalation: normally the fault at EscalateAddr, or
// a preemption that came just before it (the registers then point there too). It reports false
// when the trap is not one: the escalation is dropped and the trap served as usual.
func (t *Task) endEscalation(tr crossing.Trap) bool {
	e := t.esc
	t.esc = nil
	r := t.th.Regs
	if r.Rip != crossing.EscalateAddr() || (tr.Kind != crossing.TrapPreempt &&
		(tr.Kind != crossing.TrapFault || tr.Signal != unix.SIGILL)) {
		return false
	}
	r.Rip = e.ret
	if e.redo {
		r.Orig_rax = r.Rax
		t.syscall()
	}
	if tr.Kind == crossing.TrapPreempt {
		t.yield()
	}
	return true
}

// patchedCallFault serves a SIGILL at the sixth byte of a patched site (0x06): a thread that ran
// the site's mov before the site was patched, a restarted call (the restart backs up two bytes
// onto where the syscall instruction was), or a jump to that instruction. rax holds the number.
func (t *Task) patchedCallFault(tr crossing.Trap) bool {
	r := t.th.Regs
	if t.p.k.calls == nil || tr.Signal != unix.SIGILL || r.Rip < 5 || r.Rip >= crossing.TenantMax {
		return false
	}
	var code [crossing.SiteLen]byte
	if t.p.k.svc.CopyIn(t.p.as, code[:], r.Rip-5) != nil {
		return false
	}
	if _, ok := t.p.k.calls.Patched(code[:], r.Rip+2); !ok {
		return false
	}
	r.Rip += 2
	r.Orig_rax = r.Rax
	t.syscall()
	return true
}

// updateSingle tells the stub whether patched call sites may enter the sandbox without a signal:
// only while thread 0 runs the process's only task (crossing.Stub.SetSingle).
func (p *Process) updateSingle() {
	if p.stub == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stub.SetSingle(p.threading == 0 && len(p.tasks) == 1 && p.tasks[0].th.Index() == 0)
}

// patchSite rewrites the site of the call the task trapped on, if it is one that can be: ret is
// the address after its syscall instruction.
func (t *Task) patchSite(ret uint64) {
	k := t.p.k
	nr := t.th.Regs.Orig_rax
	if k.calls == nil || fullStateCall(nr) || ret < crossing.SiteLen+1 || ret >= crossing.TenantMax {
		return
	}
	var b [crossing.SiteLen + 1]byte
	if k.svc.CopyIn(t.p.as, b[:], ret-uint64(len(b))) != nil || !crossing.Unpatched(b[0], b[1:], nr) {
		return
	}
	code, err := k.calls.Site(ret, uint32(nr))
	if err != nil {
		return // the table is full: the site goes on trapping
	}
	if k.svc.PatchText(t.p.as, ret-crossing.SiteLen, b[1:], code[:]) == nil {
		k.patched.Add(1)
	}
}
