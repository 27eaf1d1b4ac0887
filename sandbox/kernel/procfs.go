package kernel

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/endovisor/endo/memgrant"
	"github.com/endovisor/endo/sandbox/kernel/vfs"
	"golang.org/x/sys/unix"
)

// /proc is served here, from the kernel's own tables: a container sees its own processes only,
// never another container's nor the host's. The vfs package walks paths and follows the symlinks;
// procFS only answers for one name at a time.

// procView is the file system of process pid of container c: the container's mounts, and a /proc
// in which "self" is pid.
func (k *Kernel) procView(c *container, pid int) *vfs.FS {
	return c.fs.View(procFS{k: k, c: c}, pid)
}

// procFS is one container's /proc.
type procFS struct {
	k *Kernel
	c *container
}

// procBoot stands for the kernel's boot: the sandbox process starts one kernel, just before its
// first tenant, so the package's start is close enough for uptime and start times.
var procBoot = time.Now()

// clockTicks is USER_HZ, the unit of the times in stat files.
const clockTicks = 100

var procRootFiles = []string{
	"cpuinfo", "filesystems", "loadavg", "meminfo", "mounts", "self", "stat", "uptime", "version",
}

var procPidFiles = []string{
	"cmdline", "comm", "cwd", "environ", "exe", "fd", "maps", "mounts", "root", "stat", "statm", "status", "task",
}

func procDir(entries []string) vfs.SynthNode {
	return vfs.SynthNode{Mode: unix.S_IFDIR | 0o555, Entries: entries}
}

func procFile(content []byte) vfs.SynthNode {
	return vfs.SynthNode{Mode: unix.S_IFREG | 0o444, Content: content}
}

func procLink(target string) vfs.SynthNode {
	return vfs.SynthNode{Mode: unix.S_IFLNK | 0o777, Target: target}
}

// parsePid accepts a pid as Linux spells it in /proc: decimal, no sign, no leading zero.
func parsePid(s string) (int, bool) {
	if s == "" || s[0] < '1' || s[0] > '9' || len(s) > 9 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// Lookup serves one /proc name for asker.
func (pf procFS) Lookup(rel string, asker int) (vfs.SynthNode, error) {
	if rel == "" {
		return procDir(pf.rootEntries()), nil
	}
	first, rest, _ := strings.Cut(rel, "/")
	if first == "self" {
		if pf.proc(asker) == nil {
			return vfs.SynthNode{}, unix.ENOENT
		}
		if rest == "" {
			return procLink(strconv.Itoa(asker)), nil
		}
		first = strconv.Itoa(asker)
	}
	if pid, ok := parsePid(first); ok {
		p := pf.proc(pid)
		if p == nil {
			return vfs.SynthNode{}, unix.ENOENT
		}
		return pf.pidNode(p, rest, asker)
	}
	if rest != "" {
		if _, err := pf.Lookup(first, asker); err == nil {
			return vfs.SynthNode{}, unix.ENOTDIR
		}
		return vfs.SynthNode{}, unix.ENOENT
	}
	switch first {
	case "version":
		return procFile([]byte(procVersion())), nil
	case "meminfo":
		return procFile(pf.meminfo()), nil
	case "cpuinfo":
		return procFile(pf.cpuinfo()), nil
	case "uptime":
		up := time.Since(procBoot).Seconds()
		return procFile(fmt.Appendf(nil, "%.2f %.2f\n", up, up*float64(pf.k.sched.N()))), nil
	case "loadavg":
		return procFile(pf.loadavg()), nil
	case "stat":
		return procFile(pf.stat()), nil
	case "mounts":
		return procFile(pf.mounts()), nil
	case "filesystems":
		return procFile([]byte("nodev\tproc\nnodev\ttmpfs\nnodev\tdevtmpfs\n\text4\n\toverlay\n")), nil
	}
	return vfs.SynthNode{}, unix.ENOENT
}

// proc returns process pid if it lives in this container.
func (pf procFS) proc(pid int) *Process {
	pf.k.mu.Lock()
	defer pf.k.mu.Unlock()
	p := pf.k.procs[pid]
	if p == nil || p.c != pf.c {
		return nil
	}
	return p
}

// procs lists the container's live processes by pid.
func (pf procFS) procs() []*Process {
	pf.k.mu.Lock()
	var ps []*Process
	for _, p := range pf.k.procs {
		if p.c == pf.c {
			ps = append(ps, p)
		}
	}
	pf.k.mu.Unlock()
	sort.Slice(ps, func(i, j int) bool { return ps[i].pid < ps[j].pid })
	return ps
}

func (pf procFS) rootEntries() []string {
	ps := pf.procs()
	names := make([]string, 0, len(procRootFiles)+len(ps))
	names = append(names, procRootFiles...)
	for _, p := range ps {
		names = append(names, strconv.Itoa(p.pid))
	}
	return names
}

func procVersion() string {
	return fmt.Sprintf("Linux version %s (endo@endo) (go) %s\n", unameRelease, unameVersion)
}

func (pf procFS) meminfo() []byte {
	total := uint64(pf.k.grant.Size()) >> 10
	used := uint64(pf.k.grant.UsedBytes()) >> 10
	free := total - min(used, total)
	var b bytes.Buffer
	for _, kv := range []struct {
		name string
		kb   uint64
	}{
		{"MemTotal", total}, {"MemFree", free}, {"MemAvailable", free}, {"Buffers", 0},
		{"Cached", 0}, {"SwapCached", 0}, {"Active", used}, {"Inactive", 0}, {"Shmem", 0},
		{"SwapTotal", 0}, {"SwapFree", 0},
	} {
		fmt.Fprintf(&b, "%-16s%8d kB\n", kv.name+":", kv.kb)
	}
	return b.Bytes()
}

func (pf procFS) cpuinfo() []byte {
	var b bytes.Buffer
	n := pf.k.sched.N()
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "processor\t: %d\nvendor_id\t: Endo\ncpu family\t: 6\nmodel name\t: Endo vCPU\n"+
			"physical id\t: 0\nsiblings\t: %d\ncore id\t\t: %d\ncpu cores\t: %d\nflags\t\t: fpu sse sse2\n\n", i, n, i, n)
	}
	return b.Bytes()
}

