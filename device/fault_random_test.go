package device

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeFaultRandom: on heaps with and without ZeroOnFree, random allocations, copies and frees
// on three streams (one blocking) with the fake holding queued work, then a kernel fault (the
// context's sticky error) and random calls of every kind: each succeeds or fails with an error
// matching ErrDeviceFault (and pinmalloc.ErrDeviceFault), saying it once, and none crashes. Once
// the fault is cleared (the fake allows it), nothing is lost: a block whose free failed is freed
// again, one whose free succeeded is refused as a double free, the heap verifies empty, and every
// stream forgets (the heap closes at cleanup with no block, event or driver resource left).
func TestFakeFaultRandom(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 8 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	seeds := 4
	if longRun() {
		seeds = 32
	}
	h2 := newHeap(t, dev, Options{Capacity: 8 << 20, PurgeDelay: -1})
	ss := []cuda.Stream{newStream(t, dev, h), newStream(t, dev, h), newBlockingStream(t, dev, h)}
	defer f.Hold(false)
	for seed := range uint64(seeds) {
		h := h
		if seed%2 == 1 {
			h = h2
		}
		if err := faultRun(t, f, h, ss, rand.New(rand.NewPCG(seed, 0xFA17))); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// faultRun is one seed of TestFakeFaultRandom.
func faultRun(t *testing.T, f *fakecuda.Driver, h *Heap, ss []cuda.Stream, rng *rand.Rand) error {
	dev := h.dev
	f.Hold(true)
	live := map[cuda.DevicePtr]int{}
	freed := map[cuda.DevicePtr]bool{}
	pick := func() (cuda.DevicePtr, bool) {
		for p := range live {
			return p, true
		}
		return 0, false
	}
	buf := make([]byte, 64<<10)
	for range 200 {
		s := pcuda.Stream(ss[rng.IntN(len(ss))])
		p, ok := pick()
		if !ok || rng.IntN(2) == 0 {
			n := 1 + rng.IntN(64<<10)
			q, err := h.Alloc(n, s)
			if err != nil && !errors.Is(err, ErrOutOfMemory) {
				return fmt.Errorf("Alloc before the fault: %w", err)
			}
			if err == nil {
				live[uintptr(q)] = n
				if err := h.HtoDAsync(q, buf[:n], s); err != nil {
					return err
				}
			}
			continue
		}
		delete(live, p)
		if err := h.FreeAsync(pcuda.DevicePtr(p), s); err != nil {
			return fmt.Errorf("FreeAsync before the fault: %w", err)
		}
	}
	f.Fault(t, dev)
	// check accepts nil, or an error of the fault said once.
	check := func(what string, err error) error {
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrDeviceFault) || !errors.Is(err, pinmalloc.ErrDeviceFault) {
			return fmt.Errorf("%s after a fault: %w; want an error matching ErrDeviceFault",
				what, err)
		}
		return nil
	}
	failed := map[string]int{}
	for k := range 100 {
		s := pcuda.Stream(ss[rng.IntN(len(ss))])
		p, ok := pick()
		var err error
		what := ""
		switch r := rng.IntN(10); {
		case r < 2 || !ok:
			what = "Alloc"
			var q pcuda.DevicePtr
			if q, err = h.Alloc(1+rng.IntN(64<<10), s); err == nil {
				live[uintptr(q)] = 1
				delete(freed, uintptr(q)) // a block freed on s, reused at once
			}
			if errors.Is(err, ErrOutOfMemory) && !errors.Is(err, ErrDeviceFault) {
				err = nil // the capacity used up: its reclaim, when one ran, met no driver call
			}
		case r < 4:
			what = "FreeAsync"
			if err = h.FreeAsync(pcuda.DevicePtr(p), s); err == nil {
				delete(live, p)
				freed[p] = true
			}
		case r < 5:
			what = "Free"
			if err = h.Free(pcuda.DevicePtr(p)); err == nil {
				delete(live, p)
				freed[p] = true
			}
		case r < 6:
			what = "HtoDAsync"
			err = h.HtoDAsync(pcuda.DevicePtr(p), buf[:1], s)
		case r < 7:
			what = "HtoD"
			err = h.HtoD(pcuda.DevicePtr(p), buf[:1])
		case r < 8:
			what, err = "Sync", h.Sync()
		case r < 9:
			what, err = "Trim", h.Trim()
		default:
			what, err = "ForgetStream", h.ForgetStream(s)
		}
		if err != nil {
			failed[what]++
		}
		if err := check(what, err); err != nil {
			return fmt.Errorf("call %d: %w", k, err)
		}
		if err != nil && strings.Count(err.Error(), ErrDeviceFault.Error()) > 1 {
			return fmt.Errorf("call %d: %s after a fault says %q more than once: %v", k, what,
				ErrDeviceFault, err)
		}
	}
	t.Logf("calls refused during the fault: %v", failed)
	f.ClearStickyError()
	f.Hold(false)
	f.Complete()
	if err := h.Sync(); err != nil {
		return fmt.Errorf("Sync once the fault is cleared: %w", err)
	}
	for p := range freed {
		if err := h.Free(pcuda.DevicePtr(p)); !errors.Is(err, heap.ErrDoubleFree) {
			return fmt.Errorf("Free of %#x, freed during the fault: %v; want heap.ErrDoubleFree",
				p, err)
		}
	}
	for p := range live {
		if err := h.Free(pcuda.DevicePtr(p)); err != nil {
			return fmt.Errorf("Free of %#x, live, once the fault is cleared: %w", p, err)
		}
	}
	if err := h.Verify(); err != nil {
		return err
	}
	if st := h.Stats(); st.Live != 0 || st.Deferred != 0 {
		return fmt.Errorf("every block freed: %d live, %d deferred", st.Live, st.Deferred)
	}
	for _, s := range ss {
		if err := h.ForgetStream(pcuda.Stream(s)); err != nil {
			return err
		}
	}
	return nil
}
