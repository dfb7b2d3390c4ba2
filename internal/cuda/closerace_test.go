//go:build cgo && linux

package cuda

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
)

// Close racing the calls of its Device. The test fake's push gate parks a call that has passed
// its closed check and not yet entered its context; Close, started then, must wait for it
// (closeWaiting tells when it does) rather than release the primary context under it: the call
// in flight ends normally, the calls that start meanwhile fail with ErrClosed, and the retain is
// given back once the call has ended.

// openFake loads the test fake (with cuGetProcAddress), initializes it and opens device 0 on it.
func openFake(t *testing.T) (*driver, *Device) {
	t.Helper()
	with, _ := buildFake(t)
	dr, err := loadFrom(with)
	must(t, "loadFrom", err)
	t.Cleanup(dr.close)
	must(t, "init", dr.init())
	d, err := openOn(dr, 0)
	must(t, "openOn", err)
	return dr, d
}

// gate sends the fake's push gate one of its made-up attributes (gateArm, gateParked,
// gateOpen) and returns the answer.
func gate(t *testing.T, dr *driver, d *Device, attr int) int {
	t.Helper()
	v, err := dr.deviceAttribute(d.dev, attr)
	must(t, fmt.Sprint("gate ", attr), err)
	return v
}

const (
	gateArm    = 9998 // the next push parks
	gateParked = 9997 // 1 while a push is parked
	gateOpen   = 9996 // the parked push goes on
)

// waitParked waits until a push is parked at the gate.
func waitParked(t *testing.T, dr *driver, d *Device) {
	t.Helper()
	for gate(t, dr, d, gateParked) == 0 {
		time.Sleep(100 * time.Microsecond)
	}
}

// closeRacing starts d.Close and returns once Close waits for the call in flight, with the
// channel of its result. If Close returns first, it lets the call go (release) and fails t.
func closeRacing(t *testing.T, d *Device, what string, release func()) <-chan error {
	t.Helper()
	waiting := make(chan struct{})
	var once sync.Once
	closeWaiting = func() { once.Do(func() { close(waiting) }) }
	done := make(chan error, 1)
	go func() { done <- d.Close() }()
	select {
	case err := <-done:
		closeWaiting = nil
		release()
		t.Fatalf("Close returned (%v) while %s was in flight: it gave back the primary context under the call", err, what)
	case <-waiting:
	}
	return done
}

// closeFinished collects Close's result and resets closeWaiting.
func closeFinished(t *testing.T, done <-chan error) {
	t.Helper()
	err := <-done
	closeWaiting = nil
	if err != nil {
		t.Errorf("Close = %v", err)
	}
}

// inContext runs f in the fake's context through a Device of its own: the clean-up of what a
// test made through a Device it has closed.
func inContext(t *testing.T, dr *driver, f func() error) {
	t.Helper()
	d, err := openOn(dr, 0)
	must(t, "openOn", err)
	must(t, "in context", d.Do(f))
	must(t, "Close", d.Close())
}

// TestCloseWaitsForCallsInFlight: each way a call enters the context (Do, and the calls that
// push, call and pop in one cgo call), parked at the gate after its closed check, holds Close
// until it ends; it ends without error, a call made meanwhile fails with ErrClosed, a second
// Close returns only once the retain is given back, and the Device gives back its retain once.
// Each runs with the calls counted in the P's slots (where the fast path works here) and in the
// shared counters (the race detector's way, and a P's beyond the slots).
func TestCloseWaitsForCallsInFlight(t *testing.T) {
	for _, shared := range []bool{false, true} {
		name := map[bool]string{false: "slots", true: "shared"}[shared]
		t.Run(name, func(t *testing.T) { closeWaitsForCalls(t, shared) })
	}
}

