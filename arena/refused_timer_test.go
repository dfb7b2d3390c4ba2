package arena

import (
	"errors"
	"testing"
	"time"
)

// releaseSignalling is a releaseRefusingLender that says on released each Release it accepts.
type releaseSignalling struct {
	*releaseRefusingLender
	released chan struct{}
}

func (l *releaseSignalling) Release(r *Region) error {
	err := l.releaseRefusingLender.Release(r)
	if err == nil {
		select {
		case l.released <- struct{}{}:
		default:
		}
	}
	return err
}

// TestRefusedRegionReleasedByTimer: a lent region whose release the provider refuses twice is
// released by the purge timer alone, with no Trim or Close and nothing else keeping the timer
// running. Before, the timer stopped once nothing but the refused region waited: the region
// stayed refused until a Trim or a Close.
func TestRefusedRegionReleasedByTimer(t *testing.T) {
	l := &releaseSignalling{released: make(chan struct{}, 1),
		releaseRefusingLender: &releaseRefusingLender{lender: newLender(t, 32<<20, 4<<20)}}
	l.n.Store(2)
	a := newTestArena(t, Options{Provider: l, PurgeDelay: time.Millisecond})
	s, err := a.Alloc(2<<20, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.released:
	case <-time.After(5 * time.Second):
		t.Fatalf("the refused region not released by the timer: %d calls of Release, "+
			"%d regions refused", l.calls.Load(), a.Stats().RegionsRefused)
	}
	checkRefused(t, a, "once released", 0, 0, 0, 1) // waits for the tick's lock
	if c := l.calls.Load(); c != 3 {
		t.Fatalf("%d calls of Release, want 3", c)
	}
}

// TestRefusedRegionRetryBacksOff: while the provider refuses a region for good, the timer
// tries it again after the purge delay, then twice as long each time, up to a minute: a
// provider that always refuses is not called at every tick of a few milliseconds. The test runs
// the ticks itself (the delay, 10 s, is longer than the test) and reads the wait armed.
func TestRefusedRegionRetryBacksOff(t *testing.T) {
	l := &releaseRefusingLender{lender: newLender(t, 32<<20, 4<<20)}
	l.n.Store(1 << 30)
	const delay = 10 * time.Second
	a := newTestArena(t, Options{Provider: l, PurgeDelay: delay})
	s, err := a.Alloc(2<<20, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // released at the third tick: refused
		a.purgeTick()
	}
	for _, want := range []time.Duration{delay, 2 * delay, 4 * delay, time.Minute, time.Minute} {
		a.mu.Lock()
		armed, wait, purging := a.retryArmed, a.retryWait, a.clock.Armed.Load()
		a.mu.Unlock()
		if !armed || purging || wait != want {
			t.Fatalf("after %d refusals: retry armed %v (purge ticks %v) for %v; "+
				"want armed, alone, for %v", l.calls.Load(), armed, purging, wait, want)
		}
		a.purgeTick() // refused again
	}
	if c := l.calls.Load(); c != 6 {
		t.Fatalf("%d calls of Release, want 6", c)
	}
	checkRefused(t, a, "refused for good", 1, 4<<20, 4<<20, 0)
	l.n.Store(0)
}

// TestRefusedRegionRetriedWithoutPurge: over a provider that neither decommits nor lends (its
// regions committed whole at Reserve, as cuMemAlloc's are), a region grow could not use and
// whose release the provider refused is released by the retry timer alone, with no Trim or
// Close. Before, no timer ran over such a provider: the region, its memory and its share of
// the capacity, waited for a Trim or a Close.
func TestRefusedRegionRetriedWithoutPurge(t *testing.T) {
	p := newReleaseCountdown(PageableHost(HostOptions{Populate: true}), 2)
	a := newTestArena(t, Options{Provider: p, Capacity: 16 << 20, RegionSize: 4 << 20,
		PurgeDelay: time.Millisecond})
	a.observers = append(a.observers, refuseMapped{}) // as Observe adds one, with no region yet
	if _, err := a.Alloc(1<<20, 1); !errors.Is(err, ErrReleaseRefused) {
		t.Fatalf("Alloc: %v, want the refused release in it", err)
	}
	select {
	case <-p.released:
	case <-time.After(5 * time.Second):
		t.Fatalf("the refused region not released by a timer: %d regions refused",
			a.Stats().RegionsRefused)
	}
	checkRefused(t, a, "once released", 0, 0, 0, 0) // waits for the tick's lock
}

// TestRefusedRetryBackoffStartsFresh: once Trim has released every refused region, a later
// refusal is tried again after the purge delay, not after the wait the timer had backed off
// to for the regions before. Before, the timer stayed armed for that wait (up to a minute),
// and the new refusal waited for it.
func TestRefusedRetryBackoffStartsFresh(t *testing.T) {
	p := newReleaseCountdown(PageableHost(HostOptions{}), 1<<30)
	a := newTestArena(t, Options{Provider: p, Capacity: 16 << 20, RegionSize: 4 << 20,
		PurgeDelay: time.Millisecond})
	a.observers = append(a.observers, refuseMapped{})
	if _, err := a.Alloc(1<<20, 1); !errors.Is(err, ErrReleaseRefused) {
		t.Fatalf("Alloc: %v, want the refused release in it", err)
	}
	// As after minutes of refusals: the next retry, refused too, arms the timer for a minute.
	a.mu.Lock()
	a.retryWait = maxRetryWait
	drain(p.called) // Release runs under a.mu: the next call is the timer's retry
	a.mu.Unlock()
	select {
	case <-p.called:
	case <-time.After(5 * time.Second):
		t.Fatal("the refused region not tried again by the timer")
	}
	a.mu.Lock() // the retry's tick has armed the timer again
	wait, armed := a.retryWait, a.retryArmed
	a.mu.Unlock()
	if wait != maxRetryWait || !armed {
		t.Fatalf("retry armed %v after %v; want armed after %v", armed, wait, maxRetryWait)
	}
	p.n.Store(0)
	a.Trim()
	checkRefused(t, a, "after Trim", 0, 0, 0, 0)
	p.n.Store(1)
	drain(p.released)
	if _, err := a.Alloc(1<<20, 1); !errors.Is(err, ErrReleaseRefused) {
		t.Fatalf("Alloc: %v, want the refused release in it", err)
	}
	select {
	case <-p.released:
	case <-time.After(5 * time.Second):
		t.Fatalf("the region refused after Trim not tried again after the delay: %d regions "+
			"refused", a.Stats().RegionsRefused)
	}
	checkRefused(t, a, "once released", 0, 0, 0, 0)
}
