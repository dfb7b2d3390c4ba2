package pinned_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"

	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// A Free of a shared buffer that a Hold keeps waits for the Release, on every free path:
// ZeroOnFree (the guarded path) and plain. The Free that drops the last reference must not
// give the buffer back while the hold's transfer still uses it.
func TestFakeSharedHeldFreeWaitsForRelease(t *testing.T) {
	for _, o := range []pinned.Options{{}, {ZeroOnFree: true}, {Quota: 8 << 20}} {
		r, s := newSharedRig(t, o)
		if r == nil {
			return
		}
		b := r.alloc(4096, 9)
		s.share(t, r.pool, b, 1)
		h, err := r.pool.Hold(b)
		ok(t, "Hold", err)
		ok(t, "Free", r.pool.Free(b)) // the last reference, but held: waits for the Release
		if st := r.pool.Stats(); st.Live != 1 {
			t.Fatalf("%+v: a held shared buffer's last free gave it back before the Release: %d live", o, st.Live)
		}
		for i := 0; i < 64; i++ {
			c, err := r.pool.Alloc(4096)
			ok(t, "Alloc", err)
			if mem.Addr(c) == mem.Addr(b) {
				t.Fatalf("%+v: a held buffer was handed out again before its Release", o)
			}
			defer r.pool.Free(c)
		}
		if b[0] != 9 {
			t.Fatalf("%+v: a held buffer was scrubbed before its Release", o)
		}
		ok(t, "Release", h.Release())
		if err := r.pool.Trim(); err != nil {
			t.Fatal(err)
		}
		if st := r.pool.Stats(); st.Live != 64 {
			t.Fatalf("%+v: after the Release: %d live, want 64", o, st.Live)
		}
	}
}

// checkQuotaExact checks that a pool with nothing live lets exactly quota bytes be allocated:
// a counter that drifted up refuses some, one that drifted down lets a byte more through.
func checkQuotaExact(t *testing.T, p *pinned.Pool, quota int) {
	t.Helper()
	if st := p.Stats(); st.Live != 0 {
		t.Fatalf("before the quota check: %d live (%d deferred)", st.Live, st.Deferred)
	}
	var bs [][]byte
	for got := 0; got < quota; got += 4096 {
		b, err := p.Alloc(4096)
		if err != nil {
			t.Fatalf("the quota refused %d bytes with %d of %d allocated: %v", 4096, got, quota, err)
		}
		bs = append(bs, b)
	}
	if b, err := p.Alloc(1); !errors.Is(err, pinned.ErrQuota) {
		t.Fatalf("a byte past the quota: %v (%d bytes), want ErrQuota", err, len(b))
	}
	for _, b := range bs {
		ok(t, "Free", p.Free(b))
	}
}

