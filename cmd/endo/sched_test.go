package main

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The kernelet's promises, seen from tenant programs (tenants/sched.c).

// fields parses a tenant's "key=value ..." line into integers.
func fields(t *testing.T, line string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, m := range regexp.MustCompile(`(\w+)=(-?\d+)`).FindAllStringSubmatch(line, -1) {
		v, err := strconv.ParseInt(m[2], 10, 64)
		require.NoError(t, err, line)
		out[m[1]] = v
	}
	require.NotEmpty(t, out, "no fields in %q", line)
	return out
}

// probeCounts reads the probe's line from endo run's stderr: the most tasks seen runnable at once,
// the samples that saw more than vcpus, and the samples.
func probeCounts(t *testing.T, stderr string, vcpus int) (most, over, samples int) {
	t.Helper()
	m := regexp.MustCompile(`probe: at most (\d+) tasks runnable at once on (\d+) vCPUs; (\d+) of (\d+) samples`).FindStringSubmatch(stderr)
	require.NotNil(t, m, stderr)
	require.Equal(t, strconv.Itoa(vcpus), m[2], stderr)
	most, _ = strconv.Atoi(m[1])
	over, _ = strconv.Atoi(m[3])
	samples, _ = strconv.Atoi(m[4])
	return most, over, samples
}

func endoCPUs(t *testing.T, cpus string, args ...string) result {
	t.Helper()
	return runCmd(t, "", endoBin, append([]string{"run", "--cpus", cpus, "--rootfs", rootfs, "--"}, args...)...)
}

// Fifty busy threads on two vCPUs: Linux sees about two of the sandbox's tasks runnable at once
// (the probe samples the carriers' and stub threads' states). The kernelet never lets more than
// two tasks hold vCPUs (its own tests), but a hand-off between two host threads is "wake the
// other, then sleep": between the two (microseconds; milliseconds when the one that woke the
// other waits for a CPU) both are runnable, and a sample that falls there sees three. In 30 runs,
// 18 of them beside two busy loops or a build, the most was 3, and at most 4 samples of 500-1000
// saw more than 2, nearly all as threads started or ended; a fresh-clone CI run saw 4. So this
// test bounds the most at 4 and the samples over 2 at 5%; ENDO_STRICT_PROBE=1 asks for the strict
// promise (at most two in every sample). When a new thread's carrier did its setup beside its
// creator (before Task.start waited for it), a burst of clones showed up to 9. The probe counts a
// thread only if it stayed runnable over two reads (kernel/probe.go), so a scan that passes a
// hand-off does not count both ends: with it, 3 in 12 of 4662 samples (34 runs, 10 of them saw
// one), mostly a new thread's carrier beside the two runners of an open ring. With a new
// thread's carrier handed its task only once set up (Task.start), 10 of 40 runs saw three (2 of
// 40 with the stubs' threads at SCHED_BATCH, which slowed thread start: kernel/weight.go); the
// rate moves with the host's load from hour to hour. The threads take turns in a ring (--report
// says so).
func TestProbeSeesAtMostNRunnable(t *testing.T) {
	got := runCmd(t, "", endoBin, "run", "--cpus", "2", "--probe", "--report", "--rootfs", rootfs, "--", "/bin/sched", "busy", "50", "3000")
	require.Equal(t, 0, got.code, got.stderr)
	most, over, samples := probeCounts(t, got.stderr, 2)
	require.GreaterOrEqual(t, samples, 20, got.stderr)
	require.GreaterOrEqual(t, most, 1, "the busy threads were seen running")
	if os.Getenv("ENDO_STRICT_PROBE") != "" {
		require.LessOrEqual(t, most, 2, got.stderr)
	}
	// Without the kernelet all fifty would be runnable in every sample.
	require.LessOrEqual(t, most, 4, got.stderr)
	require.LessOrEqual(t, float64(over), 0.05*float64(samples), got.stderr)
	require.Greater(t, fields(t, got.stdout)["work"], int64(0))
	// Equals of one process take turns on the stub's runners, without the sandbox: a ring.
	r := regexp.MustCompile(`rings of equal tasks: opened (\d+) times, taken back \d+ times, open ([0-9.]+) s`).FindStringSubmatch(got.stderr)
	require.NotNil(t, r, got.stderr)
	opened, _ := strconv.Atoi(r[1])
	open, _ := strconv.ParseFloat(r[2], 64)
	require.GreaterOrEqual(t, opened, 1, got.stderr)
	require.Greater(t, open, 0.0, got.stderr)
	requireNoStubs(t)
}

