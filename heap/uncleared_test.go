package heap

import (
	"errors"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// errClearLost is lateZeroer's failure: the wait for a clear failed, the clear may still run.
var errClearLost = errors.New("the wait for the clear failed")

// lateZeroer is a host provider whose Zero, while fail is set, fails with its clear still
// "queued", as a device provider's does when the wait for its cuMemsetD8Async fails: land runs
// the clears queued so far, as the driver would later.
type lateZeroer struct {
	arena.Provider
	mu     sync.Mutex
	fail   bool
	queued [][2]uintptr
}

func (z *lateZeroer) Zero(addr, size uintptr) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.fail {
		z.queued = append(z.queued, [2]uintptr{addr, size})
		return errClearLost
	}
	clear(mem.Bytes(addr, size))
	return nil
}

// land runs the clears still queued.
func (z *lateZeroer) land() {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, q := range z.queued {
		clear(mem.Bytes(q[0], q[1]))
	}
	z.queued = nil
}

// setAsideSizes are the sizes the set-aside tests take: a small, a large, an object and a huge
// block.
var setAsideSizes = []uintptr{100, 200 << 10, 600 << 10, 4 << 20}

// setAsideRig makes a heap over a lateZeroer and sets aside its block p of n bytes: allocated,
// freed, then taken again by a Zalloc whose clear fails with the clear still queued.
func setAsideRig(t *testing.T, n uintptr) (z *lateZeroer, a *arena.Arena, h *Heap, p uintptr) {
	t.Helper()
	z = &lateZeroer{Provider: arena.PageableHost(arena.HostOptions{})}
	a, err := arena.New(arena.Options{Provider: z, Capacity: 64 << 20, PurgeDelay: -1})
	mustOK(t, err)
	h, err = New(a, Options{})
	mustOK(t, err)
	p, err = h.Alloc(n)
	mustOK(t, err)
	mustOK(t, h.Free(p))
	z.fail = true
	if _, err := h.Zalloc(n); !errors.Is(err, errClearLost) { // p again, not fresh: cleared
		t.Fatalf("n %d: Zalloc with the clear failing: %v", n, err)
	}
	z.fail = false
	return z, a, h, p
}

// TestZallocFailedClearSetAside: a Zalloc whose clear fails with the clear still queued must
// not hand the block to anyone until its owner says the clear is over (ReleaseUncleared):
// freeing it gave it to the next Alloc, whose data the late clear wiped. It is counted in
// Stats, keeps Close from giving it to the arena, and is reused after ReleaseUncleared.
func TestZallocFailedClearSetAside(t *testing.T) {
	for _, n := range setAsideSizes {
		z, a, h, p := setAsideRig(t, n)
		var ps []uintptr
		for range 4 {
			q, err := h.Alloc(n)
			mustOK(t, err)
			mem.Bytes(q, n)[0] = 5
			ps = append(ps, q)
		}
		z.land() // the failed clear runs after all
		for _, q := range ps {
			if b := mem.Bytes(q, n)[0]; b != 5 {
				t.Fatalf("n %d: block %#x (the failed clear's %#x) reads %d after the late clear,"+
					" want 5", n, q, p, b)
			}
		}
		st := h.Stats()
		if st.Uncleared != 1 || st.UnclearedBytes != uint64(n) {
			t.Fatalf("n %d: Stats.Uncleared %d, UnclearedBytes %d, want 1, %d",
				n, st.Uncleared, st.UnclearedBytes, n)
		}
		mustOK(t, h.verify())
		for _, q := range ps {
			mustOK(t, h.Free(q))
		}
		if err := h.Close(); !errors.Is(err, ErrLiveBlocks) {
			t.Fatalf("n %d: Close with a block set aside: %v, want ErrLiveBlocks", n, err)
		}
		if k := h.ReleaseUncleared(); k != 1 {
			t.Fatalf("n %d: ReleaseUncleared = %d, want 1", n, k)
		}
		if st := h.Stats(); st.Uncleared != 0 || st.UnclearedBytes != 0 || st.Live != 0 {
			t.Fatalf("n %d: after ReleaseUncleared: %+v", n, st)
		}
		q, err := h.Zalloc(n) // the block serves again
		mustOK(t, err)
		if mem.Bytes(q, n)[0] != 0 {
			t.Fatalf("n %d: Zalloc after ReleaseUncleared: not cleared", n)
		}
		mustOK(t, h.Free(q))
		mustOK(t, h.Close())
		mustOK(t, a.Close())
	}
}

// TestVerifyCatchesUncleared: a block set aside that is free (a free the heap made, or a
// user's stale one) would be handed out with its clear still unsure; one set aside twice would
// be freed twice by ReleaseUncleared. Verify reports both.
func TestVerifyCatchesUncleared(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(100)
	mustOK(t, err)
	q, err := h.Alloc(100)
	mustOK(t, err)
	mustOK(t, h.Free(q))
	h.setAside(p, 100)
	verifyCatches(t, h, "a free block set aside", "not a live block", func() {
		h.uncleared = append(h.uncleared, unclearedBlock{q, 100})
	}, func() { h.uncleared = h.uncleared[:1] })
	verifyCatches(t, h, "a block set aside twice", "twice", func() {
		h.setAside(p, 100)
	}, func() { h.uncleared = h.uncleared[:1] })
	if k := h.ReleaseUncleared(); k != 1 {
		t.Fatalf("ReleaseUncleared = %d, want 1", k)
	}
}

