package kernel

import (
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"
)

// Resource usage. A process's user time is what its stub's threads ran (the stub process's
// CPU clock, read when the process starts in the stub and when it ends: stubs serve one
// process after another); its system time is what the carriers ran on its behalf (their own
// thread CPU clocks around each task's life).

// usage is what getrusage and wait4 report.
type usage struct {
	user, sys time.Duration
	faults    uint64
	maxRSS    int64 // bytes; for children, the largest child's (as Linux)
}

func (u *usage) add(o usage) {
	u.user += o.user
	u.sys += o.sys
	u.faults += o.faults
	u.maxRSS = max(u.maxRSS, o.maxRSS)
}

// put writes u as a struct rusage (x86-64: two timevals, then longs; ru_minflt at 64).
func (u usage) put(ru *[144]byte) {
	binary.LittleEndian.PutUint64(ru[0:], uint64(u.user/time.Second))
	binary.LittleEndian.PutUint64(ru[8:], uint64(u.user%time.Second/time.Microsecond))
	binary.LittleEndian.PutUint64(ru[16:], uint64(u.sys/time.Second))
	binary.LittleEndian.PutUint64(ru[24:], uint64(u.sys%time.Second/time.Microsecond))
	binary.LittleEndian.PutUint64(ru[32:], uint64(u.maxRSS>>10)) // ru_maxrss, in KiB
	binary.LittleEndian.PutUint64(ru[64:], u.faults)
}

// threadCPU is the calling thread's CPU time (a carrier is locked to its thread).
func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// processCPU is the CPU time of host process pid (its CPU clock: Linux's CPUCLOCK_SCHED).
func processCPU(pid int) time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(int32(^pid<<3|2), &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// startUsage notes the stub's CPU clock as the process starts in it.
func (p *Process) startUsage() { p.stubCPU0 = processCPU(p.stub.Pid()) }

// endUsage fixes the process's user time and peak memory as it ends, before its stub serves
// another and its address space goes.
func (p *Process) endUsage() {
	p.user.Store(int64(max(0, processCPU(p.stub.Pid())-p.stubCPU0)))
	p.maxRSS.Store(p.as.PeakResidentBytes())
	p.userFixed.Store(true)
}

// usage is the process's own resource usage so far.
func (p *Process) usage() usage {
	user := time.Duration(p.user.Load())
	if !p.userFixed.Load() && p.stub != nil {
		user = max(0, processCPU(p.stub.Pid())-p.stubCPU0)
	}
	maxRSS := p.maxRSS.Load()
	if !p.userFixed.Load() && p.as != nil {
		maxRSS = p.as.PeakResidentBytes()
	}
	return usage{user: user, sys: time.Duration(p.cpu.Load()), faults: p.faults.Load(), maxRSS: maxRSS}
}
