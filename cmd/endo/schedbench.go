package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/endovisor/endo/cgroupfair"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// sched-perf and sched-fair measure the kernelet beside Linux in the same run: latencies of
// yields and wake-ups, and how fairly a sandbox shares the host's CPUs with a sibling cgroup.

// latency is one side of a sched-perf row: the median and p99 over runs (each the median of the
// runs' own figures), the samples of all runs, and the worst alternation seen (-1: none).
type latency struct {
	medians, p99s []float64
	samples       int
	alt           float64
	hung          bool // an in-process measurement did not finish
}

// kerneletLimit bounds an in-process kernelet measurement: a scheduler bug must not hang the
// whole benchmark.
const kerneletLimit = time.Minute

// withTimeout runs f(n), giving up after limit (f's goroutine is then left behind).
func withTimeout(f func(int) []time.Duration, n int, limit time.Duration) ([]time.Duration, bool) {
	res := make(chan []time.Duration, 1)
	go func() { res <- f(n) }()
	select {
	case d := <-res:
		return d, true
	case <-time.After(limit):
		return nil, false
	}
}

func (l *latency) add(median, p99 float64, n int, alt float64) {
	l.medians, l.p99s = append(l.medians, median), append(l.p99s, p99)
	l.samples += n
	if alt >= 0 && (l.alt < 0 || alt < l.alt) {
		l.alt = alt
	}
}

// addDurations adds one run of in-process samples; a nil slice (not measured) adds nothing.
func (l *latency) addDurations(d []time.Duration) {
	if len(d) == 0 {
		return
	}
	ns := make([]float64, len(d))
	for i, x := range d {
		ns[i] = float64(x.Nanoseconds())
	}
	sort.Float64s(ns)
	l.add(ns[len(ns)/2], ns[len(ns)*99/100], len(ns), -1)
}

func (l *latency) cell() string {
	if l.hung {
		return "hung"
	}
	if len(l.medians) == 0 {
		return "n/a"
	}
	s := fmt.Sprintf("%.0f / %.0f (%d)", median(append([]float64(nil), l.medians...)), median(append([]float64(nil), l.p99s...)), l.samples)
	if l.alt >= 0 {
		s += fmt.Sprintf(" alt %.2f", l.alt)
	}
	return s
}

var latRow = regexp.MustCompile(`row=(\S+) median=([0-9.]+) p99=([0-9.]+) n=(\d+)(?: alt=([0-9.]+))?`)

// runLatency runs a schedbench mode and adds the row it prints to l.
func runLatency(l *latency, argv ...string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(errb.String()))
	}
	m := latRow.FindStringSubmatch(out.String())
	if m == nil {
		return fmt.Errorf("%s printed no row: %q", strings.Join(argv, " "), out.String())
	}
	med, _ := strconv.ParseFloat(m[2], 64)
	p99, _ := strconv.ParseFloat(m[3], 64)
	n, _ := strconv.Atoi(m[4])
	alt := -1.0
	if m[5] != "" {
		alt, _ = strconv.ParseFloat(m[5], 64)
	}
	l.add(med, p99, n, alt)
	return nil
}