func (pf procFS) loadavg() []byte {
	ps := pf.procs()
	running, tasks := 0, 0
	for _, p := range ps {
		if !lockProc(p) {
			continue
		}
		tasks += len(p.tasks)
		for _, t := range p.tasks {
			if t.inTenant.Load() != 0 {
				running++
			}
		}
		p.mu.Unlock()
	}
	pf.k.mu.Lock()
	last := pf.k.nextPid - 1
	pf.k.mu.Unlock()
	return fmt.Appendf(nil, "0.00 0.00 0.00 %d/%d %d\n", max(running, 1), tasks, last)
}

// stat is /proc/stat: procps reads btime from it to turn start times into dates.
func (pf procFS) stat() []byte {
	var b bytes.Buffer
	var cpu int64
	ps := pf.procs()
	for _, p := range ps {
		cpu += int64(p.cpuTime())
	}
	ticks := cpu / (int64(time.Second) / clockTicks)
	fmt.Fprintf(&b, "cpu  %d 0 0 0 0 0 0 0 0 0\n", ticks)
	for i := 0; i < pf.k.sched.N(); i++ {
		fmt.Fprintf(&b, "cpu%d 0 0 0 0 0 0 0 0 0 0\n", i)
	}
	fmt.Fprintf(&b, "btime %d\nprocesses %d\nprocs_running 1\nprocs_blocked 0\n", procBoot.Unix(), len(ps))
	return b.Bytes()
}

// mounts is /proc/mounts (and /proc/<pid>/mounts): the container's view.
func (pf procFS) mounts() []byte {
	var b bytes.Buffer
	// The root as a real mount of its file system's type (tools such as df skip a "rootfs"
	// line: that is the initramfs, under the real root).
	src, typ := "overlay", "overlay"
	if st, err := pf.c.fs.Statfs("/", "/"); err == nil {
		if name, ok := fsTypeNames[st.Type]; ok && name != "overlay" {
			src, typ = "none", name
		}
	}
	fmt.Fprintf(&b, "%s / %s rw 0 0\n", src, typ)
	b.WriteString("proc /proc proc rw,nosuid,nodev,noexec 0 0\n")
	b.WriteString("devtmpfs /dev devtmpfs rw,nosuid 0 0\n")
	for _, m := range pf.c.fs.Mounts() {
		opt := "rw"
		if m.ReadOnly {
			opt = "ro"
		}
		// The host source is not shown: a tenant has no business knowing host paths.
		fmt.Fprintf(&b, "none %s bind %s 0 0\n", procEscape(m.Dest), opt)
	}
	return b.Bytes()
}

