package harness

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Leftovers lists what is left on the host for a container or pod id after its delete:
//   - processes whose command line names the id (as an argument or a path element) or whose
//     cgroup path has the id as an element (this catches tenant, stub and sandbox processes,
//     which live in the container's or pod's cgroup);
//   - mounts whose mount point has the id as a path element (bundle rootfs and the like);
//   - cgroup directories named for the id, in every v1 hierarchy and the v2 one;
//   - the shim socket containerd would use for the id and any file naming the id under a
//     private daemon's shim socket dir (and under /run/containerd/s, in case a shim ignored
//     socket_dir), and the task's bundle directory.
//
// Things that go away on their own shortly after delete (a shim exiting) are given up to five
// seconds. Tests assert the result is empty.
func Leftovers(t testing.TB, id string) []string {
	t.Helper()
	if id == "" {
		t.Fatalf("harness: Leftovers needs an id")
	}
	return waitFor(5*time.Second, func() []string {
		out, err := leftovers(id)
		if err != nil {
			t.Errorf("harness: leftovers of %s: %v", id, err)
		}
		return out
	})
}

func leftovers(id string) ([]string, error) {
	var out []string
	var errs []string

	procs, err := allProcs()
	if err != nil {
		errs = append(errs, err.Error())
	}
	self := os.Getpid()
	daemons := map[int]bool{}
	for _, c := range live.list() {
		if c.cmd != nil && c.cmd.Process != nil {
			daemons[c.cmd.Process.Pid] = true
		}
	}
	for _, p := range procs {
		if p.pid == self || daemons[p.pid] {
			continue
		}
		if argsName(p.args, id) {
			out = append(out, fmt.Sprintf("process %s", p))
			continue
		}
		for _, cg := range p.cgroups {
			if pathHas(cg, id) {
				out = append(out, fmt.Sprintf("process %s in cgroup %s", p, cg))
				break
			}
		}
	}

	mounts, err := mountPoints()
	if err != nil {
		errs = append(errs, err.Error())
	}
	for _, m := range mounts {
		if pathHas(m, id) {
			out = append(out, "mount "+m)
		}
	}

	roots, err := cgroupRoots()
	if err != nil {
		errs = append(errs, err.Error())
	}
	for _, r := range roots {
		_ = filepath.WalkDir(r, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				// A cgroup removed while walking is fine.
				return nil
			}
			if d.IsDir() && path != r && nameHas(d.Name(), id) {
				out = append(out, "cgroup "+path)
				return fs.SkipDir
			}
			return nil
		})
	}

	for _, c := range live.list() {
		for _, dir := range []string{c.SocketDir(), "/run/containerd/s"} {
			for _, addr := range []string{c.Address(), "unix://" + c.Address()} {
				sum := sha256.Sum256([]byte(filepath.Join(addr, c.ns, id)))
				sock := filepath.Join(dir, fmt.Sprintf("%x", sum))
				if _, err := os.Lstat(sock); err == nil {
					out = append(out, "shim socket "+sock)
				}
			}
		}
		entries, _ := os.ReadDir(c.SocketDir())
		for _, e := range entries {
			if strings.Contains(e.Name(), id) {
				out = append(out, "socket dir entry "+filepath.Join(c.SocketDir(), e.Name()))
			}
		}
		if _, err := os.Lstat(c.BundleDir(id)); err == nil {
			out = append(out, "bundle "+c.BundleDir(id))
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// argsName: an argument is the id, or a path with the id as one element.
func argsName(args []string, id string) bool {
	for _, a := range args {
		if a == id || (strings.Contains(a, "/") && pathHas(a, id)) {
			return true
		}
	}
	return false
}

// pathHas: one element of path names the id.
func pathHas(path, id string) bool {
	for _, el := range strings.Split(path, "/") {
		if nameHas(el, id) {
			return true
		}
	}
	return false
}

// nameHas: a file name is the id, or (for ids long enough not to match by chance) contains it,
// as in systemd's cri-containerd-<id>.scope.
func nameHas(name, id string) bool {
	return name == id || (len(id) >= 12 && strings.Contains(name, id))
}

type proc struct {
	pid     int
	args    []string
	cmdline string
	cgroups []string
}

func (p proc) String() string { return fmt.Sprintf("pid %d %q", p.pid, p.cmdline) }

func allProcs() ([]proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // gone
		}
		p := proc{pid: pid}
		p.args = strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		p.cmdline = strings.Join(p.args, " ")
		if p.cmdline == "" {
			// Kernel threads and zombies have no command line; name them by comm.
			if comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); err == nil {
				p.cmdline = "[" + strings.TrimSpace(string(comm)) + "]"
			}
		}
		if cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup")); err == nil {
			for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
				// hierarchy-ID:controllers:path
				if parts := strings.SplitN(line, ":", 3); len(parts) == 3 {
					p.cgroups = append(p.cgroups, parts[2])
				}
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// procsMentioning lists processes (other than this one) whose command line contains s.
func procsMentioning(s string) []proc {
	procs, _ := allProcs()
	var out []proc
	for _, p := range procs {
		if p.pid != os.Getpid() && strings.Contains(p.cmdline, s) {
			out = append(out, p)
		}
	}
	return out
}

type mountInfo struct {
	point  string
	fstype string
}

func mountTable() ([]mountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	var out []mountInfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 {
			continue
		}
		m := mountInfo{point: unescapeMount(fields[4])}
		for i := 6; i < len(fields)-1; i++ {
			if fields[i] == "-" {
				m.fstype = fields[i+1]
				break
			}
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return out, nil
}

func mountPoints() ([]string, error) {
	table, err := mountTable()
	var out []string
	for _, m := range table {
		out = append(out, m.point)
	}
	return out, err
}

// cgroupRoots are the mount points of every cgroup hierarchy (v1 controllers and cgroup2).
func cgroupRoots() ([]string, error) {
	table, err := mountTable()
	var out []string
	for _, m := range table {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			out = append(out, m.point)
		}
	}
	return out, err
}

// unescapeMount undoes the octal escapes (\040 for space etc.) of /proc/self/mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
