package kernel

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The probe samples how many of the sandbox's tasks Linux has runnable at once, from the states of
// their threads: the carriers (host threads running a task's kernel side) and the stubs' tenant
// threads. The Go runtime's own threads (GC, timers, the control server) are not counted. The
// kernelet's promise is that the figure never exceeds the vCPU count.
//
// Beside it the kernel keeps the carriers' stolen time: how long they waited in a host run queue
// for a CPU (the second field of /proc/<pid>/task/<tid>/schedstat), which is what the pod lost to
// its neighbours and to its own oversubscription.

// ProbeResult is what the probe saw.
type ProbeResult struct {
	Samples      int
	MostRunnable int // the most tasks seen runnable in one sample
	OverVCPUs    int // samples with more tasks runnable than there are vCPUs
}

type probe struct {
	mu   sync.Mutex
	res  ProbeResult
	stop chan struct{}
	done chan struct{}
}

// StartProbe samples every interval, or less often when samples are costly: it spends at most
// 1/budget of a CPU (budget < 1: 1), until StopProbe. onThread, if not nil, is called first on
// the probe's own OS thread, which it keeps (to move the thread out of the pod's cgroup:
// cgroupfair.LeaveWithThread).
func (k *Kernel) StartProbe(interval time.Duration, budget int, onThread func()) {
	k.mu.Lock()
	if k.probe != nil {
		k.mu.Unlock()
		return
	}
	pr := &probe{stop: make(chan struct{}), done: make(chan struct{})}
	k.probe = pr
	k.mu.Unlock()
	go func() {
		defer close(pr.done)
		defer k.atCarrierWeight()()
		if onThread != nil {
			// Locked once more than atCarrierWeight unlocks: the thread ends with the probe
			// rather than go back to the runtime wherever onThread put it.
			runtime.LockOSThread()
			onThread()
		}
		defer batchWhile()()
		s := newSampler()
		defer s.close()
		// The thread sleeps in the host rather than on a Go timer: waking a locked goroutine
		// from a timer hands a P from thread to thread, which cost more than the sample.
		wait := interval
		last := threadCPU()
		for {
			// In steps, so that StopProbe does not wait out a long gap between costly samples
			// (with a small budget, seconds: the sandbox would not end on time).
			for left := wait; left > 0; left -= probeStep {
				ts := unix.NsecToTimespec(int64(min(left, probeStep)))
				unix.Nanosleep(&ts, nil)
				select {
				case <-pr.stop:
					return
				default:
				}
			}
			n := k.runnableNow(s)
			// A sample reads two /proc files a task (1-2 ms for fifty tasks here), and waking
			// this thread for it costs too: sampling every interval would keep a CPU busy, taken
			// from the load being measured. The probe's own CPU time from one sample to the next
			// (its thread runs nothing else) bounds its share.
			now := threadCPU()
			wait = max(interval, time.Duration(max(budget, 1))*(now-last))
			last = now
			pr.mu.Lock()
			pr.res.Samples++
			pr.res.MostRunnable = max(pr.res.MostRunnable, n)
			if n > k.sched.N() {
				pr.res.OverVCPUs++
			}
			pr.mu.Unlock()
		}
	}()
}

// probeStep is the longest the probe sleeps before it looks whether it is to stop.
const probeStep = 50 * time.Millisecond

// StopProbe ends the sampling and returns what it saw.
func (k *Kernel) StopProbe() ProbeResult {
	k.mu.Lock()
	pr := k.probe
	k.probe = nil
	k.mu.Unlock()
	if pr == nil {
		return ProbeResult{}
	}
	close(pr.stop)
	<-pr.done
	return pr.res
}

