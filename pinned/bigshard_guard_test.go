package pinned

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A guarded pool (ZeroOnFree and a quota) over coarse memory: its own allocations and frees
// take the big shard's fast paths (inBig: the biased P's sections, or the mutex), while the
// bias changes hands, Trim holds every shard and Holds defer frees. Every buffer handed out is
// zero, keeps its bytes until freed, and the quota counter is back to 0 at the end.
func TestGuardedBigShardBiasRace(t *testing.T) {
	procs := runtime.GOMAXPROCS(2)
	t.Cleanup(func() { runtime.GOMAXPROCS(procs) })
	o := coarseOptions()
	o.Shards = 4
	o.ZeroOnFree = true
	const quota = 8 << 20
	o.Quota = quota
	p := newTestPool(t, o)
	if !p.fast {
		t.Skip("no fast sections in this build")
	}
	var held atomic.Int64
	var turn sync.Mutex
	stop := make(chan struct{})
	var mw sync.WaitGroup
	mw.Add(1)
	go func() {
		defer mw.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if err := p.Trim(); err != nil {
				t.Error(err)
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			tag := byte(g + 1)
			var live [][]byte
			free := func(k int) {
				b := live[k]
				live[k] = live[len(live)-1]
				live = live[:len(live)-1]
				for i, c := range b {
					if c != tag {
						t.Errorf("byte %d of a buffer of %d is %d, want %d", i, len(b), c, tag)
						break
					}
				}
				held.Add(-int64(len(b)))
				if r.IntN(8) == 0 {
					h, err := p.Hold(b)
					if err != nil {
						t.Error(err)
						return
					}
					if err := p.Free(b); err != nil {
						t.Error(err)
					}
					if err := h.Release(); err != nil {
						t.Error(err)
					}
					return
				}
				if err := p.Free(b); err != nil {
					t.Error(err)
				}
			}
			step := func() {
				if len(live) > 6 || len(live) > 0 && r.IntN(2) == 0 {
					free(r.IntN(len(live)))
					return
				}
				n := 64<<10 + 1 + r.IntN(192<<10)
				if r.IntN(4) == 0 {
					n = 16 + r.IntN(16<<10)
				}
				b, err := p.Alloc(n)
				if errors.Is(err, ErrQuota) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if h := held.Add(int64(n)); h > quota {
					t.Errorf("%d bytes held past the quota", h)
				}
				for i, c := range b {
					if c != 0 {
						t.Errorf("byte %d of a buffer of %d handed out is %d", i, n, c)
						break
					}
				}
				for i := range b {
					b[i] = tag
				}
				live = append(live, b)
			}
			for round := 0; round < 12 && !t.Failed(); round++ {
				if round%2 == 0 {
					turn.Lock()
					for range 3 * biasAfter {
						step()
					}
					turn.Unlock()
				} else {
					for range 300 {
						step()
					}
				}
			}
			for len(live) > 0 {
				free(0)
			}
		}()
	}
	wg.Wait()
	close(stop)
	mw.Wait()
	if u := p.used.Load(); u != 0 {
		t.Fatalf("nothing live: the quota counts %d bytes", u)
	}
	if st := p.Stats(); st.Live != 0 {
		t.Fatalf("%d live", st.Live)
	}
}
