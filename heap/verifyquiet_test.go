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