// Fifty busy threads in two processes on two vCPUs: Linux sees no more than two of the sandbox's
// threads runnable but in rare samples. The bound is 6% of samples: since the Go runtime has a P
// more than the pod has vCPUs (weight.go), a carrier the host wakes runs its few microseconds to
// the kernelet at once, beside the two runners, and the probe sees it: 0-13 of 300-420 samples in
// eight runs (1.5% on average, 3.8% at most), where it was 0-1 of ~210.
//
// At a slice's end a vCPU stays with its process while that has a thread within a slice of the
// best waiter (kernelet.OnKin), so the two processes settle one on each vCPU, and then each
// process's threads go to a ring of their own on its vCPU: the stub's runner takes the slices, and
// neither the kernelet's ticker nor a carrier wakes for them. A switch the kernelet makes before
// the rings open is mostly within a process (0-16 of 440-510 in 3 s without the rings; without
// the kin rule half of them were between processes). When a process's runner hands the vCPU to
// the other's, the one starts only once the other has stopped: before, the two ran at once for as
// long as the stop signal took, a sample in eight saw three or four, and the pod took up to 1.26
// CPUs beside a sibling cgroup of equal weight (fair: 1).
func TestProbeTwoProcessesTakeTurns(t *testing.T) {
	got := runCmd(t, "", endoBin, "run", "--cpus", "2", "--probe", "--probe-budget", "20", "--report", "--rootfs", rootfs, "--", "/bin/schedbench", "fair", "50", "5", "procs")
	require.Equal(t, 0, got.code, got.stderr)
	require.Contains(t, got.stdout, "fair ok 50")
	_, over, samples := probeCounts(t, got.stderr, 2)
	require.GreaterOrEqual(t, samples, 100, got.stderr)
	require.LessOrEqual(t, float64(over), 0.06*float64(samples), got.stderr)
	// --report: the processes' rings were open for much of the run (two rings over 5 s: up to
	// 10 s in all, 5.4-7.8 s seen in 8 runs), and the kernelet's own slice-end switches mostly
	// stayed within a process. The window counts from the tenant's start, and its threads took
	// 0.7-1.9 s to start in those runs: with a 3 s window (up to 6 s of rings) the open time was
	// 1.7-4.6 s in an hour when the host was slow, below the 2 s asked then.
	r := regexp.MustCompile(`rings of equal tasks: opened (\d+) times, taken back \d+ times, open ([0-9.]+) s`).FindStringSubmatch(got.stderr)
	require.NotNil(t, r, got.stderr)
	opened, _ := strconv.Atoi(r[1])
	open, _ := strconv.ParseFloat(r[2], 64)
	require.GreaterOrEqual(t, opened, 2, "a ring a process: %s", got.stderr)
	require.GreaterOrEqual(t, open, 3.0, got.stderr)
	sw := regexp.MustCompile(`slice-end switches: (\d+) within a process, (\d+) between processes`).FindStringSubmatch(got.stderr)
	require.NotNil(t, sw, got.stderr)
	within, _ := strconv.Atoi(sw[1])
	between, _ := strconv.Atoi(sw[2])
	require.LessOrEqual(t, 4*between, within+between, got.stderr)
	requireNoStubs(t)
}

// A nice 19 busy thread gets far less of a vCPU than a nice 0 one (Linux: ~1.5%).
func TestNiceShares(t *testing.T) {
	got := endoCPUs(t, "1", "/bin/sched", "nice", "1000")
	require.Equal(t, 0, got.code, got.stderr)
	f := fields(t, got.stdout)
	require.Greater(t, f["nice0"], int64(0), got.stdout)
	require.GreaterOrEqual(t, f["nice0"], 5*f["nice19"], got.stdout)
}

// A SCHED_FIFO thread that wakes from a 2 ms sleep preempts a busy SCHED_OTHER thread on the only
// vCPU at once, not at the end of the busy thread's 10 ms slice.
func TestFIFOPreemptsBusyThread(t *testing.T) {
	got := endoCPUs(t, "1", "/bin/sched", "fifo", "100", "2")
	require.Equal(t, 0, got.code, got.stderr)
	f := fields(t, got.stdout)
	require.Less(t, f["median_us"], int64(5000), "the median wake is late by more than half a slice: %s", got.stdout)
}

