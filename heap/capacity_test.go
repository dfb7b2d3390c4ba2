package heap

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
)

// TestPropertyCapacity is the property test at the arena's capacity: an arena of a few chunks,
// so that most steps find it full, at every point of a request (a new segment, run or huge
// object; the heap's own trim and second try), over fine and coarse memory, with
// RetainSegments, and with a borrower whose lender is held now and then and allocates and
// trims too. A full arena must be ErrOutOfMemory (or ErrTooLarge) and change nothing: no two
// live blocks overlap, every block's contents survive, the invariants hold after every step
// (built with -tags invariants), the counts agree with the model, and once everything is freed
// the heaps close and every chunk is back. 2 seeds of 4,000 steps a case; 6 of 20,000 in the
// long form (longRun); one seed of 2,000 under the race detector (one goroutine's sequences:
// the non-race runs take them at full length).
func TestPropertyCapacity(t *testing.T) {
	seeds, steps := uint64(2), 4_000
	switch {
	case longRun():
		seeds, steps = 6, 20_000
	case raceEnabled:
		seeds, steps = 1, 2_000
	}
	fine := func() arena.Provider { return arena.PageableHost(arena.HostOptions{}) }
	coarse := func() arena.Provider {
		return arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB})
	}
	for _, c := range []capacityCase{
		{"fine", fine, RetainSpare, 8 << 20, false},
		{"fine held", fine, RetainSegments, 8 << 20, false},
		{"coarse", coarse, RetainSpare, 16 << 20, false},
		{"coarse held", coarse, RetainSegments, 16 << 20, false},
		{"coarse lent", coarse, RetainSpare, 16 << 20, true},
	} {
		for seed := range seeds {
			t.Run(fmt.Sprint(c.name, " ", seed), func(t *testing.T) { capacityRun(t, c, seed, steps) })
		}
	}
}

// capacityCase is a case of TestPropertyCapacity: the arena's provider and capacity, the
// heap's retention, and whether it borrows room from the group's other heap.
type capacityCase struct {
	name      string
	prov      func() arena.Provider
	retention Retention
	capacity  uintptr
	lend      bool
}

// capacityRun runs one case of TestPropertyCapacity for steps steps.
func capacityRun(t *testing.T, c capacityCase, seed uint64, steps int) {
	a, err := arena.New(arena.Options{Provider: c.prov(), Capacity: c.capacity, RegionSize: c.capacity,
		PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	g, _ := NewGroup(a)
	h, _ := g.NewHeap(Options{Retention: c.retention})
	other, _ := g.NewHeap(Options{}) // frees h's blocks; h's lender where c.lend
	var l *testLender
	if c.lend {
		l = &testLender{h: other}
		h.SetLender(l)
	}
	r := rand.New(rand.NewPCG(seed, 7))
	var live []liveBlock
	var sh *shadow
	took := func(p, n uintptr, step int) {
		if sh == nil {
			base, _ := a.ChunkBase(0)
			sh = newShadow(base, c.capacity)
		}
		sh.mark(t, p, n, true)
		b := liveBlock{p: p, n: n, seed: byte(step)}
		fill(b, false)
		live = append(live, b)
	}
	full := 0
	held := false // the lender's owner is away
	for step := range steps {
		if l != nil && r.IntN(20) == 0 {
			if held {
				l.mu.Unlock()
			} else {
				l.mu.Lock()
			}
			held = !held
		}
		if l != nil && !held && r.IntN(10) == 0 { // the lender's owner at work
			l.mu.Lock()
			n := uintptr(1 + r.IntN(600<<10))
			if p, err := other.Alloc(n); err == nil {
				took(p, n, step)
			} else if !errors.Is(err, ErrOutOfMemory) {
				t.Fatalf("step %d: the lender's alloc %d: %v", step, n, err)
			}
			if r.IntN(5) == 0 {
				other.Trim()
			}
			l.mu.Unlock()
		}
		if len(live) == 0 || r.IntN(100) < 55 {
			n := capacitySize(r, c.capacity)
			var p uintptr
			var err error
			al := h.align
			switch r.IntN(10) {
			case 0:
				al = uintptr(16) << r.IntN(22) // up to 32 MiB
				p, err = h.AllocAligned(n, al)
			case 1:
				p, err = h.Zalloc(n)
			case 2:
				var ok bool
				if p, ok = h.TryAlloc(n); !ok {
					p, err = h.Alloc(n)
				}
			default:
				p, err = h.Alloc(n)
			}
			switch {
			case errors.Is(err, ErrOutOfMemory) || errors.Is(err, ErrTooLarge):
				full++
			case err != nil:
				t.Fatalf("step %d: alloc %d aligned to %d: %v", step, n, al, err)
			case p%al != 0:
				t.Fatalf("step %d: alloc %d aligned to %d: %#x", step, n, al, p)
			default:
				took(p, n, step)
			}
		} else {
			b := takeRandom(t, r, &live, step)
			sh.mark(t, b.p, b.n, false)
			var err error
			switch r.IntN(4) {
			case 0:
				err = g.Free(b.p)
			case 1:
				if !h.TryFree(b.p, b.n) {
					err = h.FreeSized(b.p, b.n)
				}
			default:
				err = h.Free(b.p)
			}
			if err != nil {
				t.Fatalf("step %d: free [%#x, +%d): %v", step, b.p, b.n, err)
			}
		}
		switch r.IntN(200) {
		case 0:
			h.Trim()
		case 1, 2:
			h.Collect()
		}
		h.checkInvariants("a step") // every step, built with -tags invariants
		if step%1000 == 0 && !held {
			if err := h.verify(); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			if err := other.verify(); err != nil {
				t.Fatalf("step %d: the other heap: %v", step, err)
			}
			if st, so := h.Stats(), other.Stats(); st.Live+so.Live != uint64(len(live)) {
				t.Fatalf("step %d: %d + %d blocks live, the model has %d", step, st.Live, so.Live, len(live))
			}
		}
	}
	if held {
		l.mu.Unlock()
	}
	if full == 0 {
		t.Errorf("the arena was never full")
	}
	for _, b := range live {
		if err := h.Free(b.p); err != nil {
			t.Fatal(err)
		}
	}
	other.Collect() // the lender's blocks h freed: its Close collects too, but h closes first
	for _, x := range []*Heap{h, other} {
		if err := x.verify(); err != nil {
			t.Fatal(err)
		}
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st.ChunksInUse != 0 {
		t.Fatalf("chunks still in use after closing every heap: %+v", st)
	}
}

// capacitySize is a request size of TestPropertyCapacity: most fit a class or an object page,
// a few are huge, up to the arena's capacity.
func capacitySize(r *rand.Rand, capacity uintptr) uintptr {
	switch x := r.IntN(100); {
	case x < 60:
		return uintptr(1 + r.IntN(8<<10))
	case x < 85:
		return uintptr(8<<10 + r.IntN(300<<10))
	case x < 95:
		return uintptr(300<<10 + r.IntN(1700<<10))
	}
	return uintptr(2<<20 + r.IntN(int(capacity)))
}