// schedPerf prints the kernelet's latencies beside Linux's, interleaving the two.
func schedPerf(args []string) int {
	fs := flag.NewFlagSet("sched-perf", flag.ContinueOnError)
	tenants := fs.String("tenants", "", "directory whose bin/ holds the static tenant programs (bin/schedbench)")
	runs := fs.Int("runs", 3, "interleaved runs per row; medians over runs are reported")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *tenants == "" {
		fmt.Fprintln(os.Stderr, "endo sched-perf: need --tenants DIR")
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "endo sched-perf: %v\n", err)
		return exitEndoError
	}
	tenant := filepath.Join(*tenants, "bin", "schedbench")
	type perfRow struct {
		name     string
		native   []string
		endo     []string
		kernelet func(int) []time.Duration
		n        int
	}
	const yields, wakes, sleeps = 5000, 2000, 500
	rows := []perfRow{
		{name: "1. yield round trip, 2 tasks, 1 vCPU", native: []string{tenant, "yieldthreads", strconv.Itoa(yields)},
			kernelet: kerneletYieldRoundTrip, n: 2 * yields},
		{name: "1a. the same, 2 threads of a tenant process", native: []string{tenant, "yieldthreads", strconv.Itoa(4 * yields)},
			endo: []string{"taskset", "-c", "0", self, "run", "--cpus", "1", "--rootfs", *tenants, "--", "/bin/schedbench", "yieldthreads", strconv.Itoa(4 * yields)}},
		{name: "2. wake higher-priority task, same vCPU", native: []string{tenant, "wakesame", strconv.Itoa(wakes)},
			kernelet: kerneletWakeSameVCPU, n: wakes},
		{name: "3. wake from the other vCPU (kick)", native: []string{tenant, "wakecross", strconv.Itoa(wakes)},
			kernelet: kerneletWakeKick, n: wakes},
		{name: "4. yield alternation, 2 processes, 1 CPU", native: []string{"taskset", "-c", "0", tenant, "yieldprocs", strconv.Itoa(yields)},
			endo: []string{"taskset", "-c", "0", self, "run", "--cpus", "1", "--rootfs", *tenants, "--", "/bin/schedbench", "yieldprocs", strconv.Itoa(yields)}},
		{name: "5. pipe wake-up across CPUs (Linux only)", native: []string{tenant, "pipewake", strconv.Itoa(wakes)}},
		{name: "6. 2 ms sleep among 8 yielders, late by", native: []string{tenant, "yieldsleep", "8", strconv.Itoa(sleeps)},
			endo: []string{self, "run", "--cpus", "2", "--rootfs", *tenants, "--", "/bin/schedbench", "yieldsleep", "8", strconv.Itoa(sleeps)}},
	}
	status := 0
	fmt.Printf("%-46s %-34s %-34s %7s\n", "sched-perf (ns: median / p99 (samples))", "Linux", "Endo", "ratio")
	for _, r := range rows {
		nat, endo := &latency{alt: -1}, &latency{alt: -1}
		for i := 0; i < *runs; i++ {
			if err := runLatency(nat, r.native...); err != nil {
				fmt.Fprintf(os.Stderr, "endo sched-perf: %s: Linux: %v\n", r.name, err)
				status = 1
				break
			}
			switch {
			case r.endo != nil:
				if err := runLatency(endo, r.endo...); err != nil {
					fmt.Fprintf(os.Stderr, "endo sched-perf: %s: Endo: %v\n", r.name, err)
					status = 1
				}
			case r.kernelet != nil && !endo.hung:
				d, ok := withTimeout(r.kernelet, r.n, kerneletLimit)
				if !ok {
					fmt.Fprintf(os.Stderr, "endo sched-perf: %s: Endo: no result in %v\n", r.name, kerneletLimit)
					endo.hung = true
					status = 1
				}
				endo.addDurations(d)
			}
		}
		ratio := "n/a"
		if len(nat.medians) > 0 && len(endo.medians) > 0 {
			ratio = fmt.Sprintf("%.2fx", median(append([]float64(nil), endo.medians...))/median(append([]float64(nil), nat.medians...)))
		}
		endoCell := endo.cell()
		if r.endo == nil && r.kernelet == nil {
			endoCell = "-"
		}
		fmt.Printf("%-46s %-34s %-34s %7s\n", r.name, nat.cell(), endoCell, ratio)
	}
	fmt.Print(`
Rows 1-3, Endo: kernelet tasks measured inside this process (no tenant code, no stub), each on
  a thread of its own that sleeps on a host futex, as a carrier does, with a Go P to spare (a
  carrier gives its P back as it sleeps); in rows 1-2 both threads are pinned to host CPU 0, as
  Linux's are. Rows 2-3: the wakee sleeps as a task blocked in the kernel; the waker calls Wake,
  as the kernel's futex wake does, the holder of the wakee's vCPU is kicked (row 3: its thread
  is woken from its futex) and gives way, and the grant wakes the wakee's thread; from just
  before Wake until the wakee holds the vCPU.
Row 1, Linux: two threads pinned to CPU 0; a sample is one sched_yield call (the other thread's
  turn and two switches); alt = the share of calls during which the other thread ran.
Row 1a: the same tenant in endo run --cpus 1 (under taskset -c 0): each yield traps (seccomp's
  SIGSYS) into the stub, whose runner takes the other thread's registers from the ring and
  returns into it; the sandbox sees only the first yields, before the kernelet hands the two
  threads to a ring.
Rows 2-3, Linux: a SCHED_FIFO thread sleeps in FUTEX_WAIT; a SCHED_OTHER thread on the same CPU
  (row 2) or on the other one (row 3) wakes it once it sleeps (seen in /proc; across CPUs after
  a further 20 us, so that CPU goes idle): from just before FUTEX_WAKE to the wakee's clock read.
Row 4: Endo does not share MAP_SHARED|MAP_ANONYMOUS memory across fork, so there is no turn
  variable: two processes each busy-yield; a sample is one sched_yield call (the other process's
  turn and two switches). alt = the share of consecutive yields (both processes' clock stamps,
  merged by time after the run) that came from different processes; 1.00 is strict alternation.
  Both sides run under taskset -c 0, Endo with --cpus 1.
Row 5: a process on CPU 0 writes its clock into a pipe that a process on CPU 1 sleeps reading.
Row 6: eight threads only yield (in Endo, turns of their process's ring in the stub) while the
  main thread sleeps 2 ms at a time (usleep); a sample is how much later than 2 ms it ran again.
`)
	return status
}

