package crossing

import (
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The ring lets a stub's runners take turns with parked contexts of their process on their own:
// each runner's slice timer (SIG_SLICE, every SliceNanos of its CPU time) parks the context it
// runs and takes the next parked one, in the stub's signal handler. No sandbox thread wakes for a
// slice, so a process with more busy threads than vCPUs looks to Linux like as many busy threads
// as it holds vCPUs. The sandbox opens the ring when only such equals wait, and closes it before
// it schedules any of them itself again.

// SliceNanos is the CPU time a runner runs one context before it takes the next from the ring.
const SliceNanos = sliceNS

func (s *Stub) ringU32(off int) *uint32 { return s.u32(sysmsgRing + off) }

// lockRing takes the ring's lock, which a runner holds for a few instructions. Tenant code can
// write the word; after a millisecond the sandbox goes on without the lock, which can only
// confuse the tenant's own process.
func (s *Stub) lockRing() bool {
	l := s.ringU32(ringLock)
	deadline := time.Now().Add(time.Millisecond)
	for i := 0; ; i++ {
		if atomic.CompareAndSwapUint32(l, 0, 1) {
			return true
		}
		if i > 100 {
			if time.Now().After(deadline) {
				return false
			}
			runtime.Gosched()
		}
	}
}

func (s *Stub) unlockRing(held bool) {
	if held {
		atomic.StoreUint32(s.ringU32(ringLock), 0)
	}
}

// OpenRing lets the runners that run held take turns with parked. It changes nothing and returns
// false if a ring is open already, or unless every context of held runs tenant code on a runner
// of its own with no switch ordered and every context of parked waits parked; otherwise it
// returns the runners of held, in order.
func (s *Stub) OpenRing(held, parked []*Thread) ([]int, bool) {
	s.mu.Lock() // the sysmsg mapping stays while it is held
	defer s.mu.Unlock()
	if s.sysmsg == nil || len(parked) == 0 || len(parked) > ringSize ||
		atomic.LoadUint32(s.ringU32(ringOpen)) != 0 {
		return nil, false
	}
	runners := make([]int, len(held))
	seen := map[int]bool{}
	for i, t := range held {
		r := t.runner()
		if t.stub != s || r < 0 || seen[r] || atomic.LoadUint32(t.state) != stateResume ||
			atomic.LoadUint32(s.runnerU32(r, runCur)) != uint32(t.index) ||
			atomic.LoadUint32(s.runnerU32(r, runNext)) != runNone {
			return nil, false
		}
		seen[r] = true
		runners[i] = r
	}
	for _, t := range parked {
		if t.stub != s || atomic.LoadUint32(t.state) != stateParked || t.parkedInCall.Load() {
			return nil, false
		}
	}
	locked := s.lockRing()
	defer s.unlockRing(locked)
	for i, t := range parked {
		atomic.StoreUint32(s.ringU32(ringEnts+4*i), uint32(t.index))
	}
	atomic.StoreUint32(s.ringU32(ringHead), 0)
	atomic.StoreUint32(s.ringU32(ringTail), uint32(len(parked)))
	for _, r := range runners {
		atomic.StoreUint32(s.runnerU32(r, runRing), 1)
		s.floatRunner(r)
	}
	atomic.StoreUint32(s.ringU32(ringOpen), 1)
	return runners, true
}

// CloseRing ends the turns and returns the context each of runners holds now (nil where it holds
// none the sandbox knows, or one already named for an earlier runner). Contexts the ring held
// stay parked.
func (s *Stub) CloseRing(runners []int) []*Thread {
	out := make([]*Thread, len(runners))
	s.mu.Lock() // the sysmsg mapping stays while it is held
	defer s.mu.Unlock()
	if s.sysmsg == nil {
		return out
	}
	atomic.StoreUint32(s.ringU32(ringOpen), 0)
	locked := s.lockRing()
	defer s.unlockRing(locked)
	atomic.StoreUint32(s.ringU32(ringHead), atomic.LoadUint32(s.ringU32(ringTail)))
	for r := 0; r < int(s.nrunners.Load()); r++ {
		atomic.StoreUint32(s.runnerU32(r, runRing), 0)
	}
	taken := map[*Thread]bool{}
	for i, r := range runners {
		if t := s.contextOn(r); t != nil && !taken[t] {
			taken[t] = true
			out[i] = t
		}
	}
	return out
}

// contextOn is the context runner r holds, or nil (s.mu held).
func (s *Stub) contextOn(r int) *Thread {
	if r < 0 || r >= int(s.nrunners.Load()) {
		return nil
	}
	c := atomic.LoadUint32(s.runnerU32(r, runCur))
	if c >= sysmsgMaxThreads {
		return nil
	}
	return s.threads[c]
}

// TakeTurns puts the runner that holds the context (stopped in the sandbox, or running) among
// the ring's runners, or (on false) takes it out: its next slices no longer rotate. It returns
// the runner, or -1 if the context is on none.
func (t *Thread) TakeTurns(on bool) int {
	s := t.stub
	s.mu.Lock() // the sysmsg mapping stays while it is held
	defer s.mu.Unlock()
	if s.sysmsg == nil {
		return -1
	}
	r := t.runner()
	if r < 0 || atomic.LoadUint32(s.runnerU32(r, runCur)) != uint32(t.index) {
		return -1
	}
	v := uint32(0)
	if on {
		v = 1
		s.floatRunner(r)
	}
	atomic.StoreUint32(s.runnerU32(r, runRing), v)
	return r
}

// RingPush puts a parked context at the ring's tail. It fails if the ring is closed or full, or
// the context is not parked.
func (s *Stub) RingPush(t *Thread) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sysmsg == nil || t.stub != s || atomic.LoadUint32(s.ringU32(ringOpen)) == 0 {
		return false
	}
	locked := s.lockRing()
	defer s.unlockRing(locked)
	head, tail := atomic.LoadUint32(s.ringU32(ringHead)), atomic.LoadUint32(s.ringU32(ringTail))
	if tail-head >= ringSize || atomic.LoadUint32(t.state) != stateParked || t.parkedInCall.Load() {
		return false
	}
	atomic.StoreUint32(s.ringU32(ringEnts+4*int(tail%ringSize)), uint32(t.index))
	atomic.StoreUint32(s.ringU32(ringTail), tail+1)
	return true
}

