package heap

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

var long = flag.Bool("long", false, "run the property test for 10M operations")

// longRun reports whether the long form of the stress and property tests runs: PINMALLOC_LONG=1
// (CI's full run sets it) or -long, unless -short or the race detector is on. The default form
// takes the same paths over fewer steps, rounds and workers' operations, so that go test ./...
// stays fast.
func longRun() bool {
	return (*long || os.Getenv("PINMALLOC_LONG") != "") && !testing.Short() && !raceEnabled
}

// takeRandom removes a random block from live and checks that its contents survived.
func takeRandom(t testing.TB, r *rand.Rand, live *[]liveBlock, step int) liveBlock {
	t.Helper()
	i := r.IntN(len(*live))
	b := (*live)[i]
	(*live)[i] = (*live)[len(*live)-1]
	*live = (*live)[:len(*live)-1]
	if bad := fill(b, true); bad > 0 {
		t.Fatalf("step %d: block [%#x, +%d) has %d corrupted bytes", step, b.p, b.n, bad)
	}
	return b
}

func randSize(r *rand.Rand) uintptr {
	switch x := r.IntN(1000); {
	case x < 700:
		return uintptr(1 + r.IntN(1024))
	case x < 900:
		return uintptr(1024 + r.IntN(7*1024))
	case x < 980:
		return uintptr(8<<10 + r.IntN(300<<10))
	case x < 995:
		return uintptr(300<<10 + r.IntN(1700<<10))
	default:
		return uintptr(2<<20 + r.IntN(6<<20))
	}
}

// TestProperty runs long random sequences of Alloc, AllocAligned, Zalloc, TryAlloc, local frees,
// TryFree, frees through another heap of the group and lock-free group frees, and checks after
// every step that no two live blocks overlap, every block lies in the region and meets its
// alignment, zeroed blocks read as zero, and every block's contents survive until it is freed.
// Every 10,000 steps the heap's counters must agree with the model. TryAlloc and TryFree, where
// they do not refuse, must leave the arena as it was. 100,000 steps; 1,000,000 in the long form
// (longRun), 10,000,000 with -long; 20,000 under the race detector (one goroutine, no purge:
// the other runs cover the sequences).
func TestProperty(t *testing.T) {
	ops := 100_000
	switch {
	case *long:
		ops = 10_000_000
	case longRun():
		ops = 1_000_000
	case raceEnabled:
		ops = 20_000
	}
	property(t, arena.PageableHost(arena.HostOptions{}), ops)
}

// TestPropertyCoarse is TestProperty over memory that commits 2 MiB at a time (pack.go: huge
// objects share their last chunk, object pages fill whole segments, the fullest segment
// first), the way CUDA's VMM host memory does; hugetlb pages where the kernel has them,
// ordinary pages committed in 2 MiB granules where it has not.
func TestPropertyCoarse(t *testing.T) {
	ops := 10_000 // 500,000 in the long form (longRun), 2,000,000 with -long
	switch {
	case *long:
		ops = 2_000_000
	case longRun():
		ops = 500_000
	}
	property(t, arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB}), ops)
}