// fsTypeNames names the file systems a container's root is commonly on, by statfs's f_type.
var fsTypeNames = map[int64]string{
	0x794c7630: "overlay", 0xef53: "ext4", 0x58465342: "xfs", 0x9123683e: "btrfs",
	0x01021994: "tmpfs", 0x2fc12fc1: "zfs", 0x01161970: "9p",
}

// procEscape escapes the characters that would break a mounts line, as Linux does (octal).
func procEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// pidNode serves /proc/<pid>/rest.
func (pf procFS) pidNode(p *Process, rest string, asker int) (vfs.SynthNode, error) {
	name, sub, more := strings.Cut(rest, "/")
	switch name {
	case "":
		return procDir(procPidFiles), nil
	case "fd":
		return pf.fdNode(p, sub, more)
	case "task":
		return pf.taskNode(p, sub, asker)
	}
	if more {
		if _, err := pf.pidNode(p, name, asker); err == nil {
			return vfs.SynthNode{}, unix.ENOTDIR
		}
		return vfs.SynthNode{}, unix.ENOENT
	}
	switch name {
	case "stat":
		return procFile(p.procStat(asker)), nil
	case "statm":
		s := p.procSnapshot()
		return procFile(fmt.Appendf(nil, "%d %d 0 0 0 0 0\n", s.vsize/memgrant.PageSize, s.rss/memgrant.PageSize)), nil
	case "status":
		return procFile(p.procStatus(asker)), nil
	case "cmdline":
		return procFile(p.cmdline()), nil
	case "environ":
		return vfs.SynthNode{Mode: unix.S_IFREG | 0o400, Content: p.environ()}, nil
	case "comm":
		return procFile([]byte(p.comm() + "\n")), nil
	case "maps":
		return procFile(p.procMaps()), nil
	case "mounts":
		return procFile(pf.mounts()), nil
	case "exe":
		exe := p.exePath()
		if exe == "" {
			return vfs.SynthNode{}, unix.ENOENT
		}
		// Opened (execve of /proc/self/exe), it is the program by its path: the file exec
		// opened is not kept.
		fs := pf.c.fs
		reopen := func(flags int) (*vfs.File, error) { return fs.Open("/", exe, flags, 0) }
		return vfs.SynthNode{Mode: unix.S_IFLNK | 0o777, Target: exe, Magic: true, Reopen: reopen}, nil
	case "cwd":
		if !lockProc(p) {
			return vfs.SynthNode{}, unix.ENOENT
		}
		cwd := p.cwd
		p.mu.Unlock()
		return procLink(cwd), nil
	case "root":
		return procLink("/"), nil
	}
	return vfs.SynthNode{}, unix.ENOENT
}

// fdNode serves /proc/<pid>/fd and its links.
func (pf procFS) fdNode(p *Process, sub string, more bool) (vfs.SynthNode, error) {
	if !more || sub == "" {
		fds := p.fds.Fds()
		names := make([]string, len(fds))
		for i, fd := range fds {
			names[i] = strconv.Itoa(fd)
		}
		return procDir(names), nil
	}
	n, ok := parsePid(sub)
	if sub == "0" {
		n, ok = 0, true
	}
	if !ok {
		return vfs.SynthNode{}, unix.ENOENT
	}
	f, err := p.fds.Get(n)
	if err != nil {
		return vfs.SynthNode{}, unix.ENOENT
	}
	defer f.DecRef()
	fs := pf.c.fs
	reopen := func(flags int) (*vfs.File, error) {
		f, err := p.fds.Get(n)
		if err != nil {
			return nil, unix.ENOENT
		}
		defer f.DecRef()
		if path := f.Path(); f.HostFd() < 0 && strings.HasPrefix(path, "/dev/") {
			return fs.Open("/", path, flags, 0) // a device of the sandbox's /dev: by its name
		}
		return f.Reopen(flags)
	}
	return vfs.SynthNode{Mode: unix.S_IFLNK | 0o777, Target: fdTarget(f), Magic: true, Reopen: reopen}, nil
}

