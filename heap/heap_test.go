package heap

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/gcwatch"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// newTestHeap returns a heap over a pageable arena of the given capacity (one region), closed
// at cleanup.
func newTestHeap(t testing.TB, capacity uintptr, o Options) *Heap {
	t.Helper()
	return newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: capacity, RegionSize: capacity}, o)
}

// newTestHeapOn returns a heap over a new arena with the given options, closed at cleanup.
func newTestHeapOn(t testing.TB, ao arena.Options, o Options) *Heap {
	t.Helper()
	a, err := arena.New(ao)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(a, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("heap close: %v", err)
		}
		if err := a.Close(); err != nil {
			t.Errorf("arena close: %v", err)
		}
	})
	return h
}

func TestClassTable(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{Align: 16})
	c := 0
	for n := uintptr(1); n <= maxClassSize; n++ {
		for uintptr(classSize[c]) < n {
			c++
		}
		if got := h.class(n); h.classes[got].size != uintptr(classSize[c]) {
			t.Fatalf("class(%d) has size %d, want %d", n, h.classes[got].size, classSize[c])
		}
		if n > 128 {
			if waste := float64(classSize[c]-uint32(n)) / float64(n); waste > 0.125 {
				t.Fatalf("size %d wastes %.1f%% in class %d", n, 100*waste, classSize[c])
			}
		}
	}
}

// TestDivMul checks that block indexes computed by multiplication are exact for every block of
// every class.
func TestDivMul(t *testing.T) {
	for c := 0; c < numClasses; c++ {
		size := uint32(classSize[c])
		div := ^uint32(0)/size + 1
		for k := uint32(0); k < uint32(classBlocks[c]); k++ {
			if got := uint32(uint64(k*size) * uint64(div) >> 32); got != k {
				t.Fatalf("class %d: block %d computed as %d", size, k, got)
			}
		}
	}
}

