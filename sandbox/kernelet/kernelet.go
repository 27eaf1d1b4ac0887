// Package kernelet schedules the sandbox's tenant tasks over its N vCPUs, so that Linux never
// sees more than N runnable threads of a pod: a task holds a vCPU while it runs tenant or kernel
// code and gives it back before it blocks; a carrier may spin only on a vCPU nobody else needs.
//
// This first version is one FIFO queue. It must never import the kernel proper, and never let a
// task run (or spin) without holding a vCPU.
package kernelet

import (
	"fmt"
	"sync"
)

// Kernelet owns the vCPUs of one sandbox.
type Kernelet struct {
	onWait  func() // called (without the lock) when a task has to wait for a vCPU
	mu      sync.Mutex
	n       int // the vCPUs there are to be; held ones beyond it go when released
	nextID  int
	vcpus   []*VCPU
	free    []*VCPU
	waiters []chan *VCPU // FIFO of tasks waiting for a vCPU
}

// VCPU is one of the sandbox's virtual CPUs.
type VCPU struct {
	ID int
}

// New makes a kernelet with n vCPUs.
func New(n int) (*Kernelet, error) {
	if n < 1 {
		return nil, fmt.Errorf("kernelet: %d vCPUs", n)
	}
	k := &Kernelet{n: n, nextID: n}
	for i := 0; i < n; i++ {
		v := &VCPU{ID: i}
		k.vcpus = append(k.vcpus, v)
	}
	for i := n - 1; i >= 0; i-- {
		k.free = append(k.free, k.vcpus[i])
	}
	return k, nil
}

// OnWait sets a function called whenever a task has to wait for a vCPU (after it is queued):
// the caller's cue to preempt a task that has run its time slice. Set it before use.
func (k *Kernelet) OnWait(f func()) { k.onWait = f }

// N is the number of vCPUs.
func (k *Kernelet) N() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n
}

// Resize changes the number of vCPUs (the pod's CPU limit changed): new ones serve waiting tasks
// at once; when shrinking, free vCPUs go first and held ones as their tasks give them back.
func (k *Kernelet) Resize(n int) error {
	if n < 1 {
		return fmt.Errorf("kernelet: %d vCPUs", n)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for len(k.vcpus) < n {
		v := &VCPU{ID: k.nextID}
		k.nextID++
		k.vcpus = append(k.vcpus, v)
		k.give(v)
	}
	k.n = n
	for len(k.vcpus) > n && len(k.free) > 0 {
		v := k.free[len(k.free)-1]
		k.free = k.free[:len(k.free)-1]
		k.drop(v)
	}
	return nil
}

// give hands a vCPU to the first waiter or puts it in the free set (k.mu held).
func (k *Kernelet) give(v *VCPU) {
	if len(k.waiters) > 0 {
		ch := k.waiters[0]
		k.waiters = k.waiters[1:]
		ch <- v
		return
	}
	k.free = append(k.free, v)
}

// drop removes a vCPU for good (k.mu held).
func (k *Kernelet) drop(v *VCPU) {
	for i, x := range k.vcpus {
		if x == v {
			k.vcpus = append(k.vcpus[:i], k.vcpus[i+1:]...)
			return
		}
	}
}

// Acquire blocks until a vCPU is free and gives it to the caller; waiters are served in order.
func (k *Kernelet) Acquire() *VCPU {
	k.mu.Lock()
	if n := len(k.free); n > 0 && len(k.waiters) == 0 {
		v := k.free[n-1]
		k.free = k.free[:n-1]
		k.mu.Unlock()
		return v
	}
	ch := make(chan *VCPU, 1)
	k.waiters = append(k.waiters, ch)
	k.mu.Unlock()
	if k.onWait != nil {
		k.onWait()
	}
	return <-ch
}

// TryAcquire takes a free vCPU if one is free and nobody waits for it, without blocking.
// Carriers use it to borrow an idle vCPU's time for spinning.
func (k *Kernelet) TryAcquire() *VCPU {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n := len(k.free); n > 0 && len(k.waiters) == 0 {
		v := k.free[n-1]
		k.free = k.free[:n-1]
		return v
	}
	return nil
}

// Waiting reports whether some task waits for a vCPU: a borrowed vCPU must then be returned.
func (k *Kernelet) Waiting() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.waiters) > 0
}

// Release gives a vCPU back: to the first waiter, or to the free set, or away when the kernelet
// has shrunk.
func (k *Kernelet) Release(v *VCPU) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.vcpus) > k.n {
		k.drop(v)
		return
	}
	k.give(v)
}

// Idle is the number of free vCPUs.
func (k *Kernelet) Idle() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.free)
}
