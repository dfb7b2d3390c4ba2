package arena

import (
	"errors"
	"fmt"
	"testing"
)

// refuseRelease is a provider whose Release of a region refuses the first n times, changing
// nothing, as a driver refusing to unregister or unmap does.
type refuseRelease struct {
	Provider
	n int
}

func (p *refuseRelease) Release(r *Region) error {
	if p.n > 0 {
		p.n--
		return fmt.Errorf("%w: %w", ErrCommit, errInjected)
	}
	return p.Provider.Release(r)
}

// TestCloseReleaseRefused: a region the provider refuses to release at Close stays the arena's,
// its reserved and committed bytes counted, Close returns the refusal, and the next Close
// releases it; the arena is closed from the first. Before, Close dropped the region whatever
// the provider said, and its memory was counted and released by no one.
func TestCloseReleaseRefused(t *testing.T) {
	p := &refuseRelease{Provider: PageableHost(HostOptions{Populate: true}), n: 1}
	a, err := New(Options{Provider: p, Capacity: 8 << 20, RegionSize: 8 << 20, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.Alloc(1<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	before := a.Stats()
	if before.Committed == 0 || before.Reserved == 0 {
		t.Fatalf("a populated region: %d committed, %d reserved", before.Committed, before.Reserved)
	}
	if err := a.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("Close whose release is refused = %v", err)
	}
	if st := a.Stats(); st.Committed != before.Committed || st.Reserved != before.Reserved {
		t.Errorf("after the refused Close: %d committed, %d reserved; want %d, %d", st.Committed, st.Reserved, before.Committed, before.Reserved)
	}
	if _, err := a.Alloc(1<<20, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after a refused Close = %v, want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("the next Close: %v", err)
	}
	if st := a.Stats(); st.Committed != 0 || st.Reserved != 0 {
		t.Errorf("after the next Close: %d committed, %d reserved", st.Committed, st.Reserved)
	}
	if err := a.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("a third Close = %v, want ErrClosed", err)
	}
}

// keptReleaser is a provider that holds kept memory of no region (kept) and refuses to give it
// back the first n times ReleaseKept is called.
type keptReleaser struct {
	Provider
	kept, n, calls int
}

func (p *keptReleaser) ReleaseKept() error {
	p.calls++
	if p.n > 0 {
		p.n--
		return fmt.Errorf("%w: %w", ErrCommit, errInjected)
	}
	p.kept = 0
	return nil
}

// TestCloseReleasesKept: Close asks a KeptReleaser provider to give back what it kept, even
// with no region of its own left, returns its refusal, and asks again at the next Close
// while it refuses; after that, Close says ErrClosed and asks nothing.
func TestCloseReleasesKept(t *testing.T) {
	p := &keptReleaser{Provider: PageableHost(HostOptions{}), kept: 1, n: 1}
	a, err := New(Options{Provider: p, Capacity: 8 << 20, RegionSize: 8 << 20, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("Close whose provider refuses to give back what it kept = %v", err)
	}
	if err := a.Close(); err != nil || p.kept != 0 {
		t.Fatalf("the next Close = %v, kept %d", err, p.kept)
	}
	if err := a.Close(); !errors.Is(err, ErrClosed) || p.calls != 2 {
		t.Fatalf("a third Close = %v after %d calls of ReleaseKept; want ErrClosed after 2", err, p.calls)
	}
}
