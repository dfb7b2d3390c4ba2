package device

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeCloseRacesCalls: Close called in a loop while three goroutines allocate, copy, hold,
// free on their stream or another and release: until it succeeds it fails with ErrBusy or
// heap.ErrLiveBlocks, and every call after it fails with ErrClosed; nothing crashes and no
// call says anything else (run it with -race).
func TestFakeCloseRacesCalls(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 8 << 20, PurgeDelay: time.Millisecond})
	if f == nil {
		return
	}
	var ss []cuda.Stream
	for range 3 {
		s, err := dev.StreamCreate(true)
		must(t, "StreamCreate", err)
		ss = append(ss, s)
	}
	var closed atomic.Bool
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, o := pcuda.Stream(ss[g]), pcuda.Stream(ss[(g+1)%3])
			buf := make([]byte, 5000)
			for k := 0; k < 3000; k++ {
				p, err := h.Alloc(1000+k%4000, s)
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					errs[g] = err
					return
				}
				e := []error{h.HtoDAsync(p, buf[:1000], s), h.DtoDAsync(p, p+10, 20, s)}
				d, err := h.Hold(p + 5)
				e = append(e, err)
				if k%2 == 0 {
					e = append(e, h.FreeAsync(p, s))
				} else {
					e = append(e, h.FreeAsync(p, o))
				}
				e = append(e, d.Release())
				if err := errors.Join(e...); err != nil {
					if closed.Load() && errors.Is(err, ErrClosed) {
						return
					}
					errs[g] = err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			err := h.Close()
			if err == nil {
				closed.Store(true)
				return
			}
			if !errors.Is(err, ErrBusy) && !errors.Is(err, heap.ErrLiveBlocks) {
				errs[3] = err
				return
			}
		}
	}()
	wg.Wait()
	if !closed.Load() {
		t.Error("Close never succeeded")
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		_ = dev.StreamSynchronize(s)
		must(t, "destroy", dev.StreamDestroy(s))
	}
}