// The fairness benchmark.

// fairRow is one sched-fair configuration of the sandbox's tenant.
type fairRow struct {
	name   string
	tasks  int
	lock   bool
	procs  bool // the busy threads are split between two processes
	native bool // Linux's own figure: the tenant runs in the sandbox's cgroup without Endo
}

// fairRun is what one window measured.
type fairRun struct {
	sibling, sandbox float64 // processors used over the window
	mostRunnable     int     // from the sandbox's probe
	stolenMs         float64 // the sandbox carriers' stolen time, whole run
	askedAgain       int     // vCPUs asked of a ring again: its runner's member had not trapped
	between          int     // slice-end switches from one process to another
	opened, closed   int     // rings of equal tasks opened and taken back, whole run
	startS           float64 // from the sandbox's start until every tenant thread was up
	steal            float64 // processors the hypervisor ran something else on, over the window
	others           float64 // processors the guest spent outside the two cgroups (busy, not idle)
}

// cleanups undo what sched-fair set up, also from a signal handler; each runs once.
type cleanups struct {
	mu   sync.Mutex
	fns  []func()
	done bool // runAll ran: what is pushed after is undone at once
}

func (c *cleanups) push(f func()) func() {
	var once sync.Once
	g := func() { once.Do(f) }
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		g()
		return g
	}
	c.fns = append(c.fns, g)
	c.mu.Unlock()
	return g
}

