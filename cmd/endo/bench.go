package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// bench runs the tenant benchmarks natively and in a sandbox, interleaved, and prints a table of
// medians with their ratios. Only ratios mean anything on a shared, paravirtualised machine.
func bench(args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	tenants := fs.String("tenants", "", "directory whose bin/ holds the static tenant programs (bin/bench)")
	runs := fs.Int("runs", 5, "interleaved runs per configuration; the median is reported")
	only := fs.String("only", "", "run only the rows whose name matches this regular expression")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *tenants == "" {
		fmt.Fprintln(os.Stderr, "endo bench: need --tenants DIR")
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "endo bench: %v\n", err)
		return exitEndoError
	}
	filter, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintf(os.Stderr, "endo bench: --only: %v\n", err)
		return 2
	}
	b := &bencher{self: self, root: *tenants, runs: *runs, only: filter}
	fmt.Printf("%-44s %12s %12s %8s  %s\n", "benchmark", "native", "endo", "ratio", "target")
	// getpid through libc's wrapper: its site is patched after the first call. Through
	// syscall(3), whose site is never patched, every call traps (SIGSYS).
	b.row("getpid, two CPUs (ns/call)", "<= 5x", nil, "2", "/bin/bench", "getpid", "200000")
	b.row("getpid, pinned to one CPU (ns/call)", "<= 16x", []string{"taskset", "-c", "0"}, "1", "/bin/bench", "getpid", "50000")
	b.row("getpid trapping, two CPUs (ns/call)", "<= 5x", nil, "2", "/bin/bench", "getpid-trap", "200000")
	b.row("getpid trapping, one CPU (ns/call)", "<= 16x", []string{"taskset", "-c", "0"}, "1", "/bin/bench", "getpid-trap", "50000")
	b.row("mmap + first touch of 16 MiB (ns/page)", "< 1x", nil, "2", "/bin/bench", "touch", "16")
	b.row("fork + exit + wait (ns)", "<= 1.5x (gVisor 8.4x)", nil, "2", "/bin/bench", "fork", "100")
	b.row("fork + exec + wait (ns)", "<= 1.5x (gVisor 6.1x)", nil, "2", "/bin/bench", "forkexec", "50")
	b.row("pipe ping-pong, two processes (ns)", "<= 5x (gVisor 9.3x)", nil, "2", "/bin/bench", "pipe", "2000")
	b.row("futex ping-pong, two threads (ns)", "<= 2.5x (gVisor 4.8x)", nil, "2", "/bin/bench", "futex", "2000")
	b.row("sched_yield (ns)", "<= 2x (gVisor 6.7x)", nil, "2", "/bin/bench", "yield", "20000")
	b.row("copy-on-write fault after fork (ns/page)", "<= 1.2x (gVisor 1.5x)", nil, "2", "/bin/bench", "cow", "16")
	if b.wants("start") {
		b.startRow()
		b.startTimings()
	}
	if b.wants("memory") {
		b.memTable()
	}
	return b.status
}

type bencher struct {
	self, root string
	runs       int
	only       *regexp.Regexp
	status     int
}

// wants says whether the row or table called name is to run.
func (b *bencher) wants(name string) bool { return b.only.MatchString(name) }

var nsLine = regexp.MustCompile(`ns=([0-9.]+)`)

// measure runs one command and returns the ns value it printed.
func (b *bencher) measure(argv []string) (float64, string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return 0, errb.String(), fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(errb.String()))
	}
	m := nsLine.FindStringSubmatch(out.String())
	if m == nil {
		return 0, errb.String(), fmt.Errorf("%s printed no result: %q", strings.Join(argv, " "), out.String())
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, errb.String(), err
}

func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

// row measures a tenant natively (chrooted into the tenants dir) and in Endo with cpus vCPUs,
// under the same prefix (taskset), interleaving the two.
func (b *bencher) row(name, target string, prefix []string, cpus string, tenant ...string) {
	if !b.wants(name) {
		return
	}
	var nat, endo []float64
	for i := 0; i < b.runs; i++ {
		n, _, err := b.measure(append(append(append([]string{}, prefix...), filepath.Join(b.root, tenant[0])), tenant[1:]...))
		if err != nil {
			fmt.Fprintf(os.Stderr, "endo bench: %s: native: %v\n", name, err)
			b.status = 1
			return
		}
		e, _, err := b.measure(append(append(append([]string{}, prefix...), b.self, "run", "--cpus", cpus, "--rootfs", b.root, "--"), tenant...))
		if err != nil {
			fmt.Fprintf(os.Stderr, "endo bench: %s: endo: %v\n", name, err)
			b.status = 1
			return
		}
		nat, endo = append(nat, n), append(endo, e)
	}
	mn, me := median(nat), median(endo)
	fmt.Printf("%-44s %12.1f %12.1f %7.2fx  %s\n", name, mn, me, me/mn, target)
}