// fdTarget is what readlink of /proc/<pid>/fd/N shows.
func fdTarget(f *vfs.File) string {
	if p := f.Path(); p != "" {
		return p
	}
	st, err := f.Stat()
	if err != nil {
		return "anon_inode:[unknown]"
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return fmt.Sprintf("pipe:[%d]", st.Ino)
	case unix.S_IFSOCK:
		return fmt.Sprintf("socket:[%d]", st.Ino)
	case unix.S_IFCHR:
		return "/dev/pts/0" // a terminal the sandbox was given; its host name means nothing here
	}
	return fmt.Sprintf("anon_inode:[%d]", st.Ino)
}

// taskNode serves /proc/<pid>/task: one directory per thread, with the process's files (the
// per-thread differences are not kept yet).
func (pf procFS) taskNode(p *Process, sub string, asker int) (vfs.SynthNode, error) {
	tids := []int{p.pid}
	if lockProc(p) {
		tids = tids[:0]
		for _, t := range p.tasks {
			tids = append(tids, t.tid)
		}
		p.mu.Unlock()
	}
	sort.Ints(tids)
	if sub == "" {
		names := make([]string, len(tids))
		for i, tid := range tids {
			names[i] = strconv.Itoa(tid)
		}
		return procDir(names), nil
	}
	tidStr, rest, _ := strings.Cut(sub, "/")
	tid, ok := parsePid(tidStr)
	if !ok || sort.SearchInts(tids, tid) == len(tids) || tids[sort.SearchInts(tids, tid)] != tid {
		return vfs.SynthNode{}, unix.ENOENT
	}
	switch rest {
	case "":
		return procDir([]string{"cmdline", "comm", "environ", "stat", "status"}), nil
	case "comm": // the thread's own name
		if t := p.task(tid); t != nil {
			return procFile([]byte(t.name() + "\n")), nil
		}
		return vfs.SynthNode{}, unix.ENOENT
	case "cmdline", "environ", "stat", "status":
		return pf.pidNode(p, rest, asker)
	}
	return vfs.SynthNode{}, unix.ENOENT
}

// lockProc takes p.mu for a /proc read. A task of p may hold it across a file system call that
// reached /proc (chdir does), so the lock is not waited for forever: after about 20 ms it gives
// up (false) and the caller shows what it can without it.
func lockProc(p *Process) bool {
	for i := 0; i < 200; i++ {
		if p.mu.TryLock() {
			return true
		}
		time.Sleep(100 * time.Microsecond)
	}
	return false
}

// procSnap is what stat and status show of a process, taken under its locks.
type procSnap struct {
	pid, ppid, pgid, sid, threads int
	state                         byte
	cpuTicks                      int64
	vsize, rss                    uint64
	comm                          string
	brk                           uint64
	umask                         uint32
	creds                         creds
}

func (p *Process) procSnapshot() procSnap {
	s := procSnap{pid: p.pid, threads: 1, state: 'S', umask: 0o022}
	p.k.mu.Lock()
	if p.parent != nil {
		s.ppid = p.parent.pid
	}
	s.pgid, s.sid = p.pgid, p.sid
	p.k.mu.Unlock()
	if lockProc(p) {
		s.threads = len(p.tasks)
		for _, t := range p.tasks {
			if t.inTenant.Load() != 0 {
				s.state = 'R'
			}
		}
		s.brk, s.umask = p.brkStart, p.umask
		s.comm = p.commLocked()
		s.creds = p.creds
		p.mu.Unlock()
	}
	if p.isStopped() {
		s.state = 'T'
	}
	s.cpuTicks = int64(p.cpuTime()) / (int64(time.Second) / clockTicks)
	if p.as != nil {
		vmas := p.as.VMAs()
		for _, v := range vmas {
			s.vsize += v.End - v.Start
		}
		s.rss = uint64(p.as.ResidentBytes())
	}
	return s
}