func (c *cleanups) runAll() {
	c.mu.Lock()
	fns := c.fns
	c.fns, c.done = nil, true
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

func schedFair(args []string) int {
	fs := flag.NewFlagSet("sched-fair", flag.ContinueOnError)
	tenants := fs.String("tenants", "", "directory whose bin/ holds the static tenant programs (bin/schedbench)")
	seconds := fs.Float64("seconds", 10, "length of each measured window")
	runs := fs.Int("runs", 3, "runs per row")
	budget := fs.Int("probe-budget", fairProbeBudget, "the sandbox's probe spends at most 1/N of a CPU (more samples cost the sibling too)")
	only := fs.String("only", "", "run only the rows whose names contain this text (e.g. \"lock\"), or the row of exactly this name")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *tenants == "" {
		fmt.Fprintln(os.Stderr, "endo sched-fair: need --tenants DIR")
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "endo sched-fair: %v\n", err)
		return exitEndoError
	}
	cpus := runtime.NumCPU()
	f := &fairBench{self: self, root: *tenants, seconds: *seconds, cpus: cpus, probeBudget: *budget,
		base: fmt.Sprintf("/endo-sched-fair-%d", os.Getpid())}

	// Ctrl-C or a kill: end every process and remove both cgroups before going.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		s, ok := <-sigs
		if !ok {
			return
		}
		fmt.Fprintf(os.Stderr, "endo sched-fair: %v: cleaning up\n", s)
		f.undo.runAll()
		os.Exit(130)
	}()
	defer f.undo.runAll()
	if err := f.setUp(); err != nil {
		fmt.Fprintf(os.Stderr, "endo sched-fair: %v\n", err)
		return 1
	}

	rows := []fairRow{{name: "1 busy task", tasks: 1}, {name: "50 busy tasks", tasks: 50},
		{name: "50 busy tasks + 10 ms lock holder", tasks: 50, lock: true},
		{name: "50 busy tasks in 2 processes", tasks: 50, procs: true},
		{name: "Linux: 2 busy threads, no sandbox", tasks: 2, native: true},
		{name: "Linux: 50 busy threads, no sandbox", tasks: 50, native: true},
		{name: "Linux: 50 + lock, no sandbox", tasks: 50, lock: true, native: true}}
	// A name given whole picks that row alone: "50 busy tasks" is part of two other names.
	if i := slices.IndexFunc(rows, func(r fairRow) bool { return r.name == *only }); i >= 0 {
		rows = rows[i : i+1]
	}
	rows = slices.DeleteFunc(rows, func(r fairRow) bool { return !strings.Contains(r.name, *only) })
	if len(rows) == 0 {
		fmt.Fprintf(os.Stderr, "endo sched-fair: no row's name contains %q\n", *only)
		return 2
	}
	results := make([][]fairRun, len(rows))
	status := 0
	// Runs interleave the rows, so that a change in the machine's load touches all of them.
	for i := 0; i < *runs; i++ {
		for j, r := range rows {
			res, err := f.run(r)
			if err != nil {
				fmt.Fprintf(os.Stderr, "endo sched-fair: %s, run %d: %v\n", r.name, i+1, err)
				status = 1
				continue
			}
			probe := fmt.Sprintf(", probe %d, switches between processes %d, rings opened %d, taken back %d, ring vCPUs asked again %d",
				res.mostRunnable, res.between, res.opened, res.closed, res.askedAgain)
			if r.native {
				probe = ""
			}
			fmt.Fprintf(os.Stderr, "endo sched-fair: %s, run %d: sibling %.3f CPUs, sandbox %.3f CPUs, host steal %.3f, others %.3f%s, threads up after %.2f s\n",
				r.name, i+1, res.sibling, res.sandbox, res.steal, res.others, probe, res.startS)
			results[j] = append(results[j], res)
		}
	}
	// Nothing is left to measure: the cgroups go before the table does. Standard output may be a
	// pipe whose reader has gone, and a write there ends this process (SIGPIPE) before its
	// deferred cleanups run.
	f.undo.runAll()

	const goal = 0.98
	fmt.Printf("sched-fair: a sibling cgroup runs %d busy loops (native) beside the sandbox (endo run --cpus %d), equal weights (cpu.shares 1024 each, v2: the same weight), %g s windows, %d runs\n",
		cpus, cpus, *seconds, *runs)
	fmt.Printf("sibling's fair share = min(its demand %d, max(P x its weight share 1/2, P - the sandbox's demand)), P = the processors the host gave the guest (%d less steal);\n"+
		"the sandbox's demand = min(its busy tasks, %d vCPUs); goal >= %.2f of it in every run\n", cpus, cpus, cpus, goal)
	fmt.Printf("%-34s %-18s %-18s %-18s %-15s %-18s %-9s %-15s %-15s %s\n", "sandbox runs", "sibling CPUs", "of fair", "of fair, no steal",
		"sandbox CPUs", "steal, others", "probe max", "stolen ms", "threads up s", "goal")
	for j, r := range rows {
		demand := min(r.tasks, cpus)
		fairOf := func(p float64) float64 { return min(float64(cpus), max(p/2, p-float64(demand))) }
		var sib, frac, raw, sbx, host, most, stolen, up []string
		met := len(results[j]) == *runs
		for _, x := range results[j] {
			fr := x.sibling / fairOf(float64(cpus)-x.steal)
			met = met && fr >= goal
			sib = append(sib, fmt.Sprintf("%.3f", x.sibling))
			frac = append(frac, fmt.Sprintf("%.3f", fr))
			raw = append(raw, fmt.Sprintf("%.3f", x.sibling/fairOf(float64(cpus))))
			sbx = append(sbx, fmt.Sprintf("%.2f", x.sandbox))
			host = append(host, fmt.Sprintf("%.2f/%.2f", x.steal, x.others))
			if r.native {
				most, stolen = append(most, "-"), append(stolen, "-")
			} else {
				most = append(most, strconv.Itoa(x.mostRunnable))
				stolen = append(stolen, fmt.Sprintf("%.0f", x.stolenMs))
			}
			up = append(up, fmt.Sprintf("%.1f", x.startS))
		}
		verdict := "met"
		switch {
		case r.native:
			verdict = "(Linux's own)"
		case !met:
			verdict = "MISSED"
		}
		fmt.Printf("%-34s %-18s %-18s %-18s %-15s %-18s %-9s %-15s %-15s %s\n", r.name, strings.Join(sib, " "), strings.Join(raw, " "), strings.Join(frac, " "),
			strings.Join(sbx, " "), strings.Join(host, " "), strings.Join(most, " "), strings.Join(stolen, " "), strings.Join(up, " "), verdict)
	}
	fmt.Printf("\nThe two cgroups share a parent of the highest weight, so other work on the machine takes little from them.\n"+
		"With a lock: one thread holds a pthread mutex for 10 ms at a time, 4 more take it between 1 ms bursts of work.\n"+
		"In 2 processes: a process and its child run 25 of the busy threads each; at a slice's end a vCPU stays with\n"+
		"  its process while that has a thread within a slice of the best waiter, so the two mostly settle one on each\n"+
		"  vCPU (switches between processes: how often a vCPU went to the other process in the whole run), and then\n"+
		"  each process's threads take turns in a ring of their own, timed by its stub (rings opened, taken back:\n"+
		"  in the whole run, on the stderr lines; the last ones are taken back at the end).\n"+
		"probe max: the most of the sandbox's tasks Linux had runnable at once (endo run --probe: a sample every ms,\n"+
		"  less often when samples cost more than 1/%d of a CPU, which gives a few samples a second with 50 tasks;\n"+
		"  on cgroup v1 the probe's thread runs outside the sandbox's cgroup, so that its sampling neither takes\n"+
		"  from nor counts as the sandbox's CPU);\n"+
		"steal, others: processors the hypervisor took from the guest (/proc/stat's steal), and the guest spent\n"+
		"  outside the two cgroups (this benchmark, the probe, the host's daemons), both over the window; the goal\n"+
		"  is judged on the share of what the host gave (of fair, no steal), which a busy neighbour VM cannot move;\n"+
		"stolen: how long the sandbox's carriers waited in a host run queue over the whole run (probe line);\n"+
		"threads up: from the sandbox's start until the tenant had made all its threads; each window starts 1 s after.\n"+
		"Linux rows: the same tenant run natively in the sandbox's cgroup, what Linux alone gives the sibling: with 2\n"+
		"  threads the machine's own spread between equal cgroups, with 50 what a pod without a kernelet takes, with\n"+
		"  the lock the same for the lock row's tenant, whose threads sleep and wake often.\n"+
		"Why runs spread: with 4 busy threads of two equal cgroups on 2 CPUs, Linux's periodic load balancing moves a\n"+
		"  thread every 0.3-1 s (traced, Linux's 2-thread row as much as the sandbox's rows), and each move that leaves\n"+
		"  3 threads on one CPU gives one cgroup ~1.2 CPUs and the other ~0.8 for 0.2-0.5 s until the next; a 10 s\n"+
		"  window averages a dozen of these, so single runs spread by about +-0.04 whatever the sandbox does.\n", *budget)
	return status
}

