package kernel

import (
	"golang.org/x/sys/unix"
)

// Sessions and process groups. A container's first process (and every process exec'd into a
// running container) starts a session of its own, as after setsid; fork inherits the session and
// the group. The ids live in Process.sid and Process.pgid, guarded by k.mu. There are no
// controlling terminals: setsid detaches from nothing, and no SIGHUP comes when a session leader
// exits. Orphaned process groups are kept as POSIX says: a group whose last link to a parent in
// another group of the same session goes, and that has a stopped member, gets SIGHUP then SIGCONT.

// markExeced records that the process called execve (after its fork): its parent may no longer
// move it to another group.
func (p *Process) markExeced() {
	p.k.mu.Lock()
	p.execed = true
	p.k.mu.Unlock()
}

// setsid(): a new session and group led by the caller, unless a group has the caller's pid as its
// id already (the caller leads one): EPERM.
func sysSetsid(t *Task, a sysargs) (uint64, error) {
	p, k := t.p, t.p.k
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.groupExists(p.pid) {
		return 0, unix.EPERM
	}
	p.sid, p.pgid = p.pid, p.pid
	return uint64(p.pid), nil
}

// getsid(pid): the session of the caller (0) or of a process.
func sysGetsid(t *Task, a sysargs) (uint64, error) {
	pid := int(int32(a[0]))
	target := t.p
	if pid != 0 {
		if target = t.p.k.lookup(pid); target == nil || target.c != t.p.c {
			return 0, unix.ESRCH
		}
	}
	t.p.k.mu.Lock()
	defer t.p.k.mu.Unlock()
	return uint64(target.sid), nil
}

// setpgid(pid, pgid) with Linux's rules: the caller or one of its children (ESRCH otherwise); a
// child in another session (EPERM) or that has exec'd (EACCES) stays where it is; a session
// leader cannot move (EPERM); the group joined must be the target's own new one or an existing
// group of the caller's session (EPERM).
func sysSetpgid(t *Task, a sysargs) (uint64, error) {
	p, k := t.p, t.p.k
	pid, pgid := int(int32(a[0])), int(int32(a[1]))
	if pid == 0 {
		pid = p.pid
	}
	if pgid == 0 {
		pgid = pid
	}
	if pgid < 0 {
		return 0, unix.EINVAL
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	target := p
	if pid != p.pid {
		if target = p.children[pid]; target == nil || target.zombie {
			return 0, unix.ESRCH
		}
		if target.sid != p.sid {
			return 0, unix.EPERM
		}
		if target.execed {
			return 0, unix.EACCES
		}
	}
	if target.sid == target.pid {
		return 0, unix.EPERM
	}
	if pgid != target.pid && !k.groupInSession(pgid, p.sid) {
		return 0, unix.EPERM
	}
	target.pgid = pgid
	return 0, nil
}

// groupExists reports whether a live process has pgid as its group. The caller holds k.mu.
func (k *Kernel) groupExists(pgid int) bool {
	for _, q := range k.procs {
		if q.pgid == pgid {
			return true
		}
	}
	return false
}

// groupInSession reports whether group pgid exists in session sid. The caller holds k.mu.
func (k *Kernel) groupInSession(pgid, sid int) bool {
	for _, q := range k.procs {
		if q.pgid == pgid && q.sid == sid {
			return true
		}
	}
	return false
}

// orphanedLocked reports whether group pgid of container c is orphaned: no live member has a
// parent in another group of the same session. (Exited processes are out of k.procs already.)
// The caller holds k.mu.
func (k *Kernel) orphanedLocked(c *container, pgid int) bool {
	for _, q := range k.procs {
		if q.c == c && q.pgid == pgid && q.parent != nil && q.parent.pgid != pgid && q.parent.sid == q.sid {
			return false
		}
	}
	return true
}

// stoppedMembers lists the members of group pgid of container c when one of them is stopped,
// else nothing. The caller holds k.mu (a process's job lock nests inside it).
func (k *Kernel) stoppedMembers(c *container, pgid int) []*Process {
	var members []*Process
	stopped := false
	for _, q := range k.procs {
		if q.c == c && q.pgid == pgid {
			members = append(members, q)
			stopped = stopped || q.isStopped()
		}
	}
	if !stopped {
		return nil
	}
	return members
}

// hupOrphanedPgrps runs after p exited (out of k.procs) and its children moved to the container's
// init: a group that this orphaned, and that has a stopped member, gets SIGHUP then SIGCONT, as
// Linux does at exit. That is p's own group when p was its last link to a parent outside it (p's
// parent, in another group of the same session), and the group of each moved child that p,
// in another group of the same session, linked.
func (k *Kernel) hupOrphanedPgrps(p, parent *Process, moved []*Process) {
	k.mu.Lock()
	seen := map[int]bool{}
	var groups [][]*Process
	check := func(pgid int) {
		if seen[pgid] {
			return
		}
		seen[pgid] = true
		if k.orphanedLocked(p.c, pgid) {
			if m := k.stoppedMembers(p.c, pgid); m != nil {
				groups = append(groups, m)
			}
		}
	}
	if parent != nil && parent.pgid != p.pgid && parent.sid == p.sid {
		check(p.pgid)
	}
	for _, ch := range moved {
		if !ch.zombie && ch.pgid != p.pgid && ch.sid == p.sid {
			check(ch.pgid)
		}
	}
	k.mu.Unlock()
	for _, members := range groups {
		for _, q := range members {
			q.Signal(unix.SIGHUP)
		}
		for _, q := range members {
			q.Signal(unix.SIGCONT)
		}
	}
}
