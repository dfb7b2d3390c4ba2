package pinned_test

import (
	"errors"
	"runtime"
	"sync"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Stream-ordered reuse in a pool made with one P whose goroutines then run on four (GOMAXPROCS
// raised after New): the Ps without a home slot allocate from spill shards and free by the
// remote paths, with no fast section and no FreeAsync cache, and their frees must still wait
// for the streams.

// growProcs makes a CUDAHost pool on the fake with GOMAXPROCS 1, then raises GOMAXPROCS to 4
// at least; nil without the fake. The cleanup puts GOMAXPROCS back.
func growProcs(t *testing.T, o pinned.Options) *asyncRig {
	procs := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(procs) })
	r := newAsyncRig(t, o)
	runtime.GOMAXPROCS(max(4, procs))
	return r
}

// copiesAfterGrow runs 6 goroutines that each fill buffers, queue an HtoDAsync of each, free it
// (Free and FreeAsync in turn) and write another pattern into the buffers they allocate next,
// while the fake holds the copies; then it runs the copies and checks that each sent its own
// buffer's bytes.
func copiesAfterGrow(t *testing.T, o pinned.Options) {
	o.Capacity = 256 << 20
	r := growProcs(t, o)
	if r == nil {
		return
	}
	s := pubcuda.Stream(r.s)
	const workers, per = 6, 40
	sizes := []int{512, 4096, 16 << 10, 70 << 10, 200 << 10}
	type copied struct {
		d cuda.DevicePtr
		n int
		v byte
	}
	var mu sync.Mutex
	var all []copied
	devs := make([][]cuda.DevicePtr, workers)
	for w := range devs {
		for i := range per {
			devs[w] = append(devs[w], r.devAlloc(sizes[(i+w)%len(sizes)]))
		}
	}
	r.f.Hold(true)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				n, v := sizes[(i+w)%len(sizes)], byte(w*per+i+1)
				b, err := r.pool.Alloc(n)
				if err != nil {
					t.Error(err)
					return
				}
				for k := range b {
					b[k] = v
				}
				if err := r.heap.HtoDAsync(pubcuda.DevicePtr(devs[w][i]), b, s); err != nil {
					t.Error(err)
					return
				}
				if i%2 == 0 {
					err = r.pool.Free(b)
				} else {
					err = r.pool.FreeAsync(b, s)
				}
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				all = append(all, copied{devs[w][i], n, v})
				mu.Unlock()
				for range 3 { // what a reuse would overwrite before the copy runs
					c, err := r.pool.Alloc(n)
					if err != nil {
						t.Error(err)
						return
					}
					for k := range c {
						c[k] = 0xee
					}
					if err := r.pool.Free(c); err != nil {
						t.Error(err)
					}
				}
				if i%10 == 0 {
					if err := r.pool.Trim(); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d shards", r.pool.Stats().Shards) // its home shard and one spill shard
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	for _, c := range all {
		got := r.read(c.d, c.n)
		for k := range got {
			if got[k] != c.v {
				t.Fatalf("a copy of %d bytes sent %#x at byte %d, want %#x: its buffer was "+
					"handed out again before the stream passed its free", c.n, got[k], k, c.v)
			}
		}
	}
	for w := range devs {
		for _, d := range devs[w] {
			ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
		}
	}
	r.finish()
}

func TestFakeCopiesAfterGrowProcs(t *testing.T) { copiesAfterGrow(t, pinned.Options{}) }

func TestFakeCopiesAfterGrowProcsGuarded(t *testing.T) {
	copiesAfterGrow(t, pinned.Options{ZeroOnFree: true, Quota: 200 << 20})
}

// TestFakeCloseAfterGrowProcs closes the pool while 6 goroutines on four Ps allocate, record
// and free (Free, RecordStream then Free, FreeAsync): their frees after Close succeed, and the
// memory is released once the stream has passed the last of them.
func TestFakeCloseAfterGrowProcs(t *testing.T) {
	r := growProcs(t, pinned.Options{Capacity: 256 << 20, ZeroOnFree: true, Quota: 100 << 20})
	if r == nil {
		return
	}
	s := pubcuda.Stream(r.s)
	sizes := []int{512, 4096, 16 << 10, 70 << 10, 200 << 10}
	var wg sync.WaitGroup
	started := make(chan struct{})
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var live [][]byte
			for i := range 400 {
				b, err := r.pool.Alloc(sizes[(i+w)%len(sizes)])
				if errors.Is(err, pinned.ErrClosed) {
					break
				}
				if err != nil {
					t.Error(err)
					break
				}
				if live = append(live, b); i == 20 && w == 0 {
					close(started)
				}
				if len(live) <= 4 {
					continue
				}
				x := live[0]
				live = live[1:]
				switch i % 3 {
				case 0:
					err = r.pool.Free(x)
				case 1:
					if err = r.pool.RecordStream(x, s); err == nil {
						err = r.pool.Free(x)
					}
				default:
					err = r.pool.FreeAsync(x, s)
				}
				if err != nil {
					t.Errorf("free: %v", err)
				}
			}
			for _, x := range live {
				if err := r.pool.FreeAsync(x, s); err != nil {
					t.Errorf("free after Close: %v", err)
				}
			}
		}()
	}
	<-started
	err := r.pool.Close()
	if err != nil && !errors.Is(err, pinned.ErrLiveBlocks) {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	if err := r.pool.Trim(); err != nil && !errors.Is(err, pinned.ErrClosed) {
		t.Errorf("Trim: %v", err)
	}
	if st := r.pool.Stats(); !st.Released || st.Reserved != 0 {
		t.Fatalf("not released after the last free and the stream: %+v", st)
	}
	ok(t, "heap Sync", r.heap.Sync())
	ok(t, "ForgetStream", r.heap.ForgetStream(s))
	ok(t, "heap Close", r.heap.Close())
	if n := r.f.Stat(fakecuda.Registrations) + r.f.Stat(fakecuda.Mappings); n != 0 {
		t.Errorf("after the release: the fake holds %v", r.f.LiveObjects())
	}
}