// stressGuarded runs workers that allocate, check that every byte handed out is zero
// (ZeroOnFree), fill the buffer with their own byte, check it again before the free, and free
// by Free, FreeAsync (free not nil) or a Hold with its Release after the Free; meanwhile
// another goroutine trims, compacts and reads the stats. The bytes the workers hold never pass
// the quota.
func stressGuarded(t *testing.T, p *pinned.Pool, quota int, sizes []int, iters int, freeAsync func([]byte) error) {
	const workers = 4
	var held atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var maint sync.WaitGroup
	maint.Add(1)
	go func() {
		defer maint.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 3 {
			case 0:
				if err := p.Trim(); err != nil {
					t.Errorf("Trim: %v", err)
				}
			case 1:
				p.Compact()
			default:
				_ = p.Stats()
			}
			runtime.Gosched()
		}
	}()
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			tag := byte(w + 1)
			var live [][]byte
			free := func(b []byte) error {
				for i, c := range b {
					if c != tag {
						return fmt.Errorf("worker %d: byte %d of %#x of %d bytes is %d, want %d: handed out twice", w, i, mem.Addr(b), len(b), c, tag)
					}
				}
				held.Add(-int64(len(b)))
				switch rng.IntN(4) {
				case 0:
					h, err := p.Hold(b[:1])
					if err != nil {
						return fmt.Errorf("Hold: %w", err)
					}
					if err := p.Free(b); err != nil {
						return fmt.Errorf("Free of a held buffer: %w", err)
					}
					return h.Release()
				case 1:
					if freeAsync != nil {
						return freeAsync(b)
					}
				}
				return p.Free(b)
			}
			for i := 0; i < iters; i++ {
				if len(live) > 0 && (len(live) >= 8 || rng.IntN(2) == 0) {
					k := rng.IntN(len(live))
					b := live[k]
					live[k] = live[len(live)-1]
					live = live[:len(live)-1]
					if err := free(b); err != nil {
						errc <- err
						return
					}
					continue
				}
				n := sizes[rng.IntN(len(sizes))]
				b, err := p.Alloc(n)
				if errors.Is(err, pinned.ErrQuota) {
					continue
				}
				if err != nil {
					errc <- fmt.Errorf("Alloc(%d): %w", n, err)
					return
				}
				if h := held.Add(int64(n)); quota > 0 && h > int64(quota) {
					errc <- fmt.Errorf("%d bytes held past the quota of %d", h, quota)
					return
				}
				for j, c := range b {
					if c != 0 {
						errc <- fmt.Errorf("worker %d: byte %d of a buffer of %d handed out is %d: not scrubbed", w, j, n, c)
						return
					}
				}
				for j := range b {
					b[j] = tag
				}
				live = append(live, b)
			}
			for _, b := range live {
				if err := free(b); err != nil {
					errc <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	maint.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	if err := p.Trim(); err != nil {
		t.Fatal(err)
	}
}

func TestStressZeroOnFreeQuotaPageable(t *testing.T) {
	const quota = 1 << 20
	p := newPool(t, pinned.Options{Backend: pinned.Pageable, Capacity: 64 << 20, ZeroOnFree: true, Quota: quota, PurgeDelay: time.Millisecond})
	iters := 4000 // 500 with -short, 1,000 under the race detector: the workers and the purger still overlap
	switch {
	case testing.Short():
		iters = 500
	case pinned.RaceEnabled:
		iters = 1000
	}
	stressGuarded(t, p, quota, []int{16, 100, 4096, 5000, 40 << 10, 100 << 10, 300 << 10}, iters, nil)
	checkQuotaExact(t, p, quota)
	ok(t, "Close", p.Close())
}

func TestFakeStressZeroOnFreeQuota(t *testing.T) {
	const quota = 4 << 20
	r := newAsyncRig(t, pinned.Options{ZeroOnFree: true, Quota: quota, PurgeDelay: time.Millisecond})
	if r == nil {
		return
	}
	iters := 3000 // 400 with -short, 1,000 under the race detector: the workers and the purger still overlap
	switch {
	case testing.Short():
		iters = 400
	case pinned.RaceEnabled:
		iters = 1000
	}
	s := pubcuda.Stream(r.s)
	stressGuarded(t, r.pool, quota, []int{16, 100, 4096, 5000, 40 << 10, 100 << 10, 300 << 10}, iters,
		func(b []byte) error { return r.pool.FreeAsync(b, s) })
	ok(t, "Sync", r.heap.Sync())
	if err := r.pool.Trim(); err != nil {
		t.Fatal(err)
	}
	checkQuotaExact(t, r.pool, quota)
	r.finish()
}

// Trim, Compact, Stats and Usage racing Close: none panics, Close releases the memory, and
// the maintenance calls after it answer as after Close.
func raceMaintenanceClose(t *testing.T, p *pinned.Pool) {
	for i := 0; i < 8; i++ {
		b, err := p.Alloc(4096 << (i % 8))
		ok(t, "Alloc", err)
		ok(t, "Free", p.Free(b))
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			<-start
			for i := 0; i < 50; i++ {
				switch (g + i) % 4 {
				case 0:
					if err := p.Trim(); err != nil && !errors.Is(err, pinned.ErrClosed) {
						t.Errorf("Trim: %v", err)
					}
				case 1:
					p.Compact()
				case 2:
					_ = p.Stats()
				default:
					_ = p.Usage()
				}
			}
		}(g)
	}
	close(start)
	runtime.Gosched()
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
}

func TestMaintenanceRacesClosePageable(t *testing.T) {
	for i := 0; i < 40; i++ {
		raceMaintenanceClose(t, newPool(t, pinned.Options{Backend: pinned.Pageable, Capacity: 64 << 20, PurgeDelay: time.Millisecond}))
	}
}

func TestFakeMaintenanceRacesClose(t *testing.T) {
	for i := 0; i < 20; i++ {
		r := newAsyncRig(t, pinned.Options{PurgeDelay: time.Millisecond})
		if r == nil {
			return
		}
		raceMaintenanceClose(t, r.pool)
		if t.Failed() {
			return
		}
	}
}