// procStat is /proc/<pid>/stat, the 52 fields Linux prints, in its order.
func (p *Process) procStat(asker int) []byte {
	s := p.procSnapshot()
	if p.pid == asker {
		s.state = 'R' // the reader is running: it is making this very call
	}
	// pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
	// utime stime cutime cstime priority nice num_threads itrealvalue starttime vsize rss
	// rsslim startcode endcode startstack kstkesp kstkeip signal blocked sigignore sigcatch
	// wchan nswap cnswap exit_signal processor rt_priority policy delayacct_blkio_ticks
	// guest_time cguest_time start_data end_data start_brk arg_start arg_end env_start env_end
	// exit_code
	return fmt.Appendf(nil, "%d (%s) %c %d %d %d 0 -1 4194560 0 0 0 0 %d 0 0 0 20 0 %d 0 0 %d %d "+
		"18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 %d 0 0 0 0 0\n",
		s.pid, s.comm, s.state, s.ppid, s.pgid, s.sid, s.cpuTicks, s.threads,
		s.vsize, s.rss/memgrant.PageSize, s.brk)
}

// procStatus is /proc/<pid>/status.
func (p *Process) procStatus(asker int) []byte {
	s := p.procSnapshot()
	if p.pid == asker {
		s.state = 'R'
	}
	stateName := map[byte]string{'R': "R (running)", 'S': "S (sleeping)", 'T': "T (stopped)"}[s.state]
	c := s.creds
	var groups strings.Builder
	for _, g := range c.groups {
		fmt.Fprintf(&groups, "%d ", g)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "Name:\t%s\nUmask:\t%04o\nState:\t%s\nTgid:\t%d\nNgid:\t0\nPid:\t%d\nPPid:\t%d\n"+
		"TracerPid:\t0\nUid:\t%d\t%d\t%d\t%d\nGid:\t%d\t%d\t%d\t%d\nFDSize:\t%d\nGroups:\t%s\n",
		s.comm, s.umask, stateName, s.pid, s.pid, s.ppid, c.ruid, c.euid, c.suid, c.fsuid,
		c.rgid, c.egid, c.sgid, c.fsgid, p.fds.Limit(), groups.String())
	fmt.Fprintf(&b, "VmSize:\t%8d kB\nVmRSS:\t%8d kB\nThreads:\t%d\n", s.vsize>>10, s.rss>>10, s.threads)
	b.WriteString("SigQ:\t0/0\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n")
	fmt.Fprintf(&b, "Cpus_allowed_list:\t0-%d\n", max(p.k.sched.N()-1, 0))
	return b.Bytes()
}