// property is TestProperty over memory of the provider prov, for ops steps.
func property(t *testing.T, prov arena.Provider, ops int) {
	const capacity = 256 << 20
	a, err := arena.New(arena.Options{Provider: prov, Capacity: capacity, RegionSize: capacity, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	g, _ := NewGroup(a)
	h, _ := g.NewHeap(Options{})
	other, _ := g.NewHeap(Options{})
	r := rand.New(rand.NewPCG(42, 1))
	var live []liveBlock
	var sh *shadow
	var inUse uintptr
	// Some 25 to 50 looks at idle pages and as many trims a run: each purges pages the steps
	// after it fill again (page faults: one in 2,000 steps made TestProperty a third slower).
	purgeEvery := min(ops/50, 10_000)
	for step := 0; step < ops; step++ {
		if len(live) < 64 || (len(live) < 3000 && r.IntN(100) < 52) {
			n := randSize(r)
			al := h.align
			var p uintptr
			var err error
			switch x := r.IntN(100); {
			case x < 5:
				al = uintptr(16) << r.IntN(17) // up to 1 MiB
				p, err = h.AllocAligned(n, al)
			case x < 10:
				p, err = h.Zalloc(n)
				if err == nil {
					for i, v := range mem.Bytes(p, n) {
						if v != 0 {
							t.Fatalf("step %d: Zalloc(%d) byte %d = %d", step, n, i, v)
						}
					}
				}
			case x < 35: // the non-blocking path, and Alloc where it refuses
				before := a.Usage()
				var ok bool
				if p, ok = h.TryAlloc(n); !ok {
					p, err = h.Alloc(n)
				} else if after := a.Usage(); after != before {
					t.Fatalf("step %d: TryAlloc(%d) changed the arena: %+v, then %+v", step, n, before, after)
				}
			default:
				p, err = h.Alloc(n)
			}
			if errors.Is(err, ErrOutOfMemory) {
				continue // a full arena is a legal outcome; the model is unchanged
			}
			if err != nil {
				t.Fatalf("step %d: alloc %d: %v", step, n, err)
			}
			if p%max(al, h.align) != 0 {
				t.Fatalf("step %d: %#x not aligned to %d", step, p, al)
			}
			if sh == nil {
				base, _ := a.ChunkBase(0)
				sh = newShadow(base, capacity)
			}
			sh.mark(t, p, n, true)
			b := liveBlock{p: p, n: n, seed: byte(step)}
			fill(b, false)
			live = append(live, b)
			inUse += n
			continue
		}
		b := takeRandom(t, r, &live, step)
		sh.mark(t, b.p, b.n, false)
		inUse -= b.n
		var err error
		switch x := r.IntN(12); {
		case x >= 10: // held (one of five ways): every other free refuses it
			if err = holdRefused(h, g, b, uintptr(r.IntN(int(b.n))), r.IntN(holdWays)); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			switch r.IntN(3) {
			case 0:
				if !h.TryFreeHeld(b.p, b.n) {
					err = h.FreeHeld(b.p, b.n)
				}
			case 1:
				err = g.FreeHeld(b.p, b.n)
			default: // the hold ended, then an ordinary free
				if err = g.Unhold(b.p, b.n); err == nil && g.Held(b.p) {
					err = fmt.Errorf("held after Unhold")
				}
				if err == nil {
					err = h.FreeSized(b.p, b.n)
				}
			}
		case x < 3: // the non-blocking path, and FreeSized where it refuses
			before := a.Usage()
			if !h.TryFree(b.p, b.n) {
				err = h.FreeSized(b.p, b.n)
			} else if after := a.Usage(); after != before {
				t.Fatalf("step %d: TryFree [%#x, +%d) changed the arena: %+v, then %+v", step, b.p, b.n, before, after)
			}
		case x < 6:
			err = h.FreeSized(b.p, b.n)
		case x < 8:
			err = other.Free(b.p) // another heap of the group: the remote path
		default:
			err = g.Free(b.p)
		}
		if err != nil {
			t.Fatalf("step %d: free [%#x, +%d): %v", step, b.p, b.n, err)
		}
		if r.IntN(50) == 0 { // and a double free must always be caught
			if err := g.Free(b.p); !errors.Is(err, ErrDoubleFree) {
				t.Fatalf("step %d: double free: %v", step, err)
			}
			if h.TryFree(b.p, b.n) {
				t.Fatalf("step %d: TryFree of a freed block [%#x, +%d) freed it", step, b.p, b.n)
			}
		}
		h.checkInvariants("a free") // every step, built with -tags invariants
		switch r.IntN(2 * purgeEvery) {
		case 0: // a look at idle pages, another after one that did nothing, and the purge: a
			// block handed out of decommitted memory faults at its fill
			h.PurgeIdle()
			h.PurgeIdle()
			a.Trim()
		case 1:
			h.Trim()
			a.Trim()
		}
		if step%10_000 == 0 {
			if st := h.Stats(); st.Live != uint64(len(live)) || st.InUse != uint64(inUse) {
				t.Fatalf("step %d: stats live %d inuse %d, model %d %d", step, st.Live, st.InUse, len(live), inUse)
			}
			if err := h.verify(); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
	}
	for _, b := range live {
		if err := h.Free(b.p); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.ChunksInUse != 0 {
		t.Fatalf("chunks still in use after closing every heap: %+v", st)
	}
}

// holdWays is how many ways holdRefused holds a block.
const holdWays = 5

// holdRefused holds block b one of holdWays ways (how): Hold through the address off bytes
// into it, HoldSized, FindFrom and BlockRef.Hold, the owner's TryHoldSized and its
// TryFindFrom and TryHoldRef (each falling back to the group's where it refuses). It checks
// that the hold reports the block, and that every free but FreeHeld refuses it, changing
// nothing.
func holdRefused(h *Heap, g *Group, b liveBlock, off uintptr, how int) error {
	var first, ok bool
	var err error
	switch how {
	case 0:
		var base, size uintptr
		base, size, first, err = g.Hold(b.p + off)
		if err != nil || base != b.p || size != b.n || !first {
			return fmt.Errorf("Hold(%#x + %d) = %#x, %d, %v, %v; want %#x, %d, true", b.p, off, base, size, first, err, b.p, b.n)
		}
	case 1:
		first, err = g.HoldSized(b.p, b.n)
	case 2:
		var r BlockRef
		if r, ok = g.FindFrom(b.p, b.n); !ok {
			return fmt.Errorf("FindFrom(%#x, %d) of a live block", b.p, b.n)
		}
		if first, ok = r.Hold(); !ok {
			err = fmt.Errorf("BlockRef.Hold of a live block")
		}
	case 3:
		if first, ok = h.TryHoldSized(b.p, b.n); !ok {
			first, err = g.HoldSized(b.p, b.n)
		}
	default:
		var r BlockRef
		if r, ok = h.TryFindFrom(b.p, b.n); ok {
			first, ok = h.TryHoldRef(r)
		}
		if !ok {
			if r, ok = g.FindFrom(b.p, b.n); !ok {
				return fmt.Errorf("FindFrom(%#x, %d) of a live block", b.p, b.n)
			}
			if first, ok = r.Hold(); !ok {
				err = fmt.Errorf("BlockRef.Hold of a live block")
			}
		}
	}
	if err != nil || !first {
		return fmt.Errorf("hold %d of [%#x, +%d): first %v, %v", how, b.p, b.n, first, err)
	}
	if !g.Held(b.p) {
		return fmt.Errorf("hold %d of [%#x, +%d): not Held", how, b.p, b.n)
	}
	if _, _, first, err := g.Hold(b.p); err != nil || first {
		return fmt.Errorf("Hold of a held block: first %v, %v", first, err)
	}
	if h.TryFree(b.p, b.n) {
		return fmt.Errorf("TryFree freed a held block [%#x, +%d)", b.p, b.n)
	}
	for _, err := range []error{h.FreeSized(b.p, b.n), h.Free(b.p), g.Free(b.p), g.FreeSized(b.p, b.n)} {
		if !errors.Is(err, ErrHeld) {
			return fmt.Errorf("free of a held block [%#x, +%d): %v, want ErrHeld", b.p, b.n, err)
		}
	}
	if sz, err := g.Size(b.p); sz != b.n || err != nil {
		return fmt.Errorf("Size of a held block: %d, %v", sz, err)
	}
	return nil
}

// TestRemoteFreeRace has every goroutine own a heap, allocate, stamp each block and hand it to
// a goroutine that does not own it; that goroutine checks the stamp (a block handed out twice
// would carry the wrong one) and frees it without a lock. Owners keep allocating, so collection
// races with the frees. At the end every heap must close with no block live.
func TestRemoteFreeRace(t *testing.T) {
	const workers = 8
	perWorker := 3_000
	if longRun() {
		perWorker = 20_000
	}
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	g, _ := NewGroup(a)
	type msg struct {
		p, n  uintptr
		stamp byte
	}
	chans := make([]chan msg, workers)
	for i := range chans {
		chans[i] = make(chan msg, 256)
	}
	var wg, freers sync.WaitGroup
	for w := range workers {
		freers.Add(1)
		go func() {
			defer freers.Done()
			for m := range chans[w] {
				if b := mem.Bytes(m.p, m.n); b[0] != m.stamp || b[m.n-1] != m.stamp {
					t.Errorf("block %#x: stamp %d/%d, want %d", m.p, b[0], b[m.n-1], m.stamp)
				}
				if err := g.FreeSized(m.p, m.n); err != nil {
					t.Errorf("remote free %#x: %v", m.p, err)
				}
			}
		}()
	}
	heaps := make([]*Heap, workers)
	for w := range workers {
		heaps[w], _ = g.NewHeap(Options{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := heaps[w]
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for i := range perWorker {
				n := uintptr(1 + r.IntN(16<<10))
				if i%500 == 0 {
					n = uintptr(300<<10 + r.IntN(3<<20)) // object and huge pages too
				}
				p, err := h.Alloc(n)
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				b := mem.Bytes(p, n)
				b[0], b[n-1] = byte(i), byte(i)
				chans[(w+1+r.IntN(workers-1))%workers] <- msg{p, n, byte(i)}
			}
		}()
	}
	wg.Wait()
	for _, c := range chans {
		close(c)
	}
	freers.Wait()
	for w, h := range heaps {
		if err := h.Close(); err != nil {
			t.Fatalf("heap %d: %v", w, err)
		}
	}
}

// TestRacingDoubleFree frees every block of a batch from four goroutines at once: exactly one
// free of each block succeeds and the other three report ErrDoubleFree. No allocation runs
// during a round, so no address is reused between the racing frees.
func TestRacingDoubleFree(t *testing.T) {
	h := newTestHeap(t, 256<<20, Options{})
	rounds := 4
	if longRun() {
		rounds = 20
	}
	r := rand.New(rand.NewPCG(7, 7))
	for round := range rounds {
		ps := make([]uintptr, 2000)
		for i := range ps {
			n := uintptr(1 + r.IntN(8<<10))
			if i%100 == 0 {
				n = uintptr(300<<10 + r.IntN(3<<20))
			}
			var err error
			if ps[i], err = h.Alloc(n); err != nil {
				t.Fatal(err)
			}
		}
		wins := make([]atomic.Int32, len(ps))
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range ps {
					i := (k*(w+1) + w*331) % len(ps)
					err := h.g.Free(ps[i])
					switch {
					case err == nil:
						wins[i].Add(1)
					case !errors.Is(err, ErrDoubleFree):
						t.Errorf("free %#x: %v", ps[i], err)
					}
				}
			}()
		}
		wg.Wait()
		for i := range wins {
			if got := wins[i].Load(); got != 1 {
				t.Fatalf("round %d: block %#x freed %d times", round, ps[i], got)
			}
		}
		h.Collect()
		if st := h.Stats(); st.Live != 0 {
			t.Fatalf("round %d: %d blocks live after freeing all", round, st.Live)
		}
	}
}

// FuzzHeap turns its input into a sequence of operations and checks the same properties as
// TestProperty, plus error answers for bad frees.
func FuzzHeap(f *testing.F) {
	f.Add([]byte{0, 10, 1, 0, 2, 200, 3, 1, 0, 255, 255})
	f.Add([]byte{4, 1, 5, 9, 0, 0, 0, 0, 1, 1, 1, 1})
	f.Add([]byte{0, 40, 0, 40, 0, 40, 0, 40, 2, 1, 6, 1, 0, 40, 2, 0, 6, 0, 0, 40, 0, 40, 0, 40})
	f.Add([]byte{0, 140, 0, 130, 0, 40, 0, 150, 2, 1, 0, 90, 2, 0, 6, 0, 0, 128, 0, 129, 5, 0, 2, 2, 0, 135, 7})
	f.Fuzz(func(t *testing.T, prog []byte) {
		prov := arena.PageableHost(arena.HostOptions{})
		if len(prog)%2 == 1 { // memory that commits 2 MiB at a time (pack.go)
			prov = arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB})
		}
		h := newTestHeapOn(t, arena.Options{Provider: prov, Capacity: 64 << 20, RegionSize: 64 << 20}, Options{})
		var live []liveBlock
		var sh *shadow
		for i := 0; i+1 < len(prog); i += 2 {
			op, arg := prog[i]%7, uintptr(prog[i+1])
			switch op {
			case 0, 1: // alloc: arg picks a size on a log scale up to 4 MiB
				n := 1 + (arg*arg*arg)%(4<<20)
				p, err := h.Alloc(n)
				if err != nil {
					if errors.Is(err, ErrOutOfMemory) {
						continue
					}
					t.Fatal(err)
				}
				if sh == nil {
					base, _ := h.a.ChunkBase(0)
					sh = newShadow(base, 64<<20)
				}
				sh.mark(t, p, n, true)
				b := liveBlock{p, n, byte(i)}
				fill(b, false)
				live = append(live, b)
			case 2, 3: // free
				if len(live) == 0 {
					continue
				}
				k := int(arg) % len(live)
				b := live[k]
				live = append(live[:k], live[k+1:]...)
				if fill(b, true) > 0 {
					t.Fatalf("block %#x corrupted", b.p)
				}
				sh.mark(t, b.p, b.n, false)
				if err := h.FreeSized(b.p, b.n); err != nil {
					t.Fatal(err)
				}
				if err := h.Free(b.p); !errors.Is(err, ErrDoubleFree) {
					t.Fatalf("double free: %v", err)
				}
			case 4: // interior pointer of a live block
				if len(live) == 0 {
					continue
				}
				b := live[int(arg)%len(live)]
				if off := 1 + arg%b.n; off < b.n {
					if err := h.Free(b.p + off); err == nil {
						t.Fatalf("interior free %#x+%d succeeded", b.p, off)
					}
				}
			case 5:
				h.Collect()
			case 6: // purge: idle pages at the second look (arg odd), or everything
				if arg%2 == 1 {
					h.PurgeIdle()
					h.PurgeIdle()
				} else {
					h.Trim()
				}
				h.a.Trim() // decommitted: a block handed out of it faults at its fill
			}
			h.checkInvariants("an operation") // built with -tags invariants
		}
		if err := h.verify(); err != nil {
			t.Fatal(err)
		}
		for _, b := range live {
			if err := h.Free(b.p); err != nil {
				t.Fatal(fmt.Errorf("final free: %w", err))
			}
		}
	})
}

// TestOwnerAllocsWhileRemoteFrees has one owner allocate as fast as it can while one other
// goroutine frees everything it allocated: collection runs constantly against remote frees. (It
// caught a page released twice through a stale pending-stack entry.)
func TestOwnerAllocsWhileRemoteFrees(t *testing.T) {
	h := newTestHeap(t, 1<<30, Options{})
	rounds := 4_000
	if longRun() {
		rounds = 40_000
	}
	ch := make(chan []uintptr, 16)
	done := make(chan error)
	go func() {
		var first error
		for batch := range ch {
			for _, p := range batch {
				if err := h.g.Free(p); err != nil && first == nil {
					first = err
				}
			}
		}
		done <- first
	}()
	for i := range rounds {
		batch := make([]uintptr, 64)
		for j := range batch {
			var err error
			if batch[j], err = h.Alloc(uintptr(16 + (i*64+j)*37%8000)); err != nil {
				t.Fatal(err)
			}
		}
		ch <- batch
	}
	close(ch)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := h.Stats(); st.Live != 0 {
		t.Fatalf("%d blocks live after every free", st.Live)
	}
}
