package pinned

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// coarseOptions are those of a pool whose memory commits 2 MiB at a time, as CUDAHost's VMM
// host memory does, on any machine: huge pages (the arena's granule is then 2 MiB).
func coarseOptions() Options {
	return Options{Backend: Pageable, HugePages: arena.HugeTLB, Capacity: 1 << 30, PurgeDelay: -1, Shards: 2}
}

// TestBigShardTakesObjectPages checks that, where memory is coarse, every request above the
// medium classes comes from the big shard whichever P the goroutine runs on, class requests
// from the other shards, and that a large request never waits for the big shard: while it is
// held, the request goes to another shard. A pool over host pages has no big shard.
func TestBigShardTakesObjectPages(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	p := newTestPool(t, coarseOptions())
	if !p.g.Coarse() || p.big.min != 64<<10+1 {
		t.Fatalf("a pool on huge pages: coarse %v, big shard from %d bytes; want from %d", p.g.Coarse(), p.big.min, 64<<10+1)
	}
	var bufs [][]byte
	for g := range 8 { // one goroutine at a time, on whichever P: the big shard is free
		done := make(chan struct{})
		go func() {
			defer close(done)
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 50 {
				b, err := p.Alloc(int(math.Round(4096 * math.Pow(1024, r.Float64())))) // 4 KiB - 4 MiB
				if err != nil {
					t.Error(err)
					return
				}
				bufs = append(bufs, b)
				runtime.Gosched()
			}
		}()
		<-done
	}
	big := p.big.s.Load()
	for _, b := range bufs {
		if h := owner(t, p, b); (h == big.h) != (uintptr(len(b)) >= p.big.min) {
			t.Errorf("a buffer of %d bytes is in heap %d (the big shard's: %v)", len(b), h.Index(), h == big.h)
		}
	}
	p.hold([]*shard{big}) // another goroutine's large allocation, say
	b, err := p.Alloc(1 << 20)
	letGo(big)
	if err != nil {
		t.Fatal(err)
	}
	if owner(t, p, b) == big.h {
		t.Error("a large allocation took the big shard while it was held")
	}
	for _, b := range append(bufs, b) {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if q := newTestPool(t, Options{Backend: Pageable}); q.big.min != 0 {
		t.Errorf("a pool on host pages sends requests from %d bytes to a big shard", q.big.min)
	}
}

// owner returns the heap of p's buffer b.
func owner(t *testing.T, p *Pool, b []byte) *heap.Heap {
	t.Helper()
	h, err := p.g.Owner(mem.Addr(b))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestBigShardSharesChunks is the footprint the big shard is for: a buffer allocated while
// the goroutine's home shard is held (as on another P) goes in the chunk another shard's
// buffer left room in, not in a chunk of its own. Before the big shard the second buffer took
// a spill shard and a second 2 MiB chunk.
func TestBigShardSharesChunks(t *testing.T) {
	p := newTestPool(t, coarseOptions())
	a, err := p.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	var homes []*shard // every shard but the big one
	for _, s := range *p.shards.Load() {
		if s != p.big.s.Load() {
			homes = append(homes, s)
		}
	}
	p.hold(homes)
	b, err := p.Alloc(512 << 10)
	for _, s := range homes {
		letGo(s)
	}
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Stats().Committed; c != 2<<20 {
		t.Errorf("a 1 MiB and a 512 KiB buffer commit %d MiB; want one 2 MiB chunk", c>>20)
	}
	for _, b := range [][]byte{a, b} {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBigShardBackoff: a P that found the big shard held sends its next bigBackoff requests of
// its sizes to its home shard, then tries the big shard again, so that Ps whose large
// requests collide spread over their home shards instead of passing the big shard's mutex
// between their CPUs.
func TestBigShardBackoff(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p := newTestPool(t, coarseOptions())
	var bufs [][]byte
	alloc := func() *heap.Heap {
		b, err := p.Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
		return owner(t, p, b)
	}
	alloc() // makes the big shard
	big := p.big.s.Load()
	p.hold([]*shard{big})
	if alloc() == big.h {
		t.Fatal("a request took the big shard while it was held")
	}
	letGo(big)
	for i := 1; i < bigBackoff; i++ {
		if alloc() == big.h {
			t.Fatalf("request %d after the one that found the big shard held took it; want the home shard for %d more", i, bigBackoff-1)
		}
	}
	if alloc() != big.h {
		t.Errorf("request %d after the one that found the big shard held did not take it", bigBackoff)
	}
	for _, b := range bufs {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBigShardMadeWhole: the big shard is whole when other goroutines can see it. A goroutine
// walks every shard, taking each it can without waiting (tryOwn, as freeLarge does; the
// purger's opsOf takes them so under -race), while the first large request makes the big
// shard. newShard set the big shard's slot and big fields after it had published the shard
// in the pool's list: a data race, which CI's -race run met (the purger's tryLock read big).
func TestBigShardMadeWhole(t *testing.T) {
	p := newTestPool(t, coarseOptions())
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, s := range *p.shards.Load() {
				if p.tryOwn(s) {
					letGo(s)
				}
			}
			runtime.Gosched()
		}
	}()
	time.Sleep(time.Millisecond)
	b, err := p.Alloc(1 << 20) // makes the big shard
	time.Sleep(time.Millisecond)
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if s := p.big.s.Load(); s == nil || s.big != &p.big || s.slot != slotSpill {
		t.Fatalf("the big shard: %+v", s)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
}