// procMaps is /proc/<pid>/maps. Anonymous mappings show inode 0 and no name; the mapped files'
// devices and inodes are not kept, so they show 00:00 0 too.
func (p *Process) procMaps() []byte {
	if p.as == nil {
		return nil
	}
	var b bytes.Buffer
	for _, v := range p.as.VMAs() {
		shared := byte('p')
		if v.Flags&memgrant.MapShared != 0 {
			shared = 's'
		}
		line := fmt.Sprintf("%08x-%08x %s%c %08x 00:00 0", v.Start, v.End, v.Prot, shared, v.FileOffset)
		if v.Name != "" {
			line = fmt.Sprintf("%-72s %s", line, v.Name)
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// exePath is the program the process runs.
func (p *Process) exePath() string {
	if p.as == nil {
		return ""
	}
	return exeOf(p.as.VMAs())
}

// exeOf finds the program in a process's mappings: the lowest named mapping of a file, which is
// where exec puts the main program (its interpreter and libraries go higher up).
func exeOf(vmas []memgrant.VMA) string {
	for _, v := range vmas {
		if v.File && v.Name != "" && !strings.HasPrefix(v.Name, "[") {
			return v.Name
		}
	}
	return ""
}

// comm is the process's name: the last component of the program's path, at most 15 bytes.
// comm is the process's name: its main thread's (the first left, once that one has ended).
func (p *Process) comm() string {
	if !lockProc(p) {
		return ""
	}
	defer p.mu.Unlock()
	return p.commLocked()
}

func (p *Process) commLocked() string {
	for _, t := range p.tasks {
		if t.tid == p.pid {
			return t.comm
		}
	}
	if len(p.tasks) > 0 {
		return p.tasks[0].comm
	}
	return ""
}

// name is the thread's name.
func (t *Task) name() string {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	return t.comm
}

func commOf(exe string) string {
	c := path.Base(exe)
	if c == "." || c == "/" {
		return ""
	}
	if len(c) > 15 {
		c = c[:15]
	}
	return c
}

// cmdline reads the arguments the way Linux's /proc/<pid>/cmdline does: from the process's own
// memory, from argv[0] to the end of the last argument. A fork shows its parent's, and a program
// may rewrite them. The vector exec wrote below the strings at the stack's top is found by its
// shape (argc, then argc pointers into the strings, the first at their 16-aligned start, NULL,
// envp, NULL, the auxiliary vector, ending within 16 bytes of the strings); nothing read is
// trusted beyond the bytes returned.
func (p *Process) cmdline() []byte { return p.execVectors().args }

// environ is /proc/<pid>/environ: the environment exec gave the process, read from its memory
// like cmdline (a program's later setenv does not show, as on Linux).
func (p *Process) environ() []byte { return p.execVectors().env }

// execStrings are the argument and environment strings exec left at the stack's top, each
// NUL-terminated.
type execStrings struct{ args, env []byte }

// execVectors finds exec's vector in the process's stack and returns the strings it points at.
func (p *Process) execVectors() execStrings {
	if p.as == nil {
		return execStrings{}
	}
	var top uint64
	for _, v := range p.as.VMAs() {
		if v.Name == "[stack]" && v.End > top {
			top = v.End
		}
	}
	if top < stackEager {
		return execStrings{}
	}
	lo := top - stackEager
	buf := make([]byte, stackEager)
	if err := p.k.svc.CopyIn(p.as, buf, lo); err != nil {
		return execStrings{}
	}
	word := func(off uint64) (uint64, bool) {
		if off+8 > uint64(len(buf)) {
			return 0, false
		}
		return binary.LittleEndian.Uint64(buf[off:]), true
	}
	for w := (uint64(len(buf)) - 16) &^ 15; ; w -= 16 {
		if v, ok := matchArgv(buf, lo, top, w, word); ok {
			return v
		}
		if w == 0 {
			return execStrings{}
		}
	}
}

// matchArgv checks for exec's vector at buf offset w (address lo+w) and returns the argument
// bytes it points at.
func matchArgv(buf []byte, lo, top, w uint64, word func(uint64) (uint64, bool)) (execStrings, bool) {
	argc, _ := word(w)
	if argc == 0 || argc > 1<<17 {
		return execStrings{}, false
	}
	strBase, ok := word(w + 8)
	if !ok || strBase&15 != 0 || strBase <= lo+w || strBase >= top {
		return execStrings{}, false
	}
	off := w + 8
	prev := strBase
	for i := uint64(0); i < argc; i++ {
		a, ok := word(off)
		if !ok || a < prev || a >= top {
			return execStrings{}, false
		}
		prev, off = a, off+8
	}
	if z, ok := word(off); !ok || z != 0 {
		return execStrings{}, false
	}
	off += 8
	var envFirst, envLast uint64 // exec writes the environment's strings after the arguments
	for n := 0; ; n++ {          // envp
		e, ok := word(off)
		if !ok || n > 1<<17 {
			return execStrings{}, false
		}
		off += 8
		if e == 0 {
			break
		}
		if e < strBase || e >= top {
			return execStrings{}, false
		}
		if envFirst == 0 {
			envFirst = e
		}
		envLast = max(envLast, e)
	}
	for n := 0; ; n++ { // auxv, up to its AT_NULL pair
		key, ok := word(off)
		if !ok || n > 64 {
			return execStrings{}, false
		}
		off += 16
		if key == atNull {
			break
		}
	}
	if end := lo + off; end > strBase || end+16 <= strBase {
		return execStrings{}, false
	}
	// through the NUL of the string at addr
	through := func(addr uint64) (uint64, bool) {
		i := addr - lo
		nul := bytes.IndexByte(buf[i:], 0)
		if nul < 0 {
			return 0, false
		}
		return i + uint64(nul) + 1, true
	}
	argEnd, ok := through(prev)
	if !ok {
		return execStrings{}, false
	}
	v := execStrings{args: bytes.Clone(buf[strBase-lo : argEnd])}
	if envFirst != 0 && envFirst-lo >= argEnd {
		if envEnd, ok := through(envLast); ok {
			v.env = bytes.Clone(buf[envFirst-lo : envEnd])
		}
	}
	return v, true
}
