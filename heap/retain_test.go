package heap

import (
	"errors"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
)

// newHeldPair returns two heaps of one group over a pageable arena of capacity bytes with the
// given purge delay: held (RetainSegments) and other (the default).
func newHeldPair(t *testing.T, capacity uintptr, delay time.Duration) (held, other *Heap) {
	t.Helper()
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: capacity, RegionSize: capacity, PurgeDelay: delay})
	mustOK(t, err)
	g, err := NewGroup(a)
	mustOK(t, err)
	held, err = g.NewHeap(Options{Retention: RetainSegments})
	mustOK(t, err)
	other, err = g.NewHeap(Options{})
	mustOK(t, err)
	t.Cleanup(func() {
		for _, h := range []*Heap{held, other} {
			if err := h.Close(); err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("heap close: %v", err)
			}
		}
		if err := a.Close(); err != nil {
			t.Errorf("arena close: %v", err)
		}
	})
	return held, other
}

// TestHeldNeverTrimsItself: a held heap whose allocation finds the arena full must not give its
// empty segments to the arena (its owner decides when: issue 25). Two chunks: the held heap
// empties one, the other heap holds the other; the held heap's 3 MiB allocation fails, and the
// other heap's next segment must not be the held heap's.
func TestHeldNeverTrimsItself(t *testing.T) {
	held, other := newHeldPair(t, 4<<20, -1)
	p, err := held.Alloc(128 << 10)
	mustOK(t, err)
	mustOK(t, held.Free(p))
	q, err := other.Alloc(8 << 10)
	mustOK(t, err)
	if _, err := held.Alloc(3 << 20); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("3 MiB of a full arena = %v, want ErrOutOfMemory", err)
	}
	if n := held.Stats().Segments; n != 1 {
		t.Fatalf("the held heap has %d segments after a failed allocation, want its 1", n)
	}
	if r, err := other.Alloc(128 << 10); err == nil {
		t.Fatalf("the other heap got %#x (the held heap's block was %#x): the held heap trimmed itself", r, p)
	}
	held.Trim() // the owner's decision
	r, err := other.Alloc(128 << 10)
	mustOK(t, err)
	mustOK(t, other.Free(r))
	mustOK(t, other.Free(q))
}

// TestHeldFreesNeverDecommit: a held heap's frees give nothing to the arena's purge, neither
// the slices of an emptied segment nor kept object pages: a decommit hands memory back to the
// provider whatever still uses it (a stream's queued copy). Its Trim does.
func TestHeldFreesNeverDecommit(t *testing.T) {
	held, _ := newHeldPair(t, 16<<20, time.Millisecond)
	var ps []uintptr
	for range 17 { // the 17th opens a second page, which stays current
		p, err := held.Alloc(128 << 10)
		mustOK(t, err)
		ps = append(ps, p)
	}
	for range 2 { // two object pages: a whole segment
		p, err := held.Alloc(1 << 20)
		mustOK(t, err)
		ps = append(ps, p)
	}
	committed := held.a.Stats().Committed
	for i, p := range ps {
		if i != 16 {
			mustOK(t, held.Free(p))
		}
	}
	time.Sleep(30 * time.Millisecond) // many purge delays
	if st := held.a.Stats(); st.Committed != committed {
		t.Fatalf("a held heap's frees decommitted %d bytes", committed-st.Committed)
	}
	mustOK(t, held.Free(ps[16]))
	held.Trim()
	held.a.Trim()
	if st := held.a.Stats(); st.Committed != 0 {
		t.Fatalf("after Trim, %d bytes stay committed", st.Committed)
	}
}

// TestHeldReleaseSpares: ReleaseSpares gives back the segments a held heap kept empty at the
// mark, and no segment emptied after it (its frees may be work the owner has not ordered yet),
// nor one reused since and emptied again. The spares are made by hand, as a held heap's frees
// leave them (the segment's unregistered, kept with its span).
func TestHeldReleaseSpares(t *testing.T) {
	held, other := newHeldPair(t, 16<<20, -1)
	empty := func() *segment { // a segment emptied now
		span, err := held.a.Reserve(segSize, held.g.chunkAlign)
		mustOK(t, err)
		s := &segment{span: span, base: span.Base, dirtyBits: ^uint64(0), decommit: ^uint64(0)}
		held.nsegs++
		held.spare(s)
		return s
	}
	empty()
	empty()
	empty()
	mark, n := held.SpareMark()
	if n != 3 {
		t.Fatalf("%d spares, want 3", n)
	}
	s, err := held.newSegment(segSmall) // the newest spare, in use again
	mustOK(t, err)
	held.unlistRoom(s) // and emptied again, after the mark
	held.g.unregister(s)
	held.spare(s)
	empty() // emptied after the mark
	if got := held.ReleaseSpares(mark); got != 2 {
		t.Fatalf("ReleaseSpares gave %d segments, want 2 (the spares kept at the mark and untouched)", got)
	}
	if _, n := held.SpareMark(); n != 2 || held.Stats().Segments != 2 {
		t.Fatalf("after ReleaseSpares: %d spares, %d segments; want 2, 2 (those emptied after the mark)", n, held.Stats().Segments)
	}
	// What went back is the arena's: the other heap takes it.
	var ps []uintptr
	for range 2 {
		p, err := other.Alloc(1 << 20)
		mustOK(t, err)
		ps = append(ps, p)
	}
	for _, p := range ps {
		mustOK(t, other.Free(p))
	}
}
