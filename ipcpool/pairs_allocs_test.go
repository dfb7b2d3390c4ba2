package ipcpool

import (
	"fmt"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestProcessPairsAllocateNothing: an attached process's Alloc and Free pair makes no heap
// allocation once its pool has the pages (BenchmarkPairRatio's sizes, and a large buffer), nor
// does its free of a peer's buffer, by handle or by the slice Bytes gave (BenchmarkRemoteFree).
// The pools' purge is off: testing.AllocsPerRun counts every allocation of the process, the
// purger's and the drainers' ticks too (an hour's interval: the owner takes the frees in by
// Collect, outside the count).
func TestProcessPairsAllocateNothing(t *testing.T) {
	if invariants.Enabled {
		t.Skip("the invariants' checks allocate")
	}
	w, path := serveTest(t, Options{Size: 32 << 20, GrantSize: 2 << 20, DrainInterval: 1 << 62, Pool: pinned.Options{PurgeDelay: -1}})
	p := attachTest(t, path, AttachOptions{DrainInterval: 1 << 62, Pool: pinned.Options{PurgeDelay: -1}})
	var failed error
	note := func(what string, err error) {
		if err != nil && failed == nil {
			failed = fmt.Errorf("%s: %w", what, err)
		}
	}
	for _, n := range []int{64, 4096, 1 << 20} {
		pair := func() {
			b, err := p.Alloc(n)
			if err == nil {
				err = p.Free(b)
			}
			note("pair", err)
		}
		pair() // the page, made once
		if a := testing.AllocsPerRun(50, pair); a != 0 {
			t.Errorf("an attached process's pair of %d bytes: %v allocations, want 0", n, a)
		}
	}
	for _, how := range []string{"handle", "address"} {
		const runs = 50
		hs := make([]Handle, runs+1) // AllocsPerRun runs once more, first
		bufs := make([][]byte, runs+1)
		for i := range hs {
			x, err := w.Alloc(64)
			must(t, "owner Alloc", err)
			hs[i], err = w.Handle(x)
			must(t, "Handle", err)
			bufs[i], err = p.Bytes(hs[i])
			must(t, "Bytes", err)
		}
		i := 0
		a := testing.AllocsPerRun(runs, func() {
			if how == "handle" {
				note("FreeHandle", p.FreeHandle(hs[i]))
			} else {
				note("Free of a peer's buffer", p.Free(bufs[i]))
			}
			i++
		})
		if a != 0 {
			t.Errorf("a free of a peer's buffer by %s: %v allocations, want 0", how, a)
		}
		w.Collect()
	}
	must(t, "", failed)
	if live := w.Pool.Stats().Live; live != 0 {
		t.Errorf("%d of the owner's buffers live after the peer's frees were taken in", live)
	}
}