// TestZallocNoZeroer: over a provider that cannot clear, a Zalloc of a reused block fails with
// nothing written, so it frees the block rather than set it aside.
func TestZallocNoZeroer(t *testing.T) {
	prov := struct{ arena.Provider }{arena.PageableHost(arena.HostOptions{})} // no Zero
	h := newTestHeapOn(t, arena.Options{Provider: prov, Capacity: 64 << 20}, Options{})
	p, err := h.Alloc(100)
	mustOK(t, err)
	mustOK(t, h.Free(p))
	if _, err := h.Zalloc(100); !errors.Is(err, arena.ErrInvalid) {
		t.Fatalf("Zalloc over a provider that cannot clear: %v, want arena.ErrInvalid", err)
	}
	if st := h.Stats(); st.Live != 0 || st.Uncleared != 0 {
		t.Fatalf("after the failed Zalloc: %+v", st)
	}
}

// refusingZeroer is a host provider whose Zero, while refuse is set, fails before it begins,
// writing nothing (arena.ErrNotStarted), as a device provider's does when the driver refuses
// its cuMemsetD8Async.
type refusingZeroer struct {
	arena.Provider
	refuse bool
}

func (z *refusingZeroer) Zero(addr, size uintptr) error {
	if z.refuse {
		return arena.NotStarted(errClearRefused)
	}
	clear(mem.Bytes(addr, size))
	return nil
}

// errClearRefused is refusingZeroer's failure.
var errClearRefused = errors.New("the clear was refused")

// TestZallocRefusedClearFreed: a Zalloc whose clear fails before it began (arena.ErrNotStarted)
// frees the block at once, for small, large, object and huge blocks: nothing is set aside and
// the next Alloc gets it. Before, it was set aside until ReleaseUncleared.
func TestZallocRefusedClearFreed(t *testing.T) {
	for _, n := range []uintptr{100, 200 << 10, 600 << 10, 4 << 20} { // small, large, object, huge
		z := &refusingZeroer{Provider: arena.PageableHost(arena.HostOptions{})}
		a, err := arena.New(arena.Options{Provider: z, Capacity: 64 << 20, PurgeDelay: -1})
		mustOK(t, err)
		h, err := New(a, Options{})
		mustOK(t, err)
		p, err := h.Alloc(n)
		mustOK(t, err)
		mustOK(t, h.Free(p))
		z.refuse = true
		if _, err := h.Zalloc(n); !errors.Is(err, errClearRefused) ||
			!errors.Is(err, arena.ErrNotStarted) {
			t.Fatalf("n %d: Zalloc with the clear refused: %v", n, err)
		}
		z.refuse = false
		if st := h.Stats(); st.Uncleared != 0 || st.Live != 0 {
			t.Fatalf("n %d: after the refused clear: Uncleared %d, Live %d; want 0, 0",
				n, st.Uncleared, st.Live)
		}
		mustOK(t, h.verify())
		q, err := h.Alloc(n)
		mustOK(t, err)
		if q != p {
			t.Fatalf("n %d: Alloc after the refused clear got %#x, want the block freed, %#x",
				n, q, p)
		}
		mustOK(t, h.Free(q))
		mustOK(t, h.Close())
		mustOK(t, a.Close())
	}
}

// TestStaleFreeOfSetAsideRefused: a block a failed Zalloc set aside is live, so a user's stale
// free of its address (the block was theirs before, freed, then reused by the Zalloc) was taken
// as a free: the block went to the next Alloc with the failed clear still queued over it, and
// ReleaseUncleared then freed that new owner's block. The stale free must be refused, the
// block reused by no one until ReleaseUncleared, which frees it once.
func TestStaleFreeOfSetAsideRefused(t *testing.T) {
	for _, n := range setAsideSizes {
		z, a, h, p := setAsideRig(t, n)
		if err := h.Free(p); !errors.Is(err, ErrHeld) {
			t.Fatalf("n %d: the stale free of %#x, set aside: %v, want ErrHeld", n, p, err)
		}
		if err := h.FreeSized(p, n); !errors.Is(err, ErrHeld) {
			t.Fatalf("n %d: the stale FreeSized of %#x, set aside: %v, want ErrHeld", n, p, err)
		}
		q, err := h.Alloc(n)
		mustOK(t, err)
		if q == p {
			t.Fatalf("n %d: Alloc got %#x, set aside with its clear still queued", n, p)
		}
		if st := h.Stats(); st.Live != 2 || st.Uncleared != 1 {
			t.Fatalf("n %d: Stats Live %d, Uncleared %d, want 2, 1", n, st.Live, st.Uncleared)
		}
		mustOK(t, h.verify())
		z.land()
		if k := h.ReleaseUncleared(); k != 1 {
			t.Fatalf("n %d: ReleaseUncleared = %d, want 1", n, k)
		}
		if st := h.Stats(); st.Live != 1 || st.Uncleared != 0 {
			t.Fatalf("n %d: after ReleaseUncleared: Live %d, Uncleared %d, want 1, 0", n, st.Live, st.Uncleared)
		}
		mustOK(t, h.Free(q))
		mustOK(t, h.verify())
		mustOK(t, h.Close())
		mustOK(t, a.Close())
	}
}
