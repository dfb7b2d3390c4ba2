package pinned

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
)

// TestCloseRacingAlloc runs Close against goroutines that allocate and free: Close either
// succeeds or reports live buffers, every refused Alloc says ErrClosed, every buffer allocated
// before Close can be freed, and once the last is freed the pool holds no memory. It once
// leaked 64 MiB silently (a shard added after Close counted the shards), refused live frees
// with "pool closed", and returned the heap's and the arena's own errors. Every other round
// runs on coarse memory, where buffers above 64 KiB go to the big shard and its biased fast
// sections.
func TestCloseRacingAlloc(t *testing.T) {
	rounds := 20
	if longRun() {
		rounds = 50
	}
	for round := range rounds {
		o := Options{Capacity: 256 << 20, Backend: Pageable, Shards: 8}
		if round%2 == 1 {
			o.HugePages = arena.HugeTLB
		}
		p, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 * biasAfter { // coarse: the P's large pairs earn the big shard's bias
			if b, err := p.Alloc(128 << 10); err != nil || p.Free(b) != nil {
				t.Fatal(err)
			}
		}
		var wg, ready sync.WaitGroup
		var unready atomic.Int32 // workers not yet counted ready
		unready.Store(4)
		start := make(chan struct{})
		errs := make(chan error, 16)
		for w := range 4 {
			wg.Add(1)
			ready.Add(1)
			go func() {
				defer wg.Done()
				<-start
				var held [][]byte
				defer func() {
					for _, b := range held {
						if err := p.Free(b); err != nil {
							errs <- err
							return
						}
					}
				}()
				for i := 0; ; i++ {
					if i == 1+round%8 { // Close comes while all four are busy
						unready.Add(-1)
						ready.Done()
					}
					if unready.Load() > 0 {
						// Let the others get there: on 2 CPUs a worker not yet ready waited for
						// the preemption of those spinning, most of the test's CPU.
						runtime.Gosched()
					}
					n := 64 << ((w + i) % 12) // 64 B to 128 KiB
					if i%50 == 7 {
						n = 3 << 20 // a huge object now and then
					}
					b, err := p.Alloc(n)
					if err != nil {
						if !errors.Is(err, ErrClosed) {
							errs <- err
						}
						if i < 1+round%8 { // not yet counted ready above
							unready.Add(-1)
							ready.Done()
						}
						return
					}
					if i%3 == 0 && len(held) < 8 {
						held = append(held, b) // freed after Close
						continue
					}
					if err := p.Free(b); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		close(start)
		ready.Wait()
		cerr := p.Close()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		if cerr != nil && !errors.Is(cerr, ErrLiveBlocks) {
			t.Fatalf("round %d: Close: %v", round, cerr)
		}
		if st := p.Stats(); st.Reserved != 0 || st.Committed != 0 || st.Live != 0 {
			t.Fatalf("round %d: Close returned %v and every buffer is freed, but the pool holds %+v", round, cerr, st)
		}
		if _, err := p.Alloc(64); !errors.Is(err, ErrClosed) {
			t.Fatalf("round %d: Alloc after Close: %v", round, err)
		}
		if err := p.Close(); !errors.Is(err, ErrClosed) {
			t.Fatalf("round %d: second Close: %v", round, err)
		}
	}
}

// TestCloseWhileShardGrows stops an Alloc that has found every shard busy just before it adds a
// shard, and closes the pool meanwhile: the Alloc must fail with ErrClosed (it once made a
// shard Close never saw, and allocated from a closed arena: "arena: closed").
func TestCloseWhileShardGrows(t *testing.T) {
	p, err := New(Options{Capacity: 64 << 20, Backend: Pageable, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	s := (*p.shards.Load())[0]
	p.hold([]*shard{s}) // the only shard is busy: the Alloc below goes to add one
	p.growMu.Lock()     // ... and waits here
	type result struct {
		b   []byte
		err error
	}
	allocated := make(chan result, 1)
	go func() {
		b, err := p.Alloc(100)
		allocated <- result{b, err}
	}()
	time.Sleep(50 * time.Millisecond) // the Alloc is past its first look at closed
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	time.Sleep(50 * time.Millisecond)
	letGo(s)
	var cerr error
	done := false
	select {
	case cerr = <-closed:
		done = true
	case <-time.After(200 * time.Millisecond): // Close may wait for the shard being added
	}
	p.growMu.Unlock()
	r := <-allocated
	if !done {
		cerr = <-closed
	}
	if r.err != nil && !errors.Is(r.err, ErrClosed) {
		t.Fatalf("Alloc racing Close: %v", r.err)
	}
	if cerr != nil && !errors.Is(cerr, ErrLiveBlocks) {
		t.Fatalf("Close: %v", cerr)
	}
	if r.err == nil {
		if err := p.Free(r.b); err != nil {
			t.Fatalf("Free of a buffer allocated before Close: %v", err)
		}
	}
	if st := p.Stats(); st.Reserved != 0 || st.Live != 0 {
		t.Fatalf("pool holds %+v after Close and the last Free", st)
	}
}