func closeWaitsForCalls(t *testing.T, shared bool) {
	var allocated DevicePtr // by the MemAlloc in flight, freed once the Device is closed
	for _, c := range []struct {
		name string
		call func(d *Device, s Stream, ev Event) error
	}{
		{"Do", func(d *Device, _ Stream, _ Event) error { _, _, err := d.MemGetInfo(); return err }},
		{"MemAlloc", func(d *Device, _ Stream, _ Event) (err error) {
			allocated, err = d.MemAlloc(64)
			return err
		}},
		{"StreamSynchronize", func(d *Device, s Stream, _ Event) error { return d.StreamSynchronize(s) }},
		{"StreamQuery", func(d *Device, s Stream, _ Event) error { return d.StreamQuery(s) }},
		{"EventRecord", func(d *Device, s Stream, ev Event) error { return d.EventRecord(ev, s) }},
		{"EventQuery", func(d *Device, _ Stream, ev Event) error {
			if err := d.EventQuery(ev); !errors.Is(err, pinmalloc.ErrNotReady) { // never recorded
				return fmt.Errorf("EventQuery of an event not recorded = %v, want ErrNotReady", err)
			}
			return nil
		}},
		{"StreamIsCapturing", func(d *Device, s Stream, _ Event) error {
			st, err := d.StreamIsCapturing(s)
			if err == nil && st != CaptureNone {
				err = fmt.Errorf("status %d", st)
			}
			return err
		}},
		{"EventRecordOutsideCapture", func(d *Device, s Stream, ev Event) error {
			_, err := d.EventRecordOutsideCapture(ev, s)
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := PrimaryRetains()
			dr, d := openFake(t)
			if shared {
				d.calls.slots = nil
			}
			s, err := d.StreamCreate(true)
			must(t, "StreamCreate", err)
			ev, err := d.EventCreate(true)
			must(t, "EventCreate", err)

			gate(t, dr, d, gateArm)
			res := make(chan error, 1)
			go func() { res <- c.call(d, s, ev) }()
			waitParked(t, dr, d)
			closed := closeRacing(t, d, c.name, func() { gate(t, dr, d, gateOpen); <-res })
			if err := d.StreamQuery(s); !errors.Is(err, pinmalloc.ErrClosed) {
				t.Errorf("StreamQuery while Close waits = %v, want ErrClosed", err)
			}
			second := make(chan int, 1)
			go func() {
				_ = d.Close()
				v, _ := dr.deviceAttribute(d.dev, 9999)
				second <- v / 1000 // the fake's retains when the second Close returned
			}()
			gate(t, dr, d, gateOpen)
			if err := <-res; err != nil {
				t.Errorf("%s in flight as Close began = %v, want it to end normally", c.name, err)
			}
			closeFinished(t, closed)
			if r := <-second; r != 0 {
				t.Errorf("a second Close returned with %d retains held, before the first gave its back", r)
			}
			if PrimaryRetains() != base || fakeLive(t, dr)/1000 != 0 {
				t.Errorf("after Close: package retains %d (base %d), fake %d", PrimaryRetains(), base, fakeLive(t, dr))
			}
			if err := d.Do(func() error { return nil }); !errors.Is(err, pinmalloc.ErrClosed) {
				t.Errorf("Do after Close = %v, want ErrClosed", err)
			}
			inContext(t, dr, func() error {
				if allocated != 0 {
					must(t, "memFree", d.track(&d.deviceAllocs, uint64(allocated), -1, dr.memFree(allocated)))
					allocated = 0
				}
				return errors.Join(dr.eventDestroy(ev), dr.streamDestroy(s))
			})
			if n := fakeLive(t, dr); n != 0 {
				t.Errorf("the fake holds %d objects", n)
			}
		})
	}
}