func TestAlignedClasses(t *testing.T) {
	for _, al := range []uintptr{16, 64, 256, 4096, 32768} {
		h := newTestHeap(t, 64<<20, Options{Align: al})
		for _, n := range []uintptr{1, 17, 100, 4000, 70000, 200000} {
			p, err := h.Alloc(n)
			if err != nil || p%al != 0 {
				t.Fatalf("align %d: Alloc(%d) = %#x, %v", al, n, p, err)
			}
			if err := h.Free(p); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	if _, err := h.Alloc(0); !errors.Is(err, ErrInvalidSize) {
		t.Errorf("Alloc(0): %v", err)
	}
	if _, err := h.Alloc(65 << 20); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Alloc(> capacity): %v", err)
	}
	if _, err := h.Alloc(^uintptr(0)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Alloc(max): %v", err)
	}
	if _, err := h.AllocAligned(64, 48); !errors.Is(err, ErrInvalidAlign) {
		t.Errorf("AllocAligned(align 48): %v", err)
	}
	if _, err := New(h.a, Options{Align: 100}); !errors.Is(err, ErrInvalidAlign) {
		t.Errorf("New(align 100): %v", err)
	}
	var local [16]byte
	if err := h.Free(mem.Addr(local[:])); !errors.Is(err, ErrNotOwned) {
		t.Errorf("Free(foreign): %v", err)
	}
	if err := h.Free(0); !errors.Is(err, ErrNotOwned) {
		t.Errorf("Free(0): %v", err)
	}
	for _, n := range []uintptr{100, 5000, 300 << 10, 5 << 20} {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Free(p + 64); !errors.Is(err, ErrInteriorPointer) {
			t.Errorf("Free(interior of %d): %v", n, err)
		}
		if err := h.FreeSized(p, n-1); !errors.Is(err, ErrSizeMismatch) {
			t.Errorf("FreeSized(wrong size of %d): %v", n, err)
		}
		if err := h.FreeSized(p, n); err != nil {
			t.Errorf("FreeSized(%d): %v", n, err)
		}
		if err := h.Free(p); !errors.Is(err, ErrDoubleFree) {
			t.Errorf("double free of %d: %v", n, err)
		}
	}
	// The heap is still usable after all of that.
	p, err := h.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); !errors.Is(err, ErrLiveBlocks) {
		t.Fatalf("Close with a live block: %v", err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Alloc(64); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after Close: %v", err)
	}
	if err := h.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

func TestAllocAligned(t *testing.T) {
	h := newTestHeap(t, 512<<20, Options{})
	r := rand.New(rand.NewPCG(3, 4))
	for al := uintptr(16); al <= 64<<20; al <<= 1 {
		for range 4 {
			n := uintptr(1 + r.IntN(1<<uint(r.IntN(22))))
			p, err := h.AllocAligned(n, al)
			if err != nil {
				t.Fatalf("AllocAligned(%d, %d): %v", n, al, err)
			}
			if p%al != 0 {
				t.Fatalf("AllocAligned(%d, %d) = %#x", n, al, p)
			}
			clear(mem.Bytes(p, n))
			if err := h.FreeSized(p, n); err != nil {
				t.Fatalf("free aligned (%d, %d): %v", n, al, err)
			}
		}
	}
}

func TestZalloc(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	for _, n := range []uintptr{64, 3000, 100 << 10, 600 << 10, 3 << 20} {
		for round := range 3 {
			p, err := h.Zalloc(n)
			if err != nil {
				t.Fatal(err)
			}
			b := mem.Bytes(p, n)
			for i, v := range b {
				if v != 0 {
					t.Fatalf("Zalloc(%d) round %d: byte %d = %d", n, round, i, v)
				}
			}
			for i := range b {
				b[i] = 0xAB
			}
			if err := h.Free(p); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestHugeUpToCapacity allocates single objects far beyond mimalloc's 32–64 MiB cap, up to
// nearly the whole arena.
func TestHugeUpToCapacity(t *testing.T) {
	const capacity = 1 << 30
	h := newTestHeap(t, capacity, Options{})
	for _, n := range []uintptr{64 << 20, 256 << 20, 1000 << 20, capacity} {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatalf("Alloc(%d MiB) in a %d MiB arena: %v", n>>20, capacity>>20, err)
		}
		b := mem.Bytes(p, n)
		b[0], b[n-1] = 1, 2
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	if st := h.a.Stats(); st.AlignWaste != 0 {
		t.Errorf("AlignWaste = %d", st.AlignWaste)
	}
}

// TestExternalOddBase runs a heap over a caller's region whose base is not chunk-aligned (and,
// second, not even block-aligned): blocks still meet the alignment, and the waste is what the
// arithmetic says.
func TestExternalOddBase(t *testing.T) {
	// Go memory is fine for an external host region in a test, kept alive while the arenas
	// know it by its address only.
	backing := make([]byte, 40<<20)
	defer runtime.KeepAlive(backing)
	collected := gcwatch.Watch(backing)
	base := mem.Addr(backing)
	for _, c := range []struct {
		off, waste uintptr
	}{
		{off: (4096 - base%4096) + 4096, waste: 0}, // page-aligned, not chunk-aligned
		{off: (256 - base%256) + 8, waste: 248},    // 8 bytes past a 256-byte boundary
	} {
		start := base + c.off
		prov, err := arena.External(arena.ExternalRegion{Base: start, Size: 32 << 20, Kind: arena.HostPageable, Committed: true})
		if err != nil {
			t.Fatal(err)
		}
		a, err := arena.New(arena.Options{Provider: prov})
		if err != nil {
			t.Fatal(err)
		}
		h, err := New(a, Options{Align: 256})
		if err != nil {
			t.Fatal(err)
		}
		var ps []uintptr
		for _, n := range []uintptr{1, 300, 5000, 70000, 1 << 20, 3 << 20} {
			p, err := h.Alloc(n)
			if err != nil {
				t.Fatalf("Alloc(%d): %v", n, err)
			}
			if p%256 != 0 || p < start || p+n > start+32<<20 {
				t.Fatalf("Alloc(%d) = %#x outside or misaligned (region %#x)", n, p, start)
			}
			ps = append(ps, p)
		}
		if st := a.Stats(); st.AlignWaste != uint64(c.waste) {
			t.Errorf("base %%256 = %d: AlignWaste = %d, want %d", start%256, st.AlignWaste, c.waste)
		}
		for _, p := range ps {
			if err := h.Free(p); err != nil {
				t.Fatal(err)
			}
		}
		if collected() {
			t.Fatal("the external region's Go memory was collected while an arena held it")
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestObjectPages checks that a freed object page is reused for the next object of about its
// size, and that a dropped one gives its memory back while its segment stays in use.
func TestObjectPages(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(600 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	q, err := h.Alloc(580 << 10) // within 12.5 %: the same page
	if err != nil || q != p {
		t.Fatalf("object page not reused: %#x then %#x (%v)", p, q, err)
	}
	// Fill a segment with object pages, keep one live, free the rest: beyond the kept ones
	// the freed pages are decommitted although the segment is still in use.
	var ps []uintptr
	for range 6 {
		x, err := h.Alloc(300 << 10)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, x)
	}
	before := h.a.Stats().Committed
	for _, x := range ps {
		if err := h.Free(x); err != nil {
			t.Fatal(err)
		}
	}
	h.Trim()   // the heap gives its kept pages up...
	h.a.Trim() // ...and the arena decommits them now rather than after the purge delay
	if after := h.a.Stats().Committed; after >= before {
		t.Fatalf("committed %d after freeing and trimming, %d before", after, before)
	}
	// The decommitted slices are committed again when reused: touching them must not fault.
	for range 6 {
		x, err := h.Alloc(300 << 10)
		if err != nil {
			t.Fatal(err)
		}
		clear(mem.Bytes(x, 300<<10))
		ps = append(ps[:0], x)
		defer h.Free(x)
	}
	if err := h.Free(q); err != nil {
		t.Fatal(err)
	}
}

// TestHugeReuse checks that a freed huge object serves the next one of about its size at the
// same address, that it still refuses a second free while kept, and that a zeroed allocation
// reads as zero once the arena has purged the kept memory.
func TestHugeReuse(t *testing.T) {
	h := newTestHeap(t, 256<<20, Options{})
	p, err := h.Alloc(16 << 20)
	if err != nil {
		t.Fatal(err)
	}
	mem.Bytes(p, 16<<20)[0] = 9
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("second free of a kept huge object: %v", err)
	}
	q, err := h.Alloc(12 << 20) // at least half of it: the same span
	if err != nil || q != p {
		t.Fatalf("huge object not reused: %#x then %#x (%v)", p, q, err)
	}
	if err := h.Free(q); err != nil {
		t.Fatal(err)
	}
	h.a.Trim() // purges the kept memory
	z, err := h.Zalloc(16 << 20)
	if err != nil || z != p {
		t.Fatalf("Zalloc after purge: %#x %v", z, err)
	}
	if b := mem.Bytes(z, 16<<20); b[0] != 0 {
		t.Fatal("zeroed huge object is not zero")
	}
	small, err := h.Alloc(4 << 20) // too small for a kept span: a new one (the kept one goes back)
	if err != nil {
		t.Fatal(err)
	}
	if st := h.Stats(); st.Huge != 2 {
		t.Fatalf("%d huge objects", st.Huge)
	}
	for _, x := range []uintptr{z, small} {
		if err := h.Free(x); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRemoteFreeStates walks a block through every state word: live, freed by another
// goroutine and not yet collected, collected, live again. Every free or size query in a free
// state reports ErrDoubleFree, and the accounting follows.
func TestRemoteFreeStates(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	for _, n := range []uintptr{24, 5000, 300 << 10, 5 << 20} {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := h.g.Size(p); err != nil || got != n {
			t.Fatalf("Size(live %d) = %d, %v", n, got, err)
		}
		if err := h.g.FreeSized(p, n); err != nil {
			t.Fatalf("remote free of %d: %v", n, err)
		}
		_, sizeErr := h.g.Size(p)
		for what, err := range map[string]error{
			"remote free again": h.g.Free(p),
			"owner free":        h.Free(p),
			"owner sized free":  h.FreeSized(p, n),
			"size of freed":     sizeErr,
		} {
			if !errors.Is(err, ErrDoubleFree) {
				t.Errorf("%d bytes, %s before collection: %v", n, what, err)
			}
		}
		h.Collect()
		if st := h.Stats(); st.Live != 0 || st.InUse != 0 {
			t.Fatalf("%d bytes: after collection Live %d, InUse %d", n, st.Live, st.InUse)
		}
		if err := h.Free(p); !errors.Is(err, ErrDoubleFree) {
			t.Errorf("%d bytes, owner free after collection: %v", n, err)
		}
		q, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := h.g.Size(q); err != nil || got != n {
			t.Fatalf("Size(reallocated %d) = %d, %v", n, got, err)
		}
		if err := h.Free(q); err != nil {
			t.Fatalf("free of the reallocated %d: %v", n, err)
		}
	}
}

// TestPagesCommitAsTheyFill checks that a class page commits its slices as its bump index
// reaches them: one 200 KiB block of a 2 MiB large page commits the seven slices it covers,
// and the page's later blocks commit more.
func TestPagesCommitAsTheyFill(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	const n = 200 << 10
	p, err := h.Zalloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if c := h.a.Stats().Committed; c != 7*sliceSize {
		t.Fatalf("one %d-byte block committed %d bytes, want %d", n, c, 7*sliceSize)
	}
	q, err := h.Zalloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if c := h.a.Stats().Committed; c != 13*sliceSize {
		t.Fatalf("two blocks committed %d bytes, want %d", c, 13*sliceSize)
	}
	for _, b := range [][]byte{mem.Bytes(p, n), mem.Bytes(q, n)} {
		for i, v := range b {
			if v != 0 {
				t.Fatalf("Zalloc block byte %d = %d", i, v)
			}
		}
		b[n-1] = 1 // the block's last byte is committed
	}
	for _, x := range []uintptr{p, q} {
		if err := h.Free(x); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGeometry checks the exported geometry against what Alloc does: MaxClassSize is the
// largest block a shared page serves, HugeThreshold the largest that is not a huge object.
func TestGeometry(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(MaxClassSize)
	if err != nil {
		t.Fatal(err)
	}
	q, err := h.Alloc(MaxClassSize + 1)
	if err != nil {
		t.Fatal(err)
	}
	if st := h.Stats(); st.Classes[len(st.Classes)-1].Size != MaxClassSize {
		t.Errorf("largest class %d, MaxClassSize %d", st.Classes[len(st.Classes)-1].Size, MaxClassSize)
	}
	r, err := h.Alloc(HugeThreshold)
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.Alloc(HugeThreshold + 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := h.Stats().Huge; n != 1 {
		t.Errorf("blocks of %d and %d bytes made %d huge objects, want 1", HugeThreshold, HugeThreshold+1, n)
	}
	for _, b := range []uintptr{p, q, r, s} {
		if err := h.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(h.Arena(), Options{Retention: RetainSegments + 1}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("an unknown retention: %v, want ErrInvalidArgument", err)
	}
}

// TestKeptReuseNoArenaCall: alloc+free pairs of an object page (512 KiB, 1 MiB) and of a huge
// object (4 MiB) reuse the kept memory with no arena Commit or Decommit and no provider call;
// the kept memory stays committed, and the arena reports it kept while it is idle.
func TestKeptReuseNoArenaCall(t *testing.T) {
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 64 << 20, PurgeDelay: time.Hour}, Options{})
	for _, n := range []uintptr{512 << 10, 1 << 20, 4 << 20} {
		p, err := h.Alloc(n)
		mustOK(t, err)
		mustOK(t, h.Free(p)) // the first free tracks the range: one arena call
		before := h.a.Stats()
		if before.Kept != uint64(n) {
			t.Fatalf("%d bytes: Kept %d after the free", n, before.Kept)
		}
		for i := range 1000 {
			q, err := h.Alloc(n)
			mustOK(t, err)
			if q != p {
				t.Fatalf("%d bytes: pair %d got %#x, not the kept %#x", n, i, q, p)
			}
			mem.Bytes(q, n)[uintptr(i)*4099%n] = 1
			mustOK(t, h.Free(q))
		}
		st := h.a.Stats()
		if st.CommitCalls != before.CommitCalls || st.DecommitCalls != before.DecommitCalls ||
			st.Commits != before.Commits || st.Decommits != before.Decommits || st.Committed != before.Committed || st.Kept != uint64(n) {
			t.Fatalf("%d bytes: reuse within the delay reached the arena:\nbefore %+v\nafter  %+v", n, before, st)
		}
		h.Trim() // drops the kept page: its memory goes to the purge
		if st := h.a.Stats(); st.Kept != 0 {
			t.Fatalf("%d bytes: Kept %d after Trim", n, st.Kept)
		}
	}
}

// TestKeptPurgedAfterDelay: an object page and a huge object freed and not reused are
// decommitted by the arena's purge timer after the delay, while the heap makes no call at all;
// reused afterwards they are committed again, read as zero and say so.
func TestKeptPurgedAfterDelay(t *testing.T) {
	const delay = 30 * time.Millisecond
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 64 << 20, PurgeDelay: delay}, Options{})
	sizes := []uintptr{1 << 20, 4 << 20}
	var ps []uintptr
	for _, n := range sizes {
		p, err := h.Alloc(n)
		mustOK(t, err)
		clear(mem.Bytes(p, n))
		mem.Bytes(p, n)[n-1] = 0xAB
		ps = append(ps, p)
	}
	committed := h.a.Stats().Committed
	start := time.Now()
	for _, p := range ps {
		mustOK(t, h.Free(p))
	}
	if st := h.a.Stats(); st.Kept != 5<<20 || st.Committed != committed {
		t.Fatalf("right after the frees: Kept %d, Committed %d (was %d)", st.Kept, st.Committed, committed)
	}
	for h.a.Stats().Kept != 0 {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("kept memory not purged 5 s after a delay of %v: %+v", delay, h.a.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := time.Since(start); d < delay {
		t.Fatalf("kept memory purged after %v, before the delay of %v", d, delay)
	}
	if st := h.a.Stats(); committed-st.Committed < 5<<20 {
		t.Fatalf("purge gave back %d bytes of the 5 MiB kept", committed-st.Committed)
	}
	for i, n := range sizes {
		q, fresh, err := h.alloc(n, h.align)
		mustOK(t, err)
		if q != ps[i] || !fresh || mem.Bytes(q, n)[n-1] != 0 {
			t.Fatalf("%d bytes after the purge: %#x (kept %#x), fresh %v, last byte %#x", n, q, ps[i], fresh, mem.Bytes(q, n)[n-1])
		}
		mustOK(t, h.Free(q))
	}
}

// TestSparePage checks a small class's spare: a page emptied while another is current stays,
// empty, and serves the class's next allocations (no new page is made); a second page emptied
// meanwhile goes back; Trim gives the spare back. Medium pages keep no spare.
func TestSparePage(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	pages := func(size uint64) int {
		for _, c := range h.Stats().Classes {
			if c.Size == size {
				return c.Pages
			}
		}
		return 0
	}
	alloc := func(n int, size uintptr) []uintptr {
		var ps []uintptr
		for range n {
			p, err := h.Alloc(size)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		return ps
	}
	free := func(ps []uintptr) {
		for _, p := range ps {
			if err := h.Free(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	pageOf := func(p uintptr) *page {
		pg, _, _ := h.g.find(p)
		return pg
	}
	ps := alloc(48, 4096) // three full 64 KiB pages of 4 KiB blocks; the third is current
	first := pageOf(ps[0])
	free(ps[:32]) // the first two empty: the first is kept, the second given back
	if n := pages(4096); n != 2 {
		t.Fatalf("%d pages after emptying two of three, want 2 (the current one and the spare)", n)
	}
	again := alloc(16, 4096)
	for _, p := range again {
		if pageOf(p) != first {
			t.Fatalf("block %#x is not in the spare page", p)
		}
	}
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
	free(again)
	free(ps[32:])
	if n := pages(4096); n != 2 {
		t.Fatalf("%d pages, want 2 (an empty current page and the spare)", n)
	}
	h.Trim()
	if n := pages(4096); n != 0 {
		t.Fatalf("%d pages after Trim, want 0", n)
	}
	med := alloc(16, 64<<10) // two 512 KiB pages of 64 KiB blocks; the second is current
	free(med[:8])
	if n := pages(64 << 10); n != 1 {
		t.Fatalf("%d medium pages after emptying one, want 1: medium classes keep no spare", n)
	}
	free(med[8:])
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
}

// TestAlignBeyondCapacity: a request aligned beyond the arena's capacity, which no memory the
// heap could give back would serve, fails with ErrTooLarge at once, as one of more bytes than
// the capacity does. It failed as out of memory, after the heap had trimmed itself (its kept
// object pages and huge objects dropped) to try again.
func TestAlignBeyondCapacity(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	for _, n := range []uintptr{300 << 10, 3 << 20} { // kept when freed
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, al := range []uintptr{128 << 20, 1 << 40, 1 << 63} {
		for _, n := range []uintptr{64, 300 << 10, 3 << 20} {
			_, err := h.AllocAligned(n, al)
			if !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrOutOfMemory) {
				t.Errorf("AllocAligned(%d, %d) in an arena of 64 MiB: %v, want ErrTooLarge", n, al, err)
			}
		}
	}
	if len(h.objFree) != 1 || len(h.bigFree) != 1 {
		t.Errorf("kept pages: %d object pages, %d huge objects, want 1 and 1 (the heap trimmed itself)",
			len(h.objFree), len(h.bigFree))
	}
}
