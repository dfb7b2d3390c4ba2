package uvm_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestConcurrent runs goroutines that each own a stream and some blocks (acquired, written on
// the device, released, read back on the host, freed and made again) and share a few blocks
// they all acquire for reading on their own streams, while another reads Stats, at 4 times the
// budget. Run it with -race.
func TestConcurrent(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size, workers, own, shared = 32 * kib, 6, 6, 4
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 12 * size})
	var sharedHs [shared]uvm.Handle
	for i := range sharedHs {
		h, err := tr.Alloc(size)
		must(t, err)
		b, err := tr.AcquireHost(h, uvm.Write)
		must(t, err)
		copy(b, pattern(byte(100+i), size))
		must(t, tr.ReleaseHost(h))
		sharedHs[i] = h
	}
	streams := make([]cuda.Stream, workers)
	for i := range streams {
		streams[i] = stream(t, dev)
	}
	stop := make(chan struct{})
	var statsDone sync.WaitGroup
	statsDone.Add(1)
	go func() {
		defer statsDone.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			st := tr.Stats()
			if st.DeviceBytes+st.HostBytes+st.FreshBytes != st.LiveBytes {
				t.Errorf("accounts: %+v", st)
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			s := streams[w]
			hs := make([]uvm.Handle, own)
			want := make([][]byte, own)
			for i := range hs {
				h, err := tr.Alloc(size)
				if err != nil {
					t.Error(err)
					return
				}
				hs[i] = h
			}
			ctx := context.Background()
			for it := 0; it < 150; it++ {
				i := rng.IntN(own)
				switch rng.IntN(4) {
				case 0, 1:
					p, err := tr.AcquireContext(ctx, hs[i], s, uvm.Write)
					if err != nil {
						t.Error(err)
						return
					}
					if want[i] != nil && !bytes.Equal(readDev(t, dev, s, p, size), want[i]) {
						t.Errorf("worker %d block %d: device bytes differ", w, i)
						return
					}
					want[i] = pattern(byte(w*31+it), size)
					writeDev(t, dev, s, p, want[i])
					if err := tr.Release(hs[i], s); err != nil {
						t.Error(err)
						return
					}
				case 2:
					b, err := tr.AcquireHost(hs[i], uvm.Read)
					if err != nil {
						t.Error(err)
						return
					}
					ok := want[i] == nil || bytes.Equal(b, want[i])
					if err := tr.ReleaseHost(hs[i]); err != nil || !ok {
						t.Errorf("worker %d block %d: host bytes differ (%v)", w, i, err)
						return
					}
				case 3:
					j := rng.IntN(shared)
					p, err := tr.AcquireContext(ctx, sharedHs[j], s, uvm.Read)
					if err != nil {
						t.Error(err)
						return
					}
					if !bytes.Equal(readDev(t, dev, s, p, size), pattern(byte(100+j), size)) {
						t.Errorf("worker %d: shared block %d differs", w, j)
					}
					if err := tr.Release(sharedHs[j], s); err != nil {
						t.Error(err)
						return
					}
					if rng.IntN(8) == 0 {
						if err := tr.Free(hs[i]); err != nil {
							t.Error(err)
							return
						}
						if hs[i], err = tr.Alloc(size); err != nil {
							t.Error(err)
							return
						}
						want[i] = nil
					}
				}
			}
			for _, h := range hs {
				if err := tr.Free(h); err != nil && !errors.Is(err, uvm.ErrInvalidHandle) {
					t.Error(err)
				}
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	statsDone.Wait()
	st := tr.Stats()
	t.Logf("hits %d misses %d in %+v out %+v", st.Hits, st.Misses, st.Moved(true), st.Moved(false))
	if st.Moved(false).Blocks == 0 {
		t.Error("nothing was evicted at 4 times the budget")
	}
	for _, h := range sharedHs {
		must(t, tr.Free(h))
	}
}
