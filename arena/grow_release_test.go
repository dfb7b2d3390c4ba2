package arena

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// releaseRefusing wraps a provider and refuses to release while told to, keeping the regions
// it refused for the test to give back.
type releaseRefusing struct {
	Provider
	fail    atomic.Bool
	refused []*Region
}

func (p *releaseRefusing) Release(r *Region) error {
	if p.fail.Load() {
		p.refused = append(p.refused, r)
		return fmt.Errorf("%w: %w", ErrInvalid, errInjected)
	}
	return p.Provider.Release(r)
}

// refuseMapped is an observer that refuses every region.
type refuseMapped struct{}

var errObserver = errors.New("observer refuses")

func (refuseMapped) Mapped(*Region) error { return errObserver }
func (refuseMapped) Unmapping(*Region)    {}

// TestGrowReleaseRefusedReported: a region grow reserved and cannot use (here an observer
// refuses it) goes back to the provider; when the provider refuses that too, the caller hears
// of it beside the reason, once, and the arena keeps the region, counted, for the next Trim to
// release. Before, the refusal was dropped, and then the region was.
func TestGrowReleaseRefusedReported(t *testing.T) {
	p := &releaseRefusing{Provider: PageableHost(HostOptions{})}
	// The retry timer (refused_retry.go) waits an hour, so that the region is still refused
	// when the test looks, in the probe build (purge delay 1 µs) too.
	a := newTestArena(t, Options{Provider: p, Capacity: 64 << 20, RegionSize: 16 << 20,
		PurgeDelay: time.Hour})
	a.observers = append(a.observers, refuseMapped{}) // as Observe adds one, with no region yet
	p.fail.Store(true)
	_, err := a.Alloc(1<<20, 1)
	p.fail.Store(false)
	if !errors.Is(err, errObserver) {
		t.Fatalf("Alloc: %v, want the observer's refusal", err)
	}
	if !errors.Is(err, errInjected) || !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrReleaseRefused) {
		t.Fatalf("Alloc: %v, want the provider's refused release in it", err)
	}
	if n := strings.Count(err.Error(), errInjected.Error()); n != 1 {
		t.Fatalf("Alloc: %q says the refused release %d times", err, n)
	}
	if len(p.refused) != 1 {
		t.Fatalf("%d releases refused, want 1", len(p.refused))
	}
	checkRefused(t, a, "after the refused release", 1, 16<<20, 0, 0)
	a.Trim()
	checkRefused(t, a, "after Trim", 0, 0, 0, 0)
	if err := p.Provider.Release(p.refused[0]); !errors.Is(err, ErrInvalid) {
		t.Fatalf("releasing the region again after Trim: %v, want it released already", err)
	}
}