// The same load with the probe: the sleeper's end does not wake its carrier to find the only
// vCPU taken. The kernel's timer thread places the sleeper and the busy thread gives way; the
// sleeper's carrier wakes once it holds the vCPU, so Linux sees one of the two runnable.
// Measured in 12 interleaved runs of 500 sleeps: with the carrier's own host timer, 75 of 3863
// samples saw two (4-9 a run, none below 1.3%); with the timer thread and the probe at
// SCHED_BATCH (a probe that preempted a carrier about to sleep counted it), 4 of 3935 (at most
// 3 a run, 0.84%), and 6 of 4923 in another 12.
func TestSleepEndHoldsNoExtraThread(t *testing.T) {
	got := runCmd(t, "", endoBin, "run", "--cpus", "1", "--probe", "--rootfs", rootfs, "--", "/bin/sched", "fifo", "1000", "2")
	require.Equal(t, 0, got.code, got.stderr)
	require.Contains(t, got.stdout, "median_us=")
	_, over, samples := probeCounts(t, got.stderr, 1)
	require.GreaterOrEqual(t, samples, 200, got.stderr)
	require.LessOrEqual(t, 100*over, samples, "more than 1%% of samples saw the sleeper's carrier beside the busy thread: %s", got.stderr)
}

// Threads blocked in a pipe read, a futex wait and nanosleep hold no vCPU: a busy thread beside
// ten of them does about as much work as alone, and they all wake when their event comes. Both
// runs are pinned to the same host CPU: on this kind of machine one CPU runs the same loop ~1.5x
// as fast as the other, which made unpinned runs differ by that much. The two kinds of run take
// turns three times and the best of each counts: the host's speed also drifts within seconds
// (by hand, one binary's ratio went 0.77-1.39 over a few pairs, and a CI run with two pairs saw
// 0.685).
func TestBlockedThreadsHoldNoVCPU(t *testing.T) {
	pinned := func(args ...string) result {
		return runCmd(t, "", "taskset", append([]string{"-c", "0", endoBin, "run", "--cpus", "1", "--rootfs", rootfs, "--"}, args...)...)
	}
	var alone, beside int64
	for i := 0; i < 3; i++ {
		got := pinned("/bin/sched", "blocked", "0", "700")
		require.Equal(t, 0, got.code, got.stderr)
		alone = max(alone, fields(t, got.stdout)["work"])
		got = pinned("/bin/sched", "blocked", "10", "700")
		require.Equal(t, 0, got.code, got.stderr)
		f := fields(t, got.stdout)
		require.Equal(t, int64(10), f["woke"], got.stdout)
		beside = max(beside, f["work"])
	}
	require.Greater(t, alone, int64(0))
	require.GreaterOrEqual(t, float64(beside), 0.7*float64(alone), "alone %d, beside 10 blocked threads %d", alone, beside)
	requireNoStubs(t)
}

// Two processes on one vCPU that call sched_yield in a loop hand the vCPU to each other: the
// tenant merges both processes' yield times and counts how often the next yield came from the
// other process (alt; 1 is strict alternation). The parent starts yielding once a pipe read
// tells it the child has started, and the carrier woken from that read can be late by tens of ms
// on a busy CPU (with as many Go Ps as vCPUs it found none free: 4 runs in 12 of 3000 yields each
// alternated under 0.9; with one P more, 0-3 runs in 30 of 2000 yields still under 0.5, while
// the stubs' reapers held Ps in waitid; with the reapers in the poller, 0 in 40), so that the
// child yields to nobody meanwhile. 20000 yields each outlast any such start.
func TestYieldAlternatesBetweenProcesses(t *testing.T) {
	for i := 0; i < 3; i++ {
		got := runCmd(t, "", "taskset", "-c", "0", endoBin, "run", "--cpus", "1", "--rootfs", rootfs, "--", "/bin/schedbench", "yieldprocs", "20000")
		require.Equal(t, 0, got.code, got.stderr)
		m := regexp.MustCompile(`alt=([0-9.]+)`).FindStringSubmatch(got.stdout)
		require.NotNil(t, m, got.stdout)
		alt, _ := strconv.ParseFloat(m[1], 64)
		require.GreaterOrEqual(t, alt, 0.5, "run %d: the processes did not take turns: %s", i, got.stdout)
	}
	requireNoStubs(t)
}