// runnableNow counts the tasks that Linux has runnable at one instant: a task's carrier and the
// runner that holds its context hand the task back and forth, so a task counts once if either is
// in state R. A runner moves from context to context (a switch, the ring) while the sample is
// taken: a host thread counts for one task at most.
//
// Reading fifty tasks' states takes 1-2 ms, and a vCPU handed from one thread to another in that
// time (a slice's end, a wake-up) would show both as runnable though they never were at once. So
// the threads first seen runnable are read twice more, all of them once and then all again: one
// that was runnable both times and made no voluntary switch in between (a sleep is one) was
// runnable throughout, and so at the instant between the two rounds. Only those count. Measured
// with 50 busy threads on 2 vCPUs, this changed little: 3 at once in 12 of 4662 samples (34
// runs), against 4 of 1484 (10 runs) counting every thread seen runnable; those are real
// overlaps, mostly a new thread's carrier beside the two runners of an open ring.
func (k *Kernel) runnableNow(s *sampler) int {
	k.mu.Lock()
	s.procs = s.procs[:0]
	for _, p := range k.procs {
		s.procs = append(s.procs, p)
	}
	k.mu.Unlock()
	self := os.Getpid()
	clear(s.seen)
	s.found = s.found[:0]
	for _, p := range s.procs {
		p.mu.Lock()
		s.tasks = append(s.tasks[:0], p.tasks...)
		p.mu.Unlock()
		for i, t := range s.tasks {
			for _, th := range [2]thread{{self, int(t.carrier.Load())}, {p.stub.Pid(), t.th.Tid()}} {
				if th.tid != 0 && s.runnable(th) {
					s.found = append(s.found, seenRunnable{task: t, th: th})
				}
			}
			s.tasks[i] = nil
		}
	}
	for i := range s.found {
		s.found[i].switches, s.found[i].ok = s.sleepless(s.found[i].th)
	}
	for i := range s.found {
		sw, ok := s.sleepless(s.found[i].th)
		s.found[i].ok = s.found[i].ok && ok && sw == s.found[i].switches
	}
	n := 0
	clear(s.counted)
	for i := 0; i < len(s.found); {
		// fresh: the task has a thread runnable throughout that no other task counted.
		t, fresh := s.found[i].task, false
		for ; i < len(s.found) && s.found[i].task == t; i++ {
			if f := s.found[i]; f.ok {
				fresh = fresh || !s.counted[f.th]
				s.counted[f.th] = true
			}
		}
		if fresh {
			n++
		}
	}
	clear(s.procs) // holds no process past the sample
	clear(s.found)
	for key, fd := range s.files {
		if !s.seen[key] {
			unix.Close(fd)
			delete(s.files, key)
		}
	}
	return n
}

// thread is a host thread: its process and thread ids.
type thread struct{ pid, tid int }

// seenRunnable is a thread a sample found runnable, for the task it counts for, with its
// voluntary switches when read again.
type seenRunnable struct {
	task     *Task
	th       thread
	switches int64
	ok       bool // runnable at both later reads, with no voluntary switch between them
}

// statFile names one of a thread's /proc files the sampler keeps open.
type statFile struct {
	th     thread
	status bool // status, else stat
}

// sampler is what the probe keeps from sample to sample. Its /proc/<pid>/task/<tid>/stat and
// status files stay open: on this kind of host an open and a close cost several times a read, and
// a sample reads two files a task and two more of each thread it finds runnable. Its maps, lists
// and buffer are reused: a sample's garbage, a few tens of KiB with fifty tasks, made the
// sandbox's GC run every few seconds of sched-fair's windows, and each cycle woke some 24 mark
// workers (a quarter of the Ps) in the pod's cgroup.
type sampler struct {
	files   map[statFile]int // open /proc files
	seen    map[statFile]bool
	counted map[thread]bool
	procs   []*Process
	tasks   []*Task
	found   []seenRunnable
	buf     [4096]byte
}

func newSampler() *sampler {
	return &sampler{files: map[statFile]int{}, seen: map[statFile]bool{}, counted: map[thread]bool{}}
}

