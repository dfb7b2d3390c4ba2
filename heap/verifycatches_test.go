package heap

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/keep"
)

// verifyCatches checks that verify passes on h, then that it reports want once break_ has
// broken an invariant, then that it passes again once mend has mended it.
func verifyCatches(t *testing.T, h *Heap, what, want string, break_, mend func()) {
	t.Helper()
	if err := h.verify(); err != nil {
		t.Fatalf("%s: before: %v", what, err)
	}
	break_()
	err := h.verify()
	mend()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: verify says %v, want %q", what, err, want)
	}
	if err := h.verify(); err != nil {
		t.Fatalf("%s: after: %v", what, err)
	}
}

// TestVerifyCatchesLostRemoteFree: a remote bit set on a page that is not on the pending stack
// is a free no collection ever takes in, and a page flagged pending off the stack is one no
// remote free pushes again, and a page left sharing makes every later sharer wait for good;
// verify reports each.
func TestVerifyCatchesLostRemoteFree(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	q, err := h.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	pg, idx, _ := h.g.find(p)
	verifyCatches(t, h, "bit without pending", "not on the pending stack", func() {
		pg.state[idx] |= freedRemote
		pg.remote[0].Or(1 << idx)
	}, func() {
		pg.state[idx] &^= freedRemote
		pg.remote[0].Store(0)
	})
	const offStack = "pending flag true, on the pending stack false"
	verifyCatches(t, h, "pending off the stack", offStack, func() {
		pg.pending.Store(1)
	}, func() { pg.pending.Store(0) })
	if err := h.g.Free(q); err != nil {
		t.Fatal(err)
	}
	verifyCatches(t, h, "on the stack, flag clear", "with its pending flag clear", func() {
		pg.pending.Store(0)
	}, func() { pg.pending.Store(1) })
	verifyCatches(t, h, "left sharing", "with no sharer at work", func() {
		atomic.StoreUint32(&pg.mode, sharing)
	}, func() { atomic.StoreUint32(&pg.mode, shared) })
	h.Collect()
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyCatchesKeptRanges: a live object page or huge object whose kept range is idle
// (which the arena's purge gives up under the block), a kept one left busy with its memory
// noted committed, and a live object page on slices not known committed: verify reports each.
// The arena's purge timer is off: a tick while a live block's range is marked idle gave the
// range up (decommitted it under the block), and verify failed after the mend (1 run in 30
// under -race on a loaded machine; 2 in 5 in the probe build, whose purge delay is 1 µs).
func TestVerifyCatchesKeptRanges(t *testing.T) {
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 64 << 20,
		RegionSize: 64 << 20, PurgeDelay: -1}, Options{})
	for _, n := range []uintptr{300 << 10, 3 << 20} {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
		if p2, err := h.Alloc(n); err != nil || p2 != p {
			t.Fatalf("reuse of %d: %#x %v, want %#x", n, p2, err, p)
		}
		pg, _, _ := h.g.find(p)
		if !pg.tracked {
			t.Fatalf("object of %d is not tracked", n)
		}
		verifyCatches(t, h, "live, range idle", "not busy", func() {
			pg.kept.Word.Store(uint64(keep.Idle))
		}, func() { pg.kept.Word.Store(uint64(keep.Busy)) })
		if n < HugeThreshold {
			verifyCatches(t, h, "live, slices not known committed", "not all known committed", func() {
				pg.seg.decommit |= pg.seg.slicesOf(pg.base, pg.base+1)
			}, func() { pg.seg.decommit &^= pg.seg.slicesOf(pg.base, pg.base+1) })
		}
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
		verifyCatches(t, h, "kept, range busy", "noted committed", func() {
			pg.kept.Word.Store(uint64(keep.Busy))
		}, func() { h.kc.Idle(&pg.kept) })
		verifyCatches(t, h, "kept twice", "twice", func() {
			if n < HugeThreshold {
				h.objFree = append(h.objFree, pg)
			} else {
				h.bigFree = append(h.bigFree, pg)
			}
		}, func() {
			if n < HugeThreshold {
				h.objFree = h.objFree[:len(h.objFree)-1]
			} else {
				h.bigFree = h.bigFree[:len(h.bigFree)-1]
			}
		})
	}
}

// TestVerifyCatchesSegmentCounts: the counts Stats reports (Segments, Huge) must be the
// segments and huge objects the group's tables hold for the heap, and its spares.
func TestVerifyCatchesSegmentCounts(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	q, err := h.Alloc(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	const want = "segments and"
	verifyCatches(t, h, "a segment too many", want, func() { h.nsegs++ }, func() { h.nsegs-- })
	verifyCatches(t, h, "a huge object too few", want, func() { h.nhuge-- }, func() { h.nhuge++ })
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(q); err != nil {
		t.Fatal(err)
	}
	h.Trim() // the spare segment and the kept huge object go
	verifyCatches(t, h, "after Trim", want, func() { h.nsegs++ }, func() { h.nsegs-- })
}

// TestVerifyCatchesRoomList: a segment with free slices missing from its kind's list of
// segments with room, and a segment on a list that is not one of the heap's in the tables (a
// chunk given back, or of another kind): verify reports each.
func TestVerifyCatchesRoomList(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	pg, _, _ := h.g.find(p)
	s := pg.seg
	verifyCatches(t, h, "room off the list", "on its list of segments with room false", func() {
		h.unlistRoom(s)
	}, func() { h.listRoom(s) })
	gone := &segment{base: s.base + segSize, kind: segSmall, free: ^uint64(0)}
	verifyCatches(t, h, "a segment not in the tables", "is not one of the heap's", func() {
		h.listRoom(gone)
	}, func() { h.unlistRoom(gone) })
	verifyCatches(t, h, "on another kind's list", "is not one of the heap's", func() {
		h.unlistRoom(s)
		h.segs[segMedium].PushFront(s, &s.room)
	}, func() {
		h.segs[segMedium].Remove(&s.room)
		h.listRoom(s)
	})
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
}