// RingPop takes the first context still parked off the ring's head (the others before it are
// stale: taken by the sandbox meanwhile), or returns nil. The context stays parked.
func (s *Stub) RingPop() *Thread {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sysmsg == nil || atomic.LoadUint32(s.ringU32(ringOpen)) == 0 {
		return nil
	}
	locked := s.lockRing()
	defer s.unlockRing(locked)
	head, tail := atomic.LoadUint32(s.ringU32(ringHead)), atomic.LoadUint32(s.ringU32(ringTail))
	if tail-head > ringSize {
		head = tail // written by tenant code: nothing in it can be trusted
	}
	for ; head != tail; head++ {
		c := atomic.LoadUint32(s.ringU32(ringEnts + 4*int(head%ringSize)))
		if c >= sysmsgMaxThreads {
			continue
		}
		if t := s.threads[c]; t != nil && atomic.LoadUint32(t.state) == stateParked && !t.parkedInCall.Load() {
			atomic.StoreUint32(s.ringU32(ringHead), head+1)
			return t
		}
	}
	atomic.StoreUint32(s.ringU32(ringHead), head)
	return nil
}

// RingKick takes runner r out of the ring's turns and makes the context it runs trap, so that its
// carrier gives the runner's vCPU up.
func (s *Stub) RingKick(r int) {
	if r < 0 || r >= int(s.nrunners.Load()) {
		return
	}
	s.mu.Lock()
	if s.sysmsg != nil {
		atomic.StoreUint32(s.runnerU32(r, runRing), 0)
	}
	s.mu.Unlock()
	unix.Tgkill(s.pid, s.runnerTid(r), sigPreempt)
}

// Runner is the index of the runner that holds the context, or -1.
func (t *Thread) Runner() int { return t.runner() }

// Running reports whether the context runs tenant code on a runner (it is neither stopped in the
// sandbox nor parked); a released stub's contexts do not.
func (t *Thread) Running() bool {
	release, ok := t.stub.hold()
	if !ok {
		return false
	}
	defer release()
	return atomic.LoadUint32(t.state) == stateResume
}
