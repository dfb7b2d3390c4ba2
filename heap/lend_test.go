package heap

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// testLender lends heap h under a mutex, as package pinned's big shard does.
type testLender struct {
	mu sync.Mutex
	h  *Heap
}

func (l *testLender) TryLend() *Heap {
	if l.mu.TryLock() {
		return l.h
	}
	return nil
}

func (l *testLender) EndLend() { l.mu.Unlock() }

// newLendGroup returns a group over coarse memory (huge pages: 2 MiB granules) with a lender
// and n heaps that borrow from it, closed at cleanup: the borrowers first, then the lender,
// then the arena, which refuses to close while a chunk is still handed out.
func newLendGroup(t *testing.T, n int) (*Group, *testLender, []*Heap) {
	t.Helper()
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB}), Capacity: 1 << 30, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGroup(a)
	if err != nil {
		t.Fatal(err)
	}
	if !g.Coarse() {
		t.Fatal("a group over huge pages is not coarse")
	}
	newHeap := func() *Heap {
		h, err := g.NewHeap(Options{Align: 64})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	l := &testLender{h: newHeap()}
	hs := make([]*Heap, n)
	for i := range hs {
		hs[i] = newHeap()
		hs[i].SetLender(l)
	}
	t.Cleanup(func() {
		for _, h := range append(hs, l.h) {
			if err := h.Close(); err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("heap %d close: %v", h.Index(), err)
			}
		}
		if err := a.Close(); err != nil {
			t.Errorf("arena close: %v", err)
		}
	})
	return g, l, hs
}

// chunkOf returns the base of the 2 MiB chunk that holds p (the arena's chunks are aligned).
func chunkOf(p uintptr) uintptr { return p &^ (segSize - 1) }

