package kernel

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The probe samples how many of the sandbox's tasks Linux has runnable at once, from the states of
// their threads: the carriers (host threads running a task's kernel side) and the stubs' tenant
// threads. The Go runtime's own threads (GC, timers, the control server) are not counted. The
// kernelet's promise is that the figure never exceeds the vCPU count.

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

// StartProbe samples every interval until StopProbe.
func (k *Kernel) StartProbe(interval time.Duration) {
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
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-pr.stop:
				return
			case <-tick.C:
			}
			n := k.runnableNow()
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

// runnableNow counts the tasks that Linux has runnable: a task's carrier and its stub thread hand
// the task back and forth, so a task counts once if either is in state R.
func (k *Kernel) runnableNow() int {
	k.mu.Lock()
	procs := make([]*Process, 0, len(k.procs))
	for _, p := range k.procs {
		procs = append(procs, p)
	}
	k.mu.Unlock()
	self := os.Getpid()
	n := 0
	for _, p := range procs {
		p.mu.Lock()
		tasks := append([]*Task(nil), p.tasks...)
		p.mu.Unlock()
		for _, t := range tasks {
			c := int(t.carrier.Load())
			if c != 0 && threadRunnable(self, c) || threadRunnable(p.stub.Pid(), t.th.Tid()) {
				n++
			}
		}
	}
	return n
}

// threadRunnable reads a thread's state from /proc/<pid>/task/<tid>/stat.
func threadRunnable(pid, tid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'R'
}

// recordCarrier records the host thread that runs the task's kernel side.
func (t *Task) recordCarrier() { t.carrier.Store(int32(unix.Gettid())) }
