package crossing

import (
	"runtime"
	"sync/atomic"
	"time"
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
// false if a ring is open already, or unless every context of held runs tenant code on a runner of its own with no switch
// ordered, and every context of parked waits parked; otherwise it returns the runners of held, in
// order, which CloseRing takes.
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
		if t.stub != s || atomic.LoadUint32(t.state) != stateParked {
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
	taken := map[*Thread]bool{}
	for i, r := range runners {
		c := atomic.LoadUint32(s.runnerU32(r, runCur))
		if c >= sysmsgMaxThreads {
			continue
		}
		if t := s.threads[c]; t != nil && !taken[t] {
			taken[t] = true
			out[i] = t
		}
	}
	return out
}

// Running reports whether the context runs tenant code on a runner (it is neither stopped in the
// sandbox nor parked).
func (t *Thread) Running() bool { return atomic.LoadUint32(t.state) == stateResume }
