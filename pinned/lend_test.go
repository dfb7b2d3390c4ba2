package pinned

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestBigShardLendsClassPages: where memory is coarse, the class pages of the other shards go
// in the big shard's chunks (heap.RoomLender), so that the small buffers of two shards and a large
// one commit one chunk, where each shard took a chunk of its own before (three); the buffers
// stay their shard's; a held big shard sends the page to the shard's own chunk without
// waiting; and Trim and Close give every chunk back.
func TestBigShardLendsClassPages(t *testing.T) {
	p := newTestPool(t, coarseOptions())
	large, err := p.Alloc(1 << 20) // makes the big shard
	if err != nil {
		t.Fatal(err)
	}
	big := p.big.s.Load()
	chunk := func(b []byte) uintptr { return mem.Addr(b) &^ (2<<20 - 1) }
	var small [][]byte
	alloc := func(n int) []byte {
		b, err := p.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		small = append(small, b)
		return b
	}
	for _, n := range []int{100, 4 << 10, 48 << 10} {
		alloc(n)
	}
	other, err := p.newShard(slotSpill) // another shard, held, as another P's home would be
	if err != nil || other == nil {
		t.Fatalf("a second shard: %v", err)
	}
	for _, n := range []int{100, 4 << 10, 48 << 10} {
		addr, err := other.h.Alloc(uintptr(n))
		if err != nil {
			t.Fatal(err)
		}
		small = append(small, mem.Bytes(addr, uintptr(n)))
	}
	letGo(other)
	heaps := map[int]bool{}
	for _, b := range small {
		h := owner(t, p, b)
		heaps[h.Index()] = true
		if chunk(b) != chunk(large) {
			t.Errorf("a buffer of %d bytes (heap %d) is in chunk %#x, not the large buffer's %#x", len(b), h.Index(), chunk(b), chunk(large))
		}
	}
	if heaps[big.h.Index()] || len(heaps) < 2 {
		t.Errorf("the small buffers are in %d shards, the big shard %v; want two others", len(heaps), heaps[big.h.Index()])
	}
	if c := p.Stats().Committed; c != 2<<20 {
		t.Errorf("a large buffer and two shards' small ones commit %d MiB; want one 2 MiB chunk", c>>20)
	}
	p.hold([]*shard{big}) // another goroutine's large allocation, say
	b := alloc(16 << 10)
	letGo(big)
	if chunk(b) == chunk(large) {
		t.Error("a class page took the big shard's chunk while it was held")
	}
	for _, b := range append(small, large) {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Trim(); err != nil {
		t.Fatal(err)
	}
	if c := p.Stats().Committed; c != 0 {
		t.Errorf("nothing live, after Trim: %d bytes committed", c)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestBigShardLendsRace: goroutines on their own Ps allocate, check and free buffers of every
// kind in a coarse pool, Trim and Stats in between, so that class pages are borrowed from the
// big shard and given back while its owner works (run with -race); every byte is checked,
// and Close gives every chunk back. 3,000 steps a goroutine, 600 with -short, 1,000 under the
// race detector (the four goroutines still lend and borrow pages beside each other's Trim and
// Stats; each step's fill and check of up to 2 MiB, a goroutine's own, is what the detector
// paid for).
func TestBigShardLendsRace(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	o := coarseOptions()
	o.Shards = 4
	p := newTestPool(t, o)
	steps := 3000
	switch {
	case testing.Short():
		steps = 600
	case raceEnabled:
		steps = 1000
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 3))
			var live [][]byte
			free := func(i int) bool {
				b := live[i]
				for j, c := range b {
					if c != byte(len(b)+g) {
						t.Errorf("goroutine %d: buffer of %d bytes, byte %d is %#x", g, len(b), j, c)
						return false
					}
				}
				if err := p.Free(b); err != nil {
					t.Error(err)
					return false
				}
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
				return true
			}
			for step := range steps {
				switch k := r.IntN(100); {
				case k == 0 && g == 0:
					if err := p.Trim(); err != nil {
						t.Error(err)
						return
					}
				case k == 1 && g == 1:
					_ = p.Stats()
				case k < 50 && len(live) > 0:
					if !free(r.IntN(len(live))) {
						return
					}
				default:
					n := int(math.Round(16 * math.Pow(1<<17, r.Float64()))) // 16 B - 2 MiB
					b, err := p.Alloc(n)
					if err != nil {
						t.Error(err)
						return
					}
					for j := range b {
						b[j] = byte(n + g)
					}
					live = append(live, b)
				}
				if step%64 == 0 {
					runtime.Gosched()
				}
			}
			for len(live) > 0 && free(len(live)-1) {
			}
		}()
	}
	wg.Wait()
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestBigShardLendsCloseLate: a pool closed while a small buffer in a page borrowed from the
// big shard is live releases all its memory at the buffer's free (the arena refuses to close
// while a chunk is out, so a page not given back would keep the pool's memory for good).
func TestBigShardLendsCloseLate(t *testing.T) {
	p := newTestPool(t, coarseOptions())
	large, err := p.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	small, err := p.Alloc(4 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); !errors.Is(err, ErrLiveBlocks) {
		t.Fatalf("Close with two buffers live: %v; want ErrLiveBlocks", err)
	}
	if err := p.Free(large); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(small); err != nil {
		t.Fatal(err)
	}
	if !p.released.Load() {
		t.Error("the last free after Close did not release the pool's memory")
	}
}

// TestCloseLenderLast: the pool closes the big shard's heap after every other, though it was
// made before some: it lends them room, and room given back to a closed lender through its
// returned list stayed out, so that the arena refused to close and the pool's memory stayed
// after the last free (TestCloseRacingAlloc's coarse rounds under -race met it, 1 run in 5).
func TestCloseLenderLast(t *testing.T) {
	p := newTestPool(t, coarseOptions())
	large, err := p.Alloc(1 << 20) // makes the big shard, after the home shard New made
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := p.newShard(slotSpill); s != nil { // made after the big shard
		letGo(s)
	}
	small, err := p.Alloc(4 << 10)
	if err != nil {
		t.Fatal(err)
	}
	ss := p.closing()
	big := p.big.s.Load()
	if len(ss) < 3 || ss[len(ss)-1] != big || slices.Index(ss, big) != len(ss)-1 {
		t.Fatalf("closing order %v, the big shard %p: want it last, once, after at least two others", ss, big)
	}
	if i := slices.Index(*p.shards.Load(), big); i == len(ss)-1 {
		t.Fatal("the big shard was made last: the test shows nothing")
	}
	for _, b := range [][]byte{large, small} {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Reserved != 0 || st.Committed != 0 {
		t.Errorf("after Close: %d bytes reserved, %d committed; want none", st.Reserved, st.Committed)
	}
}
