// Command endo is the Endo sandbox and its command line: `endo run` runs one program in a fresh
// sandbox, `endo boot` is the sandbox process the shim starts for a pod, `endo version` prints
// the version.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/endovisor/endo/cgroupfair"
	"github.com/endovisor/endo/sandbox/kernel"
	"golang.org/x/sys/unix"
)

// version is set by the Makefile.
var version = "dev"

func usage() {
	fmt.Fprintf(os.Stderr, `usage:
  endo run --rootfs DIR [--report] [--memory BYTES] [--cpus N] [--cgroup PATH] [--probe [--probe-budget N]] [--env K=V]... -- PROGRAM [ARGS...]
  endo bench --tenants DIR [--runs N]
  endo sched-perf --tenants DIR [--runs N]
  endo sched-fair --tenants DIR [--seconds S] [--runs N]
  endo version
`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	// The tenant's umask is the kernel's business; the host must not apply ours on top.
	syscall.Umask(0)
	switch os.Args[1] {
	case "run":
		os.Exit(run(os.Args[2:]))
	case "bench":
		os.Exit(bench(os.Args[2:]))
	case "sched-perf":
		os.Exit(schedPerf(os.Args[2:]))
	case "sched-fair":
		os.Exit(schedFair(os.Args[2:]))
	case "version", "--version":
		fmt.Printf("endo %s\n", version)
	default:
		if !bootCommand(os.Args[1], os.Args[2:]) {
			usage()
			os.Exit(2)
		}
	}
}

type envFlags []string

func (e *envFlags) String() string     { return strings.Join(*e, ",") }
func (e *envFlags) Set(v string) error { *e = append(*e, v); return nil }

// Exit statuses of endo's own failures, as container runtimes use them.
const (
	exitEndoError   = 125
	exitCannotExec  = 126
	exitNotFound    = 127
	defaultEnvPath  = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	defaultMemoryGB = 2
)

func run(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	rootfs := fs.String("rootfs", "", "host directory that is the program's /")
	report := fs.Bool("report", false, "print the system calls the program made that Endo does not implement")
	memory := fs.Int64("memory", defaultMemoryGB<<30, "the sandbox's memory (its grant), in bytes")
	cpus := fs.Int("cpus", 0, "vCPUs (0: the host's)")
	user := fs.String("user", "", "UID[:GID] the program runs as (default root)")
	cwd := fs.String("cwd", "/", "working directory inside the sandbox")
	cpuprofile := fs.String("cpuprofile", "", "write the sandbox's CPU profile to this file")
	probe := fs.Bool("probe", false, "sample how many sandbox threads Linux has runnable at once, and report the most")
	probeBudget := fs.Int("probe-budget", 50, "with --probe: the probe spends at most 1/N of a CPU")
	cgroupPath := fs.String("cgroup", "", "cgroup to run the sandbox and its stubs in (made, and removed after, if it does not exist)")
	verbose := fs.Bool("v", false, "log the sandbox's own messages (crossing timings) to stderr")
	noPatch := fs.Bool("no-patch", false, "never patch call sites: every system call traps (SIGSYS)")
	var env envFlags
	fs.Var(&env, "env", "environment variable K=V for the program (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	argv := fs.Args()
	if *rootfs == "" || len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "endo run: need --rootfs DIR and a program")
		return 2
	}
	if fi, err := os.Stat(*rootfs); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		fmt.Fprintf(os.Stderr, "endo: rootfs %s: %v\n", *rootfs, err)
		return exitEndoError
	}
	if len(env) == 0 {
		env = envFlags{defaultEnvPath}
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "endo: %v\n", err)
			return exitEndoError
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *cgroupPath != "" {
		// Joined before the kernel exists, so that every carrier and stub (spares too) starts
		// inside; left after the kernel is closed (deferred calls run in reverse).
		leave, err := joinCgroup(*cgroupPath)
		if err != nil {
			fmt.Fprintf(os.Stderr, "endo: %v\n", err)
			return exitEndoError
		}
		defer leave()
	}
	logf := func(string, ...any) {}
	if *verbose {
		logf = func(format string, a ...any) { fmt.Fprintf(os.Stderr, "endo: "+format+"\n", a...) }
	}
	k, err := kernel.New(kernel.Config{MemoryBytes: *memory, VCPUs: *cpus, Log: logf, NoCallPatching: *noPatch})
	if err != nil {
		fmt.Fprintf(os.Stderr, "endo: %v\n", err)
		return exitEndoError
	}
	defer k.Close()
	// Signals to endo are the program's, as with a container runtime's foreground run; they
	// are caught from before the program starts.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	var uid, gid uint64
	if *user != "" {
		u, g, hasGid := strings.Cut(*user, ":")
		var err1, err2 error
		uid, err1 = strconv.ParseUint(u, 10, 32)
		gid = uid
		if hasGid {
			gid, err2 = strconv.ParseUint(g, 10, 32)
		}
		if err1 != nil || err2 != nil {
			fmt.Fprintf(os.Stderr, "endo: --user %q: want UID or UID:GID\n", *user)
			return exitEndoError
		}
	}
	p, err := k.Spawn(kernel.ProcessSpec{
		Rootfs: *rootfs, Argv: argv, Env: env, Cwd: *cwd, UID: uint32(uid), GID: uint32(gid),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "endo: %v\n", err)
		switch {
		case errors.Is(err, unix.ENOENT):
			return exitNotFound
		case errors.Is(err, unix.ENOEXEC), errors.Is(err, unix.EACCES), errors.Is(err, unix.ELIBBAD):
			return exitCannotExec
		}
		return exitEndoError
	}
	if *probe {
		// The probe is an instrument: its sampling (two /proc reads a task, up to a thousand
		// times a second) is not the pod's work, and measured in the pod's cgroup it took 3-5%
		// of the sibling's share in sched-fair. Where the thread cannot leave (v2), it stays.
		k.StartProbe(time.Millisecond, *probeBudget, func() {
			if err := cgroupfair.LeaveWithThread(); err != nil && *cgroupPath != "" {
				fmt.Fprintf(os.Stderr, "endo: probe stays in the pod's cgroup: %v\n", err)
			}
		})
	}
	go func() {
		for s := range sigs {
			p.Signal(s.(syscall.Signal))
		}
	}()
	st := p.Wait()
	signal.Stop(sigs)
	if *probe {
		r := k.StopProbe()
		fmt.Fprintf(os.Stderr, "endo: probe: at most %d tasks runnable at once on %d vCPUs; %d of %d samples saw more than %d; carriers' stolen time %.3f ms\n",
			r.MostRunnable, k.VCPUs(), r.OverVCPUs, r.Samples, k.VCPUs(), float64(k.StolenTime())/1e6)
	}
	if st.OOMKilled {
		fmt.Fprintf(os.Stderr, "endo: %s was killed: out of memory (the sandbox's %d bytes are used up)\n", argv[0], *memory)
	}
	if st.Signal == unix.SIGSYS {
		fmt.Fprintf(os.Stderr, "endo: %s made a forbidden host system call and was killed (SIGSYS)\n", argv[0])
	}
	if *report {
		printReport(k.Unimplemented())
		r, w := k.Faults()
		fmt.Fprintf(os.Stderr, "endo: page faults served by the sandbox: %d reads, %d writes\n", r, w)
		sites, calls := k.PatchedCalls()
		fmt.Fprintf(os.Stderr, "endo: call sites patched: %d; calls through them: %d\n", sites, calls)
		fmt.Fprintf(os.Stderr, "endo: system calls served by the sandbox: %d\n", k.ServedCalls())
		rs := k.Rings()
		fmt.Fprintf(os.Stderr, "endo: rings of equal tasks: opened %d times, taken back %d times, open %.3f s in all; vCPUs asked of a ring again %d times\n",
			rs.Opened, rs.Closed, rs.Open.Seconds(), rs.AskedAgain)
		within, between := k.Switches()
		fmt.Fprintf(os.Stderr, "endo: slice-end switches: %d within a process, %d between processes\n", within, between)
	}
	return st.WaitStatus()
}

func printReport(calls map[string]int) {
	if len(calls) == 0 {
		fmt.Fprintln(os.Stderr, "endo: the program made no unimplemented system call")
		return
	}
	names := make([]string, 0, len(calls))
	for n := range calls {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(os.Stderr, "endo: unimplemented system calls (name: times):")
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %s: %d\n", n, calls[n])
	}
}
