// Package park lets a carrier (a goroutine locked to its host thread) sleep until another
// wakes it, through a host futex: the wake-up is one host system call that reaches the
// sleeping thread directly. It is for goroutines locked to their thread (any other's sleep
// holds a host thread the Go runtime cannot use meanwhile), and must never import the kernel
// proper.
package park

import (
	"sync/atomic"
	"time"
)

// Parker lets one carrier (a goroutine locked to its host thread) sleep until another wakes
// it, through a host futex: the wake-up is one host system call that reaches the sleeping
// thread directly. A Go channel would instead make the runtime hand a P from thread to
// thread (a locked goroutine runs only on its own thread), which costs tens of µs on a
// paravirtualised host. Meant for locked goroutines: the sleep holds the thread.
// The zero value is ready.
type Parker struct {
	word     atomic.Uint32
	sleeping atomic.Uint32
}

// Ticket returns the current wake count: take it before checking the condition you wait
// for, then Wait with it, so that a Wake in between is not lost.
func (p *Parker) Ticket() uint32 { return p.word.Load() }

// Wake ends the carrier's current Wait, or its next one with an older ticket.
func (p *Parker) Wake() {
	p.word.Add(1)
	if p.sleeping.Load() != 0 {
		futexWake(&p.word)
	}
}

// parkSpins is how many times Wait looks at the word before it sleeps: a wake that is
// already on its way costs less than a sleep.
const parkSpins = 64

// Until sleeps until ready reports true; whoever makes it true must Wake after. ready is looked
// at once before each sleep, with a ticket taken before it, so that no Wake is lost.
func (p *Parker) Until(ready func() bool) {
	for {
		ticket := p.Ticket()
		if ready() {
			return
		}
		p.Wait(ticket, time.Time{})
	}
}

// Wait sleeps until a Wake after ticket was taken or until deadline (zero: none), and
// reports whether it was woken. The host sees a blocking system call: the Go runtime may
// run other goroutines on the carrier's P meanwhile.
func (p *Parker) Wait(ticket uint32, deadline time.Time) bool {
	for i := 0; i < parkSpins; i++ {
		if p.word.Load() != ticket {
			return true
		}
	}
	p.sleeping.Store(1)
	defer p.sleeping.Store(0)
	for p.word.Load() == ticket {
		d := time.Duration(-1)
		if !deadline.IsZero() {
			if d = time.Until(deadline); d <= 0 {
				return false
			}
		}
		futexWait(&p.word, ticket, d)
	}
	return true
}
