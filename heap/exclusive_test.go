package heap

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// raceRounds is how many rounds the owner-against-others races run.
func raceRounds() int {
	if longRun() {
		return 16
	}
	return 4
}

// freshBlocks makes a new heap in g (its class pages start exclusive) and allocates n class
// blocks of 2 – 10 KiB on it: a few blocks a page, so that the race meets many pages as they
// are shared.
func freshBlocks(t *testing.T, g *Group, n int) (*Heap, []uintptr, []uintptr) {
	t.Helper()
	h, err := g.NewHeap(Options{})
	if err != nil {
		t.Fatal(err)
	}
	ps, ns := make([]uintptr, n), make([]uintptr, n)
	for i := range ps {
		ns[i] = uintptr(2<<10 + i*977%(8<<10))
		if ps[i], err = h.Alloc(ns[i]); err != nil {
			t.Fatal(err)
		}
	}
	if g.exclusive {
		for _, p := range ps {
			if pg, _, _ := g.find(p); atomic.LoadUint32(&pg.mode) != exclusive {
				t.Fatalf("block %#x: a new class page is not exclusive (mode %d)", p, pg.mode)
			}
		}
	}
	return h, ps, ns
}

// order returns the order in which a racer of round r visits n blocks: forward, backward, or
// from the middle, so that owner and other meet on pages being shared in every way.
func order(r, who, n int) func(k int) int {
	switch (r + who) % 3 {
	case 0:
		return func(k int) int { return k }
	case 1:
		return func(k int) int { return n - 1 - k }
	}
	return func(k int) int { return (k + n/2) % n }
}

// race runs owner and other on two goroutines, released together once both run (a spinning
// barrier, so that neither is parked when the other starts), and waits for both.
func race(owner, other func()) {
	var arrived atomic.Int32
	var wg sync.WaitGroup
	wg.Add(2)
	for _, f := range []func(){owner, other} {
		go func() {
			defer wg.Done()
			arrived.Add(1)
			for arrived.Load() < 2 {
				runtime.Gosched()
			}
			f()
		}()
	}
	wg.Wait()
}

