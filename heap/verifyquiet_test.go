package heap

import (
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// TestVerifyQuietSkipsForeignChanges: the owner's automatic checks must not read a remote free
// another goroutine has half done as a broken heap (under -race they panicked inside pinned's
// Close racing frees, and the pool deadlocked). verifyQuiet gives no verdict while such a
// change is under way, and its verdict otherwise.
func TestVerifyQuietSkipsForeignChanges(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(100)
	mustOK(t, err)
	h.allocs++ // a broken count
	if err := h.verifyQuiet(); err == nil {
		t.Fatal("verifyQuiet missed a broken count")
	}
	h.g.foreignBegun.Add(1)
	if err := h.verifyQuiet(); err != nil {
		t.Fatalf("verifyQuiet gave a verdict while a remote free was under way: %v", err)
	}
	h.g.foreignEnded.Add(1)
	h.allocs--
	mustOK(t, h.verifyQuiet())
	mustOK(t, h.Free(p))

	if !invariants.Enabled {
		return // remote frees are counted only where the checks run: -race, -tags invariants
	}
	// Remote frees from four goroutines while the owner checks: no false alarm.
	for range 20 {
		var ps []uintptr
		for range 4000 {
			p, err := h.Alloc(64)
			mustOK(t, err)
			ps = append(ps, p)
		}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, p := range ps[w*1000 : (w+1)*1000] {
					if err := h.g.Free(p); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		for range 20 {
			if err := h.verifyQuiet(); err != nil {
				t.Fatalf("a false alarm with remote frees under way: %v", err)
			}
		}
		wg.Wait()
		h.Collect()
	}
}

// TestVerifyQuietSkipsHeapMadeDuringWalk: a heap made in the group while the only other heap
// walks the group's tables registers its segments between the walk's read of the chunk table
// and its read of the address table. The cross check read that as "the address table holds a
// segment the chunk table does not" and panicked in pinned's race soak (a shard made on a P
// that allocated for the first time while another shard's Trim checked). verifyQuiet gives no
// verdict when the group gained a heap during the walk.
func TestVerifyQuietSkipsHeapMadeDuringWalk(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(100)
	mustOK(t, err)
	var other *Heap
	var q uintptr
	verifyTablesMidway = func() {
		verifyTablesMidway = nil
		var err error
		other, err = h.g.NewHeap(Options{})
		mustOK(t, err)
		q, err = other.Alloc(100)
		mustOK(t, err)
	}
	defer func() { verifyTablesMidway = nil }()
	if err := h.verifyQuiet(); err != nil {
		t.Fatalf("a heap made during the walk read as a broken group: %v", err)
	}
	if other == nil {
		t.Fatal("the walk did not reach the tables")
	}
	mustOK(t, other.Free(q))
	mustOK(t, other.Close())
	mustOK(t, h.Free(p))
}
