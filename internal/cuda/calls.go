package cuda

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fence"
	"github.com/pinmalloc/pinmalloc/internal/procpin"
)

// Calls in flight and Close.
//
// Close gives back the Device's primary-context retain; when it was the last, the driver
// destroys the context and frees everything in it. A call that passed its closed check an
// instant before must not find its context gone, so each call that asks the driver anything
// counts itself in flight (enter, exit), and Close, once it has marked the Device closed,
// waits for the count to reach zero before it releases: the calls in flight end normally, and
// the calls that start after fail with ErrClosed.
//
// A call nested in a call of the same Device in flight on the same goroutine (a method, or a
// Do, called in a function given to Do) still runs after Close began: Close waits for the outer
// call, which waits for it. The package tells a nested call by the OS thread: Do records its
// Device's tag in the thread's C storage for as long as its context is pushed (the thread is
// locked to the goroutine meanwhile), and a call that finds the Device closed looks for the tag
// there (driver.inDo) before it gives up. Close itself, called in a Do of its Device, cannot
// wait for that Do and refuses (ErrBusy).
//
// The count costs no lock and no atomic write to a shared cache line, where P numbers are exact
// and the kernel has private expedited membarrier (procpin.Exact, fence.Available): a call
// counts itself in a slot of its P's, written only by goroutines pinned to that P, with plain
// stores (enters as it starts, exits as it ends, on whichever P it then runs), and reads closed
// after its store; Close stores closed, then fence.Heavy, then reads the slots, so either the
// call sees closed or Close sees the call (the pairing package fence describes). A call that
// ends after Close began wakes it (wake). Elsewhere (the race detector, a kernel without the
// barrier, a P numbered beyond the slots after GOMAXPROCS grew) a call counts itself in the
// shared atomic counters instead. The counters only grow, so a call may enter in one kind of
// counter and exit in another; in flight is the sum of the enters less the sum of the exits,
// modulo 2^32.

// callSlot counts the calls of one P: plain stores by goroutines pinned to it, loads by Close.
// It is 128 bytes, so that two Ps' slots never share a cache line (or its prefetched pair).
type callSlot struct {
	enters, exits uint32
	_             [120]byte
}

// calls counts a Device's calls in flight.
type calls struct {
	slots []callSlot // one per P at Open where the fast path works, else none
	// enters and exits count the calls that had no slot.
	enters, exits atomic.Uint32
	// wake has room for one word: a call that ends, or is refused, after Close began leaves it
	// there for the Close that waits.
	wake chan struct{}
}

// init readies the counters of a new Device. A Device made without it (a test's) counts every
// call in the shared counters, and its Close waits by polling.
func (c *calls) init() {
	c.wake = make(chan struct{}, 1)
	if procpin.Exact && fence.Available() {
		c.slots = make([]callSlot, runtime.GOMAXPROCS(0))
	}
}

// closeWaiting, when set (by tests), runs each time Close finds calls in flight and is about to
// wait for them.
var closeWaiting func()

// enter counts a call in flight on d and reports whether it may run: d is open, or the call is
// nested in one of d's in flight on this goroutine. A call that may run ends with exit; one
// that may not returns d.closedError() and has nothing to undo.
func (d *Device) enter() bool {
	c := &d.calls
	if i := procpin.Pin(); i < len(c.slots) {
		s := &c.slots[i]
		s.enters++ // then the load below: see fence
		if !d.closed.Load() {
			procpin.Unpin()
			return true
		}
		procpin.Unpin()
	} else {
		procpin.Unpin()
		c.enters.Add(1)
		if !d.closed.Load() {
			return true
		}
	}
	if d.drv.inDo(d.tag()) {
		return true // nested in a call Close waits for
	}
	d.exit()
	return false
}

// exit ends a call that enter let run, and wakes a Close that waits.
func (d *Device) exit() {
	c := &d.calls
	if i := procpin.Pin(); i < len(c.slots) {
		s := &c.slots[i]
		fence.Release(&s.exits, s.exits+1) // all the call did is visible to a Close that sees it
		closing := d.closed.Load()         // after the store: see fence
		procpin.Unpin()
		if !closing {
			return
		}
	} else {
		procpin.Unpin()
		c.exits.Add(1)
		if !d.closed.Load() {
			return
		}
	}
	select {
	case c.wake <- struct{}{}:
	default: // a word is waiting already
	}
}

// inFlight returns the number of calls in flight on d. It reads the exits before the enters,
// so that every call it counts out it also counts in: a call that enters and exits while it
// reads is counted in flight (and wakes the Close that reads), never one in flight counted out.
func (c *calls) inFlight() int32 {
	out := c.exits.Load()
	for i := range c.slots {
		out += atomic.LoadUint32(&c.slots[i].exits)
	}
	in := c.enters.Load()
	for i := range c.slots {
		in += atomic.LoadUint32(&c.slots[i].enters)
	}
	return int32(in - out)
}

// drain waits until no call is in flight on d, closed already: those that start now see it
// closed.
func (d *Device) drain() {
	c := &d.calls
	if len(c.slots) > 0 {
		fence.Heavy() // a call counted in a slot has seen closed, or is seen below
	}
	for c.inFlight() != 0 {
		if closeWaiting != nil {
			closeWaiting()
		}
		if c.wake == nil { // a Device made without init
			time.Sleep(time.Millisecond)
			continue
		}
		<-c.wake
	}
}

// tag names d in the thread's record of the Dos under way (driver.doPush, driver.inDo).
func (d *Device) tag() uintptr { return uintptr(unsafe.Pointer(d)) }

// closedError is a call's on a closed Device.
func (d *Device) closedError() error {
	return fmt.Errorf("%w: CUDA device %d is closed", pinmalloc.ErrClosed, d.ordinal)
}

// busyError is Close's in a Do of its own Device.
func (d *Device) busyError() error {
	return fmt.Errorf("%w: Close of CUDA device %d inside a call on it (Do): close it after the call", pinmalloc.ErrBusy, d.ordinal)
}