// closeClean collects h's remote frees, checks its invariants and that nothing is live, and
// closes it.
func closeClean(t *testing.T, h *Heap, round int) {
	t.Helper()
	h.Collect()
	if err := h.verify(); err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	if st := h.Stats(); st.Live != 0 {
		t.Fatalf("round %d: %d blocks live after freeing all", round, st.Live)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
}

// ownerFree frees block p of n bytes as h's owner, by Free, FreeSized or TryFree as k says
// (in turn); a TryFree that refuses gives refused, the error the others would report.
func ownerFree(h *Heap, p, n uintptr, k int, refused error) error {
	switch k % 3 {
	case 0:
		return h.Free(p)
	case 1:
		return h.FreeSized(p, n)
	}
	if !h.TryFree(p, n) {
		return refused
	}
	return nil
}

// TestOwnerFreeRacesRemoteFree frees every block of a fresh heap twice at once: by its owner
// (Free, FreeSized and TryFree in turn, on exclusive pages the plain store of exclusive.go) and
// by another goroutine through the group (the compare-and-swap, after sharing the page).
// Exactly one free of each block must win, and the other report ErrDoubleFree (TryFree:
// false); the heap must then be consistent, with nothing live. Run it with -race: the race
// build orders the two sides with atomics the detector follows, and reports any access the
// protocol leaves unordered.
func TestOwnerFreeRacesRemoteFree(t *testing.T) {
	g := newTestHeap(t, 512<<20, Options{}).g
	for round := range raceRounds() {
		h, ps, ns := freshBlocks(t, g, 3000)
		wins := make([]atomic.Int32, len(ps))
		var ownerWins, otherWins atomic.Int32
		owner := func() {
			at := order(round, 0, len(ps))
			for k := range ps {
				i := at(k)
				err := ownerFree(h, ps[i], ns[i], k, ErrDoubleFree)
				switch {
				case err == nil:
					wins[i].Add(1)
					ownerWins.Add(1)
				case !errors.Is(err, ErrDoubleFree):
					t.Errorf("owner free %#x: %v", ps[i], err)
				}
			}
		}
		other := func() {
			at := order(round, 1, len(ps))
			for k := range ps {
				i := at(k)
				var err error
				if k%2 == 0 {
					err = g.Free(ps[i])
				} else {
					err = g.FreeSized(ps[i], ns[i])
				}
				switch {
				case err == nil:
					wins[i].Add(1)
					otherWins.Add(1)
				case !errors.Is(err, ErrDoubleFree):
					t.Errorf("remote free %#x: %v", ps[i], err)
				}
			}
		}
		race(owner, other)
		for i := range wins {
			if got := wins[i].Load(); got != 1 {
				t.Fatalf("round %d: block %#x freed %d times", round, ps[i], got)
			}
		}
		t.Logf("round %d: owner won %d blocks, the other %d", round, ownerWins.Load(), otherWins.Load())
		closeClean(t, h, round)
	}
}

// TestOwnerFreeRacesHold races the owner's frees of a fresh heap's blocks with Hold (and
// HoldSized) of every block from another goroutine: exactly one wins each block. A block the
// free won is free, and the Hold reports ErrDoubleFree; a block the Hold won is still live and
// held, the free reports ErrHeld (TryFree: false), and FreeHeld takes it back.
func TestOwnerFreeRacesHold(t *testing.T) {
	g := newTestHeap(t, 512<<20, Options{}).g
	for round := range raceRounds() {
		h, ps, ns := freshBlocks(t, g, 3000)
		freed := make([]atomic.Bool, len(ps))
		heldBy := make([]atomic.Bool, len(ps))
		owner := func() {
			at := order(round, 0, len(ps))
			for k := range ps {
				i := at(k)
				err := ownerFree(h, ps[i], ns[i], k, ErrHeld)
				switch {
				case err == nil:
					freed[i].Store(true)
				case !errors.Is(err, ErrHeld):
					t.Errorf("owner free %#x: %v", ps[i], err)
				}
			}
		}
		other := func() {
			at := order(round, 1, len(ps))
			for k := range ps {
				i := at(k)
				var first bool
				var err error
				if k%2 == 0 {
					_, _, first, err = g.Hold(ps[i])
				} else {
					first, err = g.HoldSized(ps[i], ns[i])
				}
				switch {
				case err == nil && first:
					heldBy[i].Store(true)
				case err == nil || !errors.Is(err, ErrDoubleFree):
					t.Errorf("hold %#x: first %v, %v", ps[i], first, err)
				}
			}
		}
		race(owner, other)
		for i, p := range ps {
			if freed[i].Load() == heldBy[i].Load() {
				t.Fatalf("round %d: block %#x: freed %v, held %v: exactly one must win", round, p, freed[i].Load(), heldBy[i].Load())
			}
			if heldBy[i].Load() {
				if !g.Held(p) {
					t.Fatalf("round %d: block %#x won by Hold is not held", round, p)
				}
				if err := h.FreeHeld(p, ns[i]); err != nil {
					t.Fatalf("round %d: FreeHeld %#x: %v", round, p, err)
				}
			}
		}
		closeClean(t, h, round)
	}
}

// TestSharedPagesStayExact checks the owner's frees once a page is shared: a remote free of one
// block shares the page, and the owner's later frees (now compare-and-swaps) still refuse a
// double free, a held block and a wrong size, and the page keeps working.
func TestSharedPagesStayExact(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	var ps []uintptr
	for range 4 {
		p, err := h.Alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	pg, _, _ := h.g.find(ps[0])
	if err := h.g.Free(ps[0]); err != nil {
		t.Fatal(err)
	}
	if m := atomic.LoadUint32(&pg.mode); m != shared {
		t.Fatalf("after a remote free the page's mode is %d, want shared", m)
	}
	if err := h.Free(ps[0]); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("owner free of a remotely freed block: %v", err)
	}
	if _, _, _, err := h.g.Hold(ps[1]); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(ps[1]); !errors.Is(err, ErrHeld) {
		t.Fatalf("owner free of a held block: %v", err)
	}
	if err := h.FreeSized(ps[2], 100); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("owner free with a wrong size: %v", err)
	}
	for i, p := range ps[1:] {
		free := h.FreeSized
		if i == 0 {
			free = h.FreeHeld
		}
		if err := free(p, 4096); err != nil {
			t.Fatal(err)
		}
	}
	h.Collect()
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
}

// TestSharedPageExclusiveAgain checks that a class page shared by a remote free (in pinned, a
// goroutine that moved to another P frees so) becomes exclusive again after reexclusiveAfter
// owner frees without other goroutines at work on it: the remote free is collected on the way,
// the page verifies as exclusive, and the next remote free shares it again and stays exact. A
// page one of whose blocks was held stays shared.
func TestSharedPageExclusiveAgain(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	if !h.g.exclusive {
		t.Skip("pages start shared here (no membarrier)")
	}
	a, err := h.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	pg, _, _ := h.g.find(a)
	if err := h.g.FreeSized(a, 64); err != nil { // remote: shares the page
		t.Fatal(err)
	}
	if m := atomic.LoadUint32(&pg.mode); m != shared {
		t.Fatalf("after a remote free the page's mode is %d, want shared", m)
	}
	ownerPairs(t, h, reexclusiveAfter+1) // the first fills the owner's page cache (near.go)
	if m := atomic.LoadUint32(&pg.mode); m != exclusive {
		t.Fatalf("after %d owner frees with no sharer the page's mode is %d, want exclusive", reexclusiveAfter+1, m)
	}
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
	if err := h.FreeSized(a, 64); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("owner free of the block freed remotely before: %v", err)
	}
	if err := h.g.FreeSized(b, 64); err != nil { // shares it again
		t.Fatal(err)
	}
	if m := atomic.LoadUint32(&pg.mode); m != shared {
		t.Fatalf("a remote free left the page exclusive again (mode %d)", m)
	}
	if err := h.g.FreeSized(b, 64); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("second remote free: %v", err)
	}
	if err := h.FreeSized(b, 64); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("owner free after a remote one: %v", err)
	}

	// A page with a held block stays shared, whatever the owner frees.
	c, err := h.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := h.g.Hold(c); err != nil {
		t.Fatal(err)
	}
	ownerPairs(t, h, 2*reexclusiveAfter)
	if m := atomic.LoadUint32(&pg.mode); m != shared {
		t.Fatalf("a page with a held block became exclusive (mode %d)", m)
	}
	if err := h.FreeHeld(c, 64); err != nil {
		t.Fatal(err)
	}
	h.Collect()
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
}