// fairProbeBudget: the probe's samples cost CPU that comes out of both cgroups, the sibling's
// too. Beside 50 tasks, five interleaved 10 s windows each, the sibling got .985 on average
// with endo run's default (1/50 of a CPU), .993 at 1/500, and .997 without a probe.
const fairProbeBudget = 500

type fairBench struct {
	self, root  string
	seconds     float64
	probeBudget int
	cpus        int
	base        string
	undo        cleanups
}

// setUp makes the parent of the two cgroups, with the highest weight, so that other work on a
// shared machine takes little from them: what is measured is how the two split the CPUs. This
// process moves into a third child of the same weight as the parent: it mostly sleeps, and when
// it wakes (to read the counters on time, or to start a sandbox, which begins in its cgroup) it
// must not wait behind the busy pair.
func (f *fairBench) setUp() error {
	top := uint64(262144)
	heavy := &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &top}}
	ctl := f.base + "/control"
	f.undo.push(func() {
		for _, p := range []string{ctl, f.base} {
			if err := removeCgroup(p); err != nil {
				fmt.Fprintf(os.Stderr, "endo sched-fair: %v\n", err)
			}
		}
	})
	if _, err := cgroupfair.Create(f.base, heavy); err != nil {
		return err
	}
	if _, err := cgroupfair.Create(ctl, heavy); err != nil {
		return err
	}
	leave, err := joinCgroup(ctl)
	if err != nil {
		return err
	}
	f.undo.push(leave)
	return nil
}