// TestLendSharesChunks: the class pages of a borrowing heap go in the chunk the lender's
// buffer left room in, one chunk for both where each heap took its own before; they are the
// borrower's (its blocks, its frees); given back, their room is the lender's again, at once
// when the lender is free and at its next call when it was held; and a held lender sends the
// page to the borrower's own runs, without waiting.
func TestLendSharesChunks(t *testing.T) {
	g, l, hs := newLendGroup(t, 2)
	lender, b := l.h, hs[0]
	obj, err := lender.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	var small []uintptr
	for _, h := range hs {
		for _, n := range []uintptr{100, 4 << 10, 16 << 10, 48 << 10} {
			p, err := h.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			if chunkOf(p) != chunkOf(obj) {
				t.Errorf("heap %d's block of %d bytes is in chunk %#x, not in the lender's %#x", h.Index(), n, chunkOf(p), chunkOf(obj))
			}
			if o, err := g.Owner(p); err != nil || o != h {
				t.Errorf("a borrowed page's block: owner %v (%v), want heap %d", o, err, h.Index())
			}
			small = append(small, p)
		}
		if len(h.runs) != 0 {
			t.Errorf("heap %d made %d runs of its own", h.Index(), len(h.runs))
		}
	}
	if c := g.Usage().Committed; c != segSize {
		t.Errorf("a 1 MiB buffer and two heaps' class pages commit %d MiB; want one chunk", c>>20)
	}
	verifyAll(t, append(hs, lender)...)

	// Given back while the lender is free: its room is the lender's at once.
	for _, p := range small[:4] {
		if err := b.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	b.Trim()
	if l.h.returned.Load() != nil {
		t.Error("pages given back while the lender was free wait for it")
	}
	// Given back while it is held: they wait on its returned list, for its next call.
	l.mu.Lock()
	for _, p := range small[4:] {
		if err := g.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	hs[1].Trim()
	if l.h.returned.Load() == nil {
		t.Error("pages given back while the lender was held are not on its returned list")
	}
	// A held lender: a new page goes to the borrower's own runs.
	p, err := b.Alloc(8 << 10)
	l.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if len(b.runs) != 1 || chunkOf(p) == chunkOf(obj) {
		t.Errorf("with the lender held, a new class page went in chunk %#x (the lender's %#x; runs of its own %d)", chunkOf(p), chunkOf(obj), len(b.runs))
	}
	verifyAll(t, append(hs, lender)...)
	lender.Trim()
	if l.h.returned.Load() != nil {
		t.Error("the lender's Trim left pages on its returned list")
	}
	for _, err := range []error{b.Free(p), lender.Free(obj)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range append(hs, lender) {
		h.Trim()
	}
	verifyAll(t, append(hs, lender)...)
	g.a.Trim()
	if c := g.Usage().Committed; c != 0 {
		t.Errorf("nothing live, every heap trimmed: %d bytes committed", c)
	}
}

// TestLendReturnedStale: a block of a page given back and not yet taken back reads as freed:
// a stale free is a double free, not a free of the lender's memory.
func TestLendReturnedStale(t *testing.T) {
	g, l, hs := newLendGroup(t, 1)
	p, err := hs[0].Alloc(4 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := hs[0].Free(p); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	hs[0].Trim() // the page goes on the returned list
	err = g.Free(p)
	l.mu.Unlock()
	if !errors.Is(err, ErrDoubleFree) {
		t.Errorf("a free of a block of a returned page: %v; want ErrDoubleFree", err)
	}
}

// TestLendProperty runs long random sequences over a lender and two borrowers (lendRun),
// three seeds of 8,000 steps; 2,000 with -short and under the race detector (one goroutine, no
// purge: the other runs cover the sequences).
func TestLendProperty(t *testing.T) {
	steps := 8_000
	if testing.Short() || raceEnabled {
		steps = 2_000
	}
	for seed := uint64(1); seed <= 3; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		lendRun(t, steps, r.IntN)
	}
}

// FuzzLend is TestLendProperty with its choices read from the input.
func FuzzLend(f *testing.F) {
	f.Add([]byte{90, 1, 0, 90, 2, 200, 90, 0, 9, 0, 3, 1, 2, 60, 0, 1, 6, 0, 5, 1})
	f.Add([]byte{90, 1, 255, 255, 4, 90, 2, 40, 1, 0, 6, 90, 2, 100, 2, 30, 0, 8, 0, 90, 0, 10, 40, 1})
	f.Fuzz(func(t *testing.T, prog []byte) {
		lendRun(t, len(prog)/2, func(n int) int {
			if len(prog) == 0 {
				return 0
			}
			b := int(prog[0])
			prog = prog[1:]
			if n > 256 { // a size: two bytes
				if len(prog) > 0 {
					b = b<<8 | int(prog[0])
					prog = prog[1:]
				}
			}
			return b % n
		})
	})
}

// lendRun runs steps random operations over a lender and two borrowers, choosing with pick
// (a number in [0, n)): the lender held now and then (so pages go both ways and come back
// both ways), allocations of 16 B - 1 MiB in any heap, frees from the owner and from the
// group, Trim and PurgeIdle, with every byte of every block checked at its free and the
// invariants of every heap checked every 1000 steps and at the end; then everything is freed,
// and the arena closes (at cleanup) only if every chunk came back.
func lendRun(t *testing.T, steps int, pick func(n int) int) {
	g, l, hs := newLendGroup(t, 2)
	heaps := append([]*Heap{l.h}, hs...)
	type block struct {
		p, n uintptr
		h    *Heap
		v    byte
	}
	var live []block
	free := func(i int) {
		b := live[i]
		for j, c := range mem.Bytes(b.p, b.n) {
			if c != b.v {
				t.Fatalf("block %#x (%d bytes) byte %d is %#x, want %#x", b.p, b.n, j, c, b.v)
			}
		}
		var err error
		if pick(4) == 0 {
			err = g.Free(b.p)
		} else {
			err = b.h.Free(b.p)
		}
		if err != nil {
			t.Fatalf("free %#x: %v", b.p, err)
		}
		live[i] = live[len(live)-1]
		live = live[:len(live)-1]
	}
	held := false
	for step := range steps {
		switch k := pick(100); {
		case k < 5:
			if held {
				l.mu.Unlock()
			} else {
				l.mu.Lock()
			}
			held = !held
		case k < 7:
			if h := heaps[pick(len(heaps))]; h != l.h || !held {
				h.Trim()
			}
		case k < 9:
			if h := heaps[pick(len(heaps))]; h != l.h || !held {
				h.PurgeIdle()
			}
		case k < 55 && len(live) > 0:
			free(pick(len(live)))
		default:
			h := heaps[pick(len(heaps))]
			if h == l.h && held {
				continue // its owner is away
			}
			n := uintptr(math.Round(16 * math.Pow(1<<16, float64(pick(1<<16))/(1<<16)))) // 16 B - 1 MiB
			p, err := h.Alloc(n)
			if err != nil {
				t.Fatalf("alloc %d: %v", n, err)
			}
			v := byte(step)
			b := mem.Bytes(p, n)
			for j := range b {
				b[j] = v
			}
			live = append(live, block{p, n, h, v})
		}
		if step%1000 == 999 && !held {
			verifyAll(t, heaps...)
		}
	}
	if held {
		l.mu.Unlock()
	}
	for len(live) > 0 {
		free(len(live) - 1)
	}
	for _, h := range heaps {
		h.Trim()
	}
	verifyAll(t, heaps...)
}

// verifyAll runs verify on each heap.
func verifyAll(t *testing.T, hs ...*Heap) {
	t.Helper()
	for _, h := range hs {
		if err := h.verifyWith(false); err != nil {
			t.Fatalf("heap %d: %v", h.Index(), err)
		}
	}
}

// TestLendKeepsClassPagesTogether: small buffers that outlive the large ones around them
// (weights or a KV cache's blocks beside transient staging buffers) must not pin the chunks
// the large ones leave. A borrower keeps one small buffer of 1 B - 16 KiB every tenth step
// while its lender churns 20 buffers of 256 KiB - 2 MiB; once the large ones are freed and
// both heaps trimmed, the 300 small ones (about 2.4 MiB) hold at most 10 MiB. With class pages
// placed at the first room in the runs, among the objects, they held 12 - 14 MiB for three
// seeds of four; among other class pages first (run.find), 8 - 10.
func TestLendKeepsClassPagesTogether(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		g, l, hs := newLendGroup(t, 1)
		r := rand.New(rand.NewPCG(seed, 1))
		var large, small []uintptr
		for i := range 3000 {
			p, err := l.h.Alloc(uintptr(256<<10 + r.IntN(1792<<10)))
			if err != nil {
				t.Fatal(err)
			}
			large = append(large, p)
			if len(large) > 20 {
				k := r.IntN(len(large))
				if err := l.h.Free(large[k]); err != nil {
					t.Fatal(err)
				}
				large[k] = large[len(large)-1]
				large = large[:len(large)-1]
			}
			if i%10 == 0 {
				p, err := hs[0].Alloc(uintptr(1 + r.IntN(16<<10)))
				if err != nil {
					t.Fatal(err)
				}
				small = append(small, p)
			}
		}
		for _, p := range large {
			if err := l.h.Free(p); err != nil {
				t.Fatal(err)
			}
		}
		hs[0].Trim()
		l.h.Trim()
		g.a.Trim()
		if c := g.Usage().Committed; c > 10<<20 {
			t.Errorf("seed %d: %d small buffers hold %d MiB once the large ones are gone; want at most 10", seed, len(small), c>>20)
		}
		for _, p := range small {
			if err := hs[0].Free(p); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestLendRefusesBadLenders: a lender the borrower cannot use (another group's heap, the
// borrower itself, a closed heap) lends nothing, and the page comes from the borrower's own
// runs; over memory that commits a host page at a time a lender is ignored.
func TestLendRefusesBadLenders(t *testing.T) {
	_, l, hs := newLendGroup(t, 1)
	_, other, _ := newLendGroup(t, 0)
	b := hs[0]
	closed, err := l.h.g.NewHeap(Options{Align: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		name string
		h    *Heap
	}{{"another group's heap", other.h}, {"the borrower itself", b}, {"a closed heap", closed}} {
		b.SetLender(&testLender{h: bad.h})
		p, err := b.Alloc(4 << 10)
		if err != nil {
			t.Fatalf("%s: %v", bad.name, err)
		}
		if pg, _, ok := b.g.find(p); !ok || b.lent(pg) != nil {
			t.Errorf("%s lent a page (found %v)", bad.name, ok)
		}
		if err := b.Free(p); err != nil {
			t.Fatal(err)
		}
		b.Trim()
	}
	fine := newTestHeap(t, 64<<20, Options{})
	fine.SetLender(l)
	if fine.lender != nil {
		t.Error("a heap over host pages took a lender")
	}
	verifyAll(t, b, l.h)
}

// TestLendReturnedStaleOwnerFree: the borrower's own stale free of a block of a page it gave
// back, found in the lender's tables before the lender takes it back, is a double free and
// leaves its page cache naming no dead page (remember must not cache it).
func TestLendReturnedStaleOwnerFree(t *testing.T) {
	_, l, hs := newLendGroup(t, 1)
	h := hs[0]
	p, err := h.Alloc(4 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	h.Trim() // the page goes on the returned list
	errs := []error{h.Free(p), h.FreeSized(p, 4<<10), h.FreeHeld(p, 4<<10)}
	tried := h.TryFree(p, 4<<10)
	_, held := h.TryHoldSized(p, 4<<10)
	l.mu.Unlock()
	for i, err := range errs {
		if err == nil {
			t.Errorf("stale free %d of a block of a returned page succeeded", i)
		}
	}
	if tried || held {
		t.Errorf("stale TryFree (%v) or TryHoldSized (%v) of a block of a returned page succeeded", tried, held)
	}
	for i, e := range h.near {
		if e.pg != nil && e.pg.dead {
			t.Errorf("page cache entry %d names a dead page %#x", i, e.pg.base)
		}
	}
	if err := h.verify(); err != nil {
		t.Error(err)
	}
}