// TestRemotelyFreedPageStaysShared checks that a class page whose owner has collected
// keepSharedAfter remote frees stays shared however many frees its owner makes, so that a
// producer/consumer flow's remote frees need no count (and no barrier).
func TestRemotelyFreedPageStaysShared(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	keep, err := h.Alloc(64) // keeps the page from being given back
	if err != nil {
		t.Fatal(err)
	}
	pg, _, _ := h.g.find(keep)
	for range keepSharedAfter {
		p, err := h.Alloc(64)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.g.FreeSized(p, 64); err != nil {
			t.Fatal(err)
		}
		h.Collect()
	}
	if !pg.keepShared.Load() {
		t.Fatalf("after %d remote frees collected the page may become exclusive again", keepSharedAfter)
	}
	ownerPairs(t, h, 2*reexclusiveAfter)
	if m := atomic.LoadUint32(&pg.mode); m != shared {
		t.Fatalf("a page freed remotely for good became exclusive (mode %d)", m)
	}
	if err := h.FreeSized(keep, 64); err != nil {
		t.Fatal(err)
	}
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
}

// TestOwnerHoldRacesHold races the owner's holds of a fresh heap's blocks (TryHoldSized, on
// exclusive pages the plain store of holdExcl; HoldSized where the page is not in its cache)
// with Hold and HoldSized of every block from another goroutine: exactly one hold of each
// block is the first, every block ends held, and the owner's TryFreeHeld (a plain store on a
// page still exclusive) or FreeHeld takes each back once.
func TestOwnerHoldRacesHold(t *testing.T) {
	g := newTestHeap(t, 512<<20, Options{})
	for round := range raceRounds() {
		h, ps, ns := freshBlocks(t, g.g, 3000)
		firsts := make([]atomic.Int32, len(ps))
		var plain atomic.Int32
		owner := func() {
			at := order(round, 0, len(ps))
			for k := range ps {
				i := at(k)
				if h.TryFree(ps[i], ns[i]+1) { // refused, after it put the page in the cache
					t.Errorf("TryFree of %#x with the wrong size", ps[i])
				}
				pg, _, hit := h.nearBlock(ps[i])
				excl := hit && atomic.LoadUint32(&pg.mode) == exclusive
				first, ok := h.TryHoldSized(ps[i], ns[i])
				if ok && excl {
					plain.Add(1)
				}
				if !ok {
					var err error
					if first, err = g.g.HoldSized(ps[i], ns[i]); err != nil {
						t.Errorf("owner hold %#x: %v", ps[i], err)
					}
				}
				if first {
					firsts[i].Add(1)
				}
			}
		}
		other := func() {
			at := order(round, 1, len(ps))
			for k := range ps {
				i := at(k)
				var first bool
				var err error
				if k%2 == 0 {
					_, _, first, err = g.g.Hold(ps[i])
				} else {
					first, err = g.g.HoldSized(ps[i], ns[i])
				}
				if err != nil {
					t.Errorf("hold %#x: %v", ps[i], err)
				}
				if first {
					firsts[i].Add(1)
				}
			}
		}
		race(owner, other)
		for i, p := range ps {
			if got := firsts[i].Load(); got != 1 || !g.g.Held(p) {
				t.Fatalf("round %d: block %#x: %d first holds, held %v", round, p, got, g.g.Held(p))
			}
			if !h.TryFreeHeld(p, ns[i]) {
				if err := h.FreeHeld(p, ns[i]); err != nil {
					t.Fatalf("round %d: FreeHeld %#x: %v", round, p, err)
				}
			}
			if h.TryFreeHeld(p, ns[i]) || g.g.Held(p) {
				t.Fatalf("round %d: block %#x taken back twice, or still held", round, p)
			}
		}
		t.Logf("round %d: %d plain holds of the owner", round, plain.Load())
		closeClean(t, h, round)
	}
}

// ownerPairs makes n pairs of an Alloc of 64 bytes and its owner's free on h.
func ownerPairs(t *testing.T, h *Heap, n int) {
	t.Helper()
	for range n {
		p, err := h.Alloc(64)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.FreeSized(p, 64); err != nil {
			t.Fatal(err)
		}
	}
}