// run measures one window: both cgroups made, the sibling's loops and the sandbox started, the
// cgroups' CPU use read over the window, then everything ended and removed.
func (f *fairBench) run(r fairRow) (res fairRun, err error) {
	shares := uint64(1024)
	weight := &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &shares}}
	sibPath, sbxPath := f.base+"/sibling", f.base+"/sandbox"
	sib, err := cgroupfair.Create(sibPath, weight)
	if err != nil {
		return res, err
	}
	sbx, err := cgroupfair.Create(sbxPath, weight)
	if err != nil {
		return res, err
	}
	removeAll := f.undo.push(func() {
		for _, p := range []string{sibPath, sbxPath} {
			if err := removeCgroup(p); err != nil {
				fmt.Fprintf(os.Stderr, "endo sched-fair: %v\n", err)
			}
		}
	})
	defer removeAll()

	// The sandbox first, so that its start does not compete with the sibling's loops.
	const warmUp = time.Second
	argv := []string{f.self, "run", "--cpus", strconv.Itoa(f.cpus), "--cgroup", sbxPath, "--probe", "--report", "--probe-budget", strconv.Itoa(f.probeBudget), "--rootfs", f.root, "--",
		"/bin/schedbench", "fair", strconv.Itoa(r.tasks), fmt.Sprintf("%g", f.seconds+60)}
	if r.lock {
		argv = append(argv, "lock")
	}
	if r.procs {
		argv = append(argv, "procs")
	}
	tenant := filepath.Join(f.root, "bin", "schedbench")
	if r.native {
		argv = append([]string{tenant}, argv[slices.Index(argv, "--")+2:]...)
	}
	started := time.Now()
	endo, err := f.start(argv...)
	if err != nil {
		return res, err
	}
	up := endo.stderr.watch("threads up")
	defer endo.stop()
	if r.native {
		// Add moves the whole process, threads it has made already too.
		if err := sbx.Add(endo.cmd.Process.Pid); err != nil {
			return res, err
		}
	} else if err := waitForPid(sbx, endo.cmd.Process.Pid, 30*time.Second); err != nil {
		return res, err
	}
	for i := 0; i < f.cpus; i++ {
		loop, err := f.start(tenant, "spin", "0")
		if err != nil {
			return res, err
		}
		defer loop.stop()
		if err := sib.Add(loop.cmd.Process.Pid); err != nil {
			return res, err
		}
	}
	// The window starts once every thread of the tenant is up and the loads have settled: a
	// sandbox whose threads start slowly is measured at its steady state, and how slowly is
	// reported beside it.
	select {
	case <-up:
		res.startS = time.Since(started).Seconds()
	case <-endo.done:
		who := "endo run"
		if r.native {
			who = "the native tenant"
		}
		return res, fmt.Errorf("%s ended (%v) before the tenant's threads were up: %s", who, endo.err, strings.TrimSpace(endo.stderr.String()))
	case <-time.After(2 * time.Minute):
		return res, errors.New("the tenant's threads were not up after 2 minutes")
	}
	time.Sleep(warmUp)
	h0, err := readHostTimes()
	if err != nil {
		return res, err
	}
	s0, err := cgroupUsage(sibPath)
	if err != nil {
		return res, err
	}
	b0, err := cgroupUsage(sbxPath)
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	time.Sleep(time.Duration(f.seconds * float64(time.Second)))
	s1, err := cgroupUsage(sibPath)
	if err != nil {
		return res, err
	}
	b1, err := cgroupUsage(sbxPath)
	if err != nil {
		return res, err
	}
	h1, err := readHostTimes()
	if err != nil {
		return res, err
	}
	window := time.Since(t0)
	res.sibling = float64(s1-s0) / float64(window)
	res.sandbox = float64(b1-b0) / float64(window)
	res.steal = float64(h1.steal-h0.steal) / float64(window)
	res.others = max(0, float64(h1.busy-h0.busy-(s1-s0)-(b1-b0))/float64(window))

	if r.native {
		return res, nil // endo.stop ends it
	}
	// endo passes SIGTERM to the tenant, then reports its probe and leaves.
	endo.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-endo.done:
		err = endo.err
	case <-time.After(30 * time.Second):
		err = errors.New("the sandbox did not end on SIGTERM")
	}
	endo.stop()
	// The tenant's death by SIGTERM is endo's exit status 143; endo itself may get the signal
	// again once it stopped passing signals on.
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ee.ExitCode() == 128+int(syscall.SIGTERM) || ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			err = nil
		}
	}
	if err != nil {
		return res, fmt.Errorf("endo run: %v: %s", err, strings.TrimSpace(endo.stderr.String()))
	}
	m := probeLine.FindStringSubmatch(endo.stderr.String())
	if m == nil {
		return res, fmt.Errorf("endo run printed no probe line: %q", endo.stderr.String())
	}
	res.mostRunnable, _ = strconv.Atoi(m[1])
	res.stolenMs, _ = strconv.ParseFloat(m[2], 64)
	if m := askedLine.FindStringSubmatch(endo.stderr.String()); m != nil {
		res.askedAgain, _ = strconv.Atoi(m[1])
	}
	if m := switchesLine.FindStringSubmatch(endo.stderr.String()); m != nil {
		res.between, _ = strconv.Atoi(m[1])
	}
	if m := ringsLine.FindStringSubmatch(endo.stderr.String()); m != nil {
		res.opened, _ = strconv.Atoi(m[1])
		res.closed, _ = strconv.Atoi(m[2])
	}
	return res, nil
}