// A process that only yields still takes its signals: its yields come from a patched call site
// (a single-threaded tenant), and a signal sent while it waits for its turn must reach it. The
// child yields until it has taken 2000 SIGUSR1s from its parent, which sends one between yields.
func TestYieldingProcessTakesSignals(t *testing.T) {
	for _, cpus := range []string{"1", "2"} {
		got := runCmd(t, "", "timeout", "60", "taskset", "-c", "0", endoBin, "run", "--cpus", cpus, "--rootfs", rootfs, "--", "/bin/schedbench", "yieldsignal", "2000")
		require.Equal(t, 0, got.code, "--cpus %s: %s", cpus, got.stderr)
		require.Contains(t, got.stdout, "yieldsignal ok signals=2000", "--cpus %s", cpus)
	}
	requireNoStubs(t)
}

// Two threads of one process yielding to each other on one vCPU: each yield lets the other run
// (alt, as Linux's), and once the kernelet has handed the pair to a ring their yields are turns
// the stub takes without the sandbox: of 40000 yields the sandbox serves fewer than half (it
// served every one before; the ring opens at the preemption ticker's first look, which a busy
// host can make late by ~100 ms, a few thousand yields).
func TestYieldBetweenThreadsStaysInStub(t *testing.T) {
	got := runCmd(t, "", "taskset", "-c", "0", endoBin, "run", "--report", "--cpus", "1", "--rootfs", rootfs, "--", "/bin/schedbench", "yieldthreads", "20000")
	require.Equal(t, 0, got.code, got.stderr)
	m := regexp.MustCompile(`alt=([0-9.]+)`).FindStringSubmatch(got.stdout)
	require.NotNil(t, m, got.stdout)
	alt, _ := strconv.ParseFloat(m[1], 64)
	require.GreaterOrEqual(t, alt, 0.9, "the threads did not take turns at their yields: %s", got.stdout)
	m = regexp.MustCompile(`system calls served by the sandbox: (\d+)`).FindStringSubmatch(got.stderr)
	require.NotNil(t, m, got.stderr)
	served, _ := strconv.Atoi(m[1])
	require.Less(t, served, 20000, "the sandbox served most of the 40000 yields: %s", got.stderr)
	requireNoStubs(t)
}

// Eight threads that only yield, turns their process's ring takes in the stub without waking
// any carrier, while the main thread sleeps 2 ms 500 times: each end of a sleep must take the
// vCPU back from the ring. With as many Go Ps as vCPUs and one more, the woken carrier found every
// P held by the yielders' sleeping carriers and waited for the runtime's monitor, which runs late
// on a busy CPU: 2000 sleeps took 12-27 s (4.2 s natively), and under load seemed to hang. This
// checks that the sleeps end; how late each one is, sched-perf's row 6 measures.
func TestSleepEndsAmongYielders(t *testing.T) {
	for _, cpus := range []string{"1", "2"} {
		got := runCmd(t, "", "timeout", "60", endoBin, "run", "--cpus", cpus, "--rootfs", rootfs, "--", "/bin/schedbench", "yieldsleep", "8", "500")
		require.NotEqual(t, 124, got.code, "--cpus %s: the sleeps did not end in 60 s", cpus)
		require.Equal(t, 0, got.code, got.stderr)
		m := regexp.MustCompile(`yieldsleep ok yields=(\d+)`).FindStringSubmatch(got.stdout)
		require.NotNil(t, m, got.stdout)
		yields, _ := strconv.Atoi(m[1])
		require.Greater(t, yields, 0, "--cpus %s: the yielders never ran", cpus)
	}
	requireNoStubs(t)
}

// The scheduling calls: affinity within the pod's vCPUs, nice round trips, policies.
func TestSchedulingCalls(t *testing.T) {
	got := endoCPUs(t, "2", "/bin/sched", "api")
	require.Equal(t, result{"ok cpus=2 nprocs=2\nok affinity\nok priority\nok scheduler\n", "", 0}, got)
	require.Equal(t, result{"2\n", "", 0}, endoCPUs(t, "2", "busybox", "nproc"))
	require.Equal(t, result{"1\n", "", 0}, endoCPUs(t, "1", "busybox", "nproc"))
	// The same program natively checks the test itself against Linux.
	require.Equal(t, 0, native(t, "/bin/sched", "api").code)
}

// The kernelet's measurements for sched-perf return one sample per round.
func TestKerneletMeasurements(t *testing.T) {
	for name, f := range map[string]func(int) []time.Duration{
		"yield":     kerneletYieldRoundTrip,
		"wake":      kerneletWakeSameVCPU,
		"wake-kick": kerneletWakeKick,
	} {
		t.Run(name, func(t *testing.T) {
			s := f(200)
			require.Len(t, s, 200)
			for _, d := range s {
				require.Greater(t, d, time.Duration(0))
			}
		})
	}
}