// startRow times a whole run of a program that exits at once: natively, and in a fresh sandbox
// (the sandbox's start, the stub's, the load and the teardown).
func (b *bencher) startRow() {
	var nat, endo []float64
	wall := func(argv ...string) (float64, error) {
		t0 := time.Now()
		err := exec.Command(argv[0], argv[1:]...).Run()
		return float64(time.Since(t0).Microseconds()) / 1000, err
	}
	for i := 0; i < b.runs*2; i++ {
		n, err := wall(filepath.Join(b.root, "bin", "bench"), "exit")
		if err != nil {
			fmt.Fprintf(os.Stderr, "endo bench: start: native: %v\n", err)
			b.status = 1
			return
		}
		e, err := wall(b.self, "run", "--rootfs", b.root, "--", "/bin/bench", "exit")
		if err != nil {
			fmt.Fprintf(os.Stderr, "endo bench: start: endo: %v\n", err)
			b.status = 1
			return
		}
		nat, endo = append(nat, n), append(endo, e)
	}
	mn, me := median(nat), median(endo)
	fmt.Printf("%-44s %12.1f %12.1f %7.2fx  %s\n", "start, run and exit a program (ms)", mn, me, me/mn,
		fmt.Sprintf("sandbox start %.1f ms: <= 60 ms (gVisor ~340)", me-mn))
}

var timingLine = regexp.MustCompile(`tenant round trip ([^ ]+) .*direct ([0-9.]+) ns, through the table ([0-9.]+) ns`)

// startTimings reports what the sandbox measures of its crossing at every start.
func (b *bencher) startTimings() {
	var rt []string
	var direct, table []float64
	for i := 0; i < b.runs; i++ {
		cmd := exec.Command(b.self, "run", "-v", "--rootfs", b.root, "--", "/bin/bench", "getpid", "1")
		out, err := cmd.CombinedOutput()
		m := timingLine.FindStringSubmatch(string(out))
		if err != nil || m == nil {
			fmt.Fprintf(os.Stderr, "endo bench: start timings: %v %q\n", err, out)
			b.status = 1
			return
		}
		rt = append(rt, m[1])
		d, _ := strconv.ParseFloat(m[2], 64)
		t, _ := strconv.ParseFloat(m[3], 64)
		direct, table = append(direct, d), append(table, t)
	}
	md, mt := median(direct), median(table)
	fmt.Printf("%-44s %12.1f %12.1f %7.1f ns over a direct call\n", "service table no-op, direct vs table (ns)", md, mt, mt-md)
	fmt.Printf("%-44s %s\n", "tenant round trip logged at start", strings.Join(rt, " "))
}

var memRow = regexp.MustCompile(`row=(\S+) median=([0-9.]+) p99=([0-9.]+) faults=([0-9.]+)`)

// memTable runs the tenant's memory table natively and in a sandbox and prints both, row by row:
// median and p99 of the samples in ns, and the page faults per sample (in Endo, the faults the
// sandbox served, through getrusage).
func (b *bencher) memTable() {
	run := func(argv ...string) (map[string][4]string, []string, error) {
		out, err := exec.Command(argv[0], argv[1:]...).Output()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %v", strings.Join(argv, " "), err)
		}
		rows := map[string][4]string{}
		var order []string
		for _, m := range memRow.FindAllStringSubmatch(string(out), -1) {
			rows[m[1]] = [4]string{m[2], m[3], m[4]}
			order = append(order, m[1])
		}
		return rows, order, nil
	}
	nat, order, err := run(filepath.Join(b.root, "bin", "bench"), "memtable", "100")
	if err == nil {
		var endo map[string][4]string
		if endo, _, err = run(b.self, "run", "--rootfs", b.root, "--", "/bin/bench", "memtable", "100"); err == nil {
			fmt.Printf("\n%-30s %22s %22s %8s %14s\n", "memory (ns; median / p99)", "native", "endo", "ratio", "faults n/e")
			for _, name := range order {
				n, e := nat[name], endo[name]
				nm, _ := strconv.ParseFloat(n[0], 64)
				em, _ := strconv.ParseFloat(e[0], 64)
				ratio := 0.0
				if nm > 0 {
					ratio = em / nm
				}
				fmt.Printf("%-30s %10s / %9s %10s / %9s %7.2fx %6s / %5s\n", name, n[0], n[1], e[0], e[1], ratio, n[2], e[2])
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "endo bench: memory table: %v\n", err)
	b.status = 1
}