// read reads one of a thread's /proc files through its open descriptor, and notes the file as in
// use. It returns nil once the thread has ended.
func (s *sampler) read(th thread, status bool) []byte {
	key := statFile{th, status}
	fd, ok := s.files[key]
	if !ok {
		name := "stat"
		if status {
			name = "status"
		}
		var err error
		fd, err = unix.Open(fmt.Sprintf("/proc/%d/task/%d/%s", th.pid, th.tid, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil
		}
		s.files[key] = fd
	}
	s.seen[key] = true
	n, err := unix.Pread(fd, s.buf[:], 0)
	if err != nil || n <= 0 {
		return nil // the thread has ended; its file goes after this sample
	}
	return s.buf[:n]
}

// runnable reads a thread's state from its stat file.
func (s *sampler) runnable(th thread) bool {
	b := s.read(th, false)
	// The state follows the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'R'
}

// sleepless reads a thread's state and voluntary switch count from its status file, which Linux
// makes in one go: ok says it is runnable.
func (s *sampler) sleepless(th thread) (switches int64, ok bool) {
	b := s.read(th, true)
	if !bytes.Contains(b, []byte("\nState:\tR")) {
		return 0, false
	}
	const key = "\nvoluntary_ctxt_switches:\t"
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	b = b[i+len(key):]
	if j := bytes.IndexByte(b, '\n'); j >= 0 {
		b = b[:j]
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		switches = 10*switches + int64(c-'0')
	}
	return switches, len(b) > 0
}

func (s *sampler) close() {
	for _, fd := range s.files {
		unix.Close(fd)
	}
}

// stolenBook is the carriers' run-queue wait. A carrier is an OS thread the task's goroutine
// holds only for the task's life (the thread goes back to the Go runtime after), so each task
// keeps the thread's count at its start, and an ended task's share is booked by container.
// Each thread's schedstat file stays open: a pread costs a few µs where an open costs ten more,
// and task start and end pay for it.
type stolenBook struct {
	mu    sync.Mutex
	live  map[*Task]carrierMark
	ended map[string]int64 // ns, by container id
	files map[int]int      // carrier thread id → its open schedstat file
}

type carrierMark struct {
	tid  int
	base int64 // the thread's run-queue wait (ns) when the task started on it
}

// ownWait reads the calling thread's run-queue wait through its cached file; b.mu is held.
func (b *stolenBook) ownWait(tid int) (int64, error) {
	if fd, ok := b.files[tid]; ok {
		if ns, err := readRunQueueWait(fd); err == nil {
			return ns, nil
		}
		// A thread of the same id that has ended: this thread is another one.
		unix.Close(fd)
		delete(b.files, tid)
	}
	fd, err := unix.Open("/proc/thread-self/schedstat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open /proc/thread-self/schedstat: %w", err)
	}
	if b.files == nil {
		b.files = map[int]int{}
	}
	b.files[tid] = fd
	return readRunQueueWait(fd)
}

// closeFiles closes the cached schedstat files (the kernel is closing).
func (b *stolenBook) closeFiles() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, fd := range b.files {
		unix.Close(fd)
	}
	b.files = nil
}

// recordCarrier records the host thread that runs the task's kernel side, and its run-queue wait
// so far. It runs on that thread.
func (t *Task) recordCarrier() {
	tid := unix.Gettid()
	t.carrier.Store(int32(tid))
	b := &t.p.k.stolen
	b.mu.Lock()
	defer b.mu.Unlock()
	base, err := b.ownWait(tid)
	if err != nil {
		return
	}
	if b.live == nil {
		b.live = map[*Task]carrierMark{}
	}
	b.live[t] = carrierMark{tid: tid, base: base}
}

// carrierDone books the task's stolen time when the task ends; it runs on the carrier still.
func (t *Task) carrierDone() {
	b := &t.p.k.stolen
	b.mu.Lock()
	defer b.mu.Unlock()
	m, ok := b.live[t]
	if !ok {
		return
	}
	delete(b.live, t)
	now, err := b.ownWait(m.tid)
	if err != nil || now <= m.base {
		return
	}
	if b.ended == nil {
		b.ended = map[string]int64{}
	}
	b.ended[t.p.c.id] += now - m.base
}

// stolenNanos is the run-queue wait of the carriers of a container's tasks, live and ended; all
// containers' when container is "".
func (k *Kernel) stolenNanos(container string) int64 {
	b := &k.stolen
	b.mu.Lock()
	defer b.mu.Unlock()
	var sum int64
	for id, ns := range b.ended {
		if container == "" || id == container {
			sum += ns
		}
	}
	for t, m := range b.live {
		if container != "" && t.p.c.id != container {
			continue
		}
		fd, ok := b.files[m.tid]
		if !ok {
			continue
		}
		if now, err := readRunQueueWait(fd); err == nil && now > m.base {
			sum += now - m.base
		}
	}
	return sum
}

// StolenTime is how long the carriers of all the kernel's tasks, live and ended, waited for a
// host CPU.
func (k *Kernel) StolenTime() time.Duration { return time.Duration(k.stolenNanos("")) }

// ProbeSoFar returns what a running probe has seen so far, and false when none runs.
func (k *Kernel) ProbeSoFar() (ProbeResult, bool) {
	k.mu.Lock()
	pr := k.probe
	k.mu.Unlock()
	if pr == nil {
		return ProbeResult{}, false
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.res, true
}

// readRunQueueWait reads the time a thread spent waiting on a run queue, in ns, from its open
// schedstat file: the second field of "run_ns wait_ns timeslices".
func readRunQueueWait(fd int) (int64, error) {
	var buf [96]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil {
		return 0, fmt.Errorf("read schedstat: %w", err)
	}
	f := bytes.Fields(buf[:n])
	if len(f) < 2 {
		return 0, fmt.Errorf("schedstat: %q is not a schedstat line", buf[:n])
	}
	ns, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("schedstat: %w", err)
	}
	return ns, nil
}