// TestCloseRacingCalls: goroutines call a Device in a loop while it is closed, each way into the
// context and an allocation freed in the same Do: every call ends without error or with
// ErrClosed (none finds the context gone: the fake refuses a push once its last retain is given
// back), the Do's pair leaves nothing allocated, and the retain is given back once.
func TestCloseRacingCalls(t *testing.T) {
	for round := range 20 {
		base := PrimaryRetains()
		dr, d := openFake(t)
		if round%2 == 1 {
			d.calls.slots = nil
		}
		s, err := d.StreamCreate(true)
		must(t, "StreamCreate", err)
		ev, err := d.EventCreate(true)
		must(t, "EventCreate", err)
		calls := []func() error{
			func() error { return d.StreamQuery(s) },
			func() error { return d.EventRecord(ev, s) },
			func() error { _, _, err := d.MemGetInfo(); return err },
			func() error {
				return d.Do(func() error {
					p, err := d.MemAlloc(64)
					if err != nil {
						return err
					}
					return d.MemFree(p)
				})
			},
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(calls))
		started := make(chan struct{}, len(calls))
		for _, call := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					err := call()
					if i == 0 {
						started <- struct{}{}
					}
					if errors.Is(err, pinmalloc.ErrClosed) {
						return
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		for range calls {
			<-started
		}
		must(t, "Close", d.Close())
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: a call racing Close = %v, want nil or ErrClosed", round, err)
		}
		if PrimaryRetains() != base || fakeLive(t, dr) != 2 { // the stream and the event
			t.Errorf("round %d: after Close: package retains %d (base %d), fake %d", round, PrimaryRetains(), base, fakeLive(t, dr))
		}
		inContext(t, dr, func() error { return errors.Join(dr.eventDestroy(ev), dr.streamDestroy(s)) })
	}
}

// TestDoNestsBesideClose: a Do in flight when Close begins ends normally, and the calls nested
// in it (MemAlloc, a Do, StreamQuery, Attribute, the frees) run though Close has begun: Close
// waits for them with the Do, where it would deadlock if they waited for Close, and a call of
// another goroutine meanwhile fails with ErrClosed.
func TestDoNestsBesideClose(t *testing.T) {
	base := PrimaryRetains()
	dr, d := openFake(t)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	inside, release := make(chan struct{}), make(chan struct{})
	res := make(chan error, 1)
	go func() {
		res <- d.Do(func() error {
			close(inside)
			<-release
			p, err := d.MemAlloc(64)
			if err != nil {
				return fmt.Errorf("MemAlloc: %w", err)
			}
			_, errAttr := d.Attribute(AttrUnifiedAddressing)
			return errors.Join(d.Do(func() error { return d.StreamQuery(s) }), errAttr, d.MemFree(p), d.StreamDestroy(s))
		})
	}()
	<-inside
	closed := closeRacing(t, d, "a Do", func() { close(release); <-res })
	if err := d.Do(func() error { return nil }); !errors.Is(err, pinmalloc.ErrClosed) {
		t.Errorf("a Do of another goroutine while Close waits = %v, want ErrClosed", err)
	}
	close(release)
	if err := <-res; err != nil {
		t.Errorf("the calls nested in a Do in flight as Close began = %v, want them to run", err)
	}
	closeFinished(t, closed)
	if s := d.Stats(); s.Live() != 0 {
		t.Errorf("Stats after the nested frees = %+v", s)
	}
	if PrimaryRetains() != base || fakeLive(t, dr) != 0 {
		t.Errorf("after Close: package retains %d (base %d), fake %d", PrimaryRetains(), base, fakeLive(t, dr))
	}
}

// TestCloseInsideDo: Close in a Do of its own Device cannot wait for that Do; it refuses with
// ErrBusy and closes nothing, and Close after the Do closes.
func TestCloseInsideDo(t *testing.T) {
	base := PrimaryRetains()
	dr, d := openFake(t)
	if err := d.Do(d.Close); !errors.Is(err, pinmalloc.ErrBusy) {
		t.Fatalf("Close inside Do = %v, want ErrBusy", err)
	}
	if _, _, err := d.MemGetInfo(); err != nil {
		t.Errorf("MemGetInfo after Close refused inside Do = %v", err)
	}
	must(t, "Close", d.Close())
	if PrimaryRetains() != base || fakeLive(t, dr) != 0 {
		t.Errorf("after Close: package retains %d (base %d), fake %d", PrimaryRetains(), base, fakeLive(t, dr))
	}
}