// child is a process sched-fair started; stop kills it (once) and waits for it.
type child struct {
	cmd    *exec.Cmd
	stderr watchedBuffer
	done   chan struct{} // closed when it has been waited for
	err    error         // its exit, once done is closed
	stop   func()
}

// start starts a process that dies with sched-fair (Pdeathsig) and is ended by its cleanups.
func (f *fairBench) start(argv ...string) (*child, error) {
	c := &child{cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{})}
	c.cmd.Stderr = &c.stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", strings.Join(argv, " "), err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	c.stop = f.undo.push(func() {
		c.cmd.Process.Kill()
		<-c.done
	})
	return c, nil
}

// watchedBuffer keeps what a child writes and tells when a line with a given text has come.
type watchedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{} // closed once a line holds want
}

func (w *watchedBuffer) watch(want string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.want, w.seen = want, make(chan struct{})
	return w.seen
}

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.seen != nil && w.want != "" && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
		w.want = ""
	}
	return len(p), nil
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitForPid waits until process pid is in the cgroup.
func waitForPid(pod *cgroupfair.Pod, pid int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		pids, err := pod.Pids()
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", pod.Path(), err)
		}
		for _, p := range pids {
			if p == pid {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d did not join cgroup %s in %v", pid, pod.Path(), limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// From endo run --report.
var (
	askedLine    = regexp.MustCompile(`vCPUs asked of a ring again (\d+) times`)
	switchesLine = regexp.MustCompile(`slice-end switches: \d+ within a process, (\d+) between processes`)
	ringsLine    = regexp.MustCompile(`rings of equal tasks: opened (\d+) times, taken back (\d+) times`)
)

var probeLine = regexp.MustCompile(`probe: at most (\d+) tasks runnable.*stolen time ([0-9.]+) ms`)

// hostTimes are the guest's CPU times from /proc/stat, summed over its CPUs: time the hypervisor
// gave to something else while the guest wanted to run (steal), and time the guest was busy.
type hostTimes struct{ steal, busy time.Duration }

// clockTick is USER_HZ, the unit of /proc/stat; Linux fixes it at 100 for user space.
const clockTick = 10 * time.Millisecond

func readHostTimes() (hostTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostTimes{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return hostTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var v [8]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return hostTimes{}, fmt.Errorf("/proc/stat: field %d of %q: %w", i+1, line, err)
		}
	}
	busy := v[0] + v[1] + v[2] + v[5] + v[6]
	return hostTimes{steal: time.Duration(v[7]) * clockTick, busy: time.Duration(busy) * clockTick}, nil
}

// cgroupUsage is the CPU time a cgroup's processes used, cpuacct.usage (v1) or cpu.stat's
// usage_usec (v2).
func cgroupUsage(path string) (time.Duration, error) {
	if cgroups.Mode() == cgroups.Unified {
		m, err := cgroup2.Load(path)
		if err != nil {
			return 0, fmt.Errorf("load cgroup %s: %w", path, err)
		}
		st, err := m.StatFiltered(cgroup2.StatCPU)
		if err != nil || st.CPU == nil {
			return 0, fmt.Errorf("cpu.stat of %s: %v", path, err)
		}
		return time.Duration(st.CPU.UsageUsec) * time.Microsecond, nil
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(path))
	if err != nil {
		return 0, fmt.Errorf("load cgroup %s: %w", path, err)
	}
	st, err := cg.Stat(cgroup1.IgnoreNotExist)
	if err != nil || st.CPU == nil || st.CPU.Usage == nil {
		return 0, fmt.Errorf("cpuacct of %s: %v", path, err)
	}
	return time.Duration(st.CPU.Usage.Total), nil
}

// removeCgroup deletes a cgroup that sched-fair or endo run made, once the processes in it are
// gone (a sandbox's stubs die with it, shortly after). A cgroup that is not there is no error.
func removeCgroup(path string) error {
	if !cgroupExists(path) {
		return nil
	}
	pod, err := cgroupfair.Load(path)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err = pod.Delete(); err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cgroupExists says whether a cgroup is there (v1: in any hierarchy).
func cgroupExists(path string) bool {
	if cgroups.Mode() == cgroups.Unified {
		_, err := os.Stat(filepath.Join("/sys/fs/cgroup", path))
		return err == nil
	}
	_, err := cgroup1.Load(cgroup1.StaticPath(path))
	return err == nil
}

// joinCgroup moves this process (and so every thread and later child: carriers, stubs) into
// the cgroup at path, made with no limits if it is not there. The returned function moves the
// process back where it was and removes the cgroup if joinCgroup made it.
func joinCgroup(path string) (func(), error) {
	goHome, err := homeCgroup()
	if err != nil {
		return nil, err
	}
	created := !cgroupExists(path)
	var pod *cgroupfair.Pod
	if created {
		pod, err = cgroupfair.Create(path, nil)
	} else {
		pod, err = cgroupfair.Load(path)
	}
	if err != nil {
		return nil, err
	}
	if err := pod.Add(os.Getpid()); err != nil {
		// Controllers take the process one by one: those before the one that refused it hold
		// it now, and the cgroup cannot go until it is back home.
		if herr := goHome(); herr != nil {
			return nil, fmt.Errorf("%w; and back to this process's own cgroups: %v", err, herr)
		}
		if created {
			if derr := removeCgroup(path); derr != nil {
				return nil, fmt.Errorf("%w; and %v", err, derr)
			}
		}
		if realtime() {
			return nil, fmt.Errorf("%w (this process runs at a realtime policy, which a cgroup v1 cpu controller without an rt_runtime budget refuses: run it as SCHED_OTHER)", err)
		}
		return nil, err
	}
	return func() {
		if err := goHome(); err != nil {
			fmt.Fprintf(os.Stderr, "endo: leave cgroup %s: %v\n", path, err)
			return
		}
		if created {
			if err := removeCgroup(path); err != nil {
				fmt.Fprintf(os.Stderr, "endo: %v\n", err)
			}
		}
	}, nil
}

// realtime reports whether the calling thread runs at SCHED_FIFO or SCHED_RR.
func realtime() bool {
	p, _, errno := unix.RawSyscall(unix.SYS_SCHED_GETSCHEDULER, 0, 0, 0)
	return errno == 0 && (p == unix.SCHED_FIFO || p == unix.SCHED_RR)
}

// homeCgroup returns a function that moves this process back into the cgroups it is in now
// (v1: one path per hierarchy).
func homeCgroup() (func() error, error) {
	pid := os.Getpid()
	if cgroups.Mode() == cgroups.Unified {
		group, err := cgroup2.PidGroupPath(pid)
		if err != nil {
			return nil, fmt.Errorf("this process's cgroup: %w", err)
		}
		m, err := cgroup2.Load(group)
		if err != nil {
			return nil, fmt.Errorf("load cgroup %s: %w", group, err)
		}
		return func() error { return m.AddProc(uint64(pid)) }, nil
	}
	cg, err := cgroup1.Load(cgroup1.PidPath(pid))
	if err != nil {
		return nil, fmt.Errorf("this process's cgroups: %w", err)
	}
	return func() error { return cg.Add(cgroup1.Process{Pid: pid}) }, nil
}
