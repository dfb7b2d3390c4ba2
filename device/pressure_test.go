package device

import (
	"errors"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// fillHeap allocates huge blocks (two chunks each) on stream 0 until h is full.
func fillHeap(t *testing.T, h *Heap) []cuda.DevicePtr {
	t.Helper()
	var held []cuda.DevicePtr
	for {
		p, err := h.Alloc(1<<20+1, 0)
		if err != nil {
			if !outOfMemory(err) {
				t.Fatalf("filling the heap: %v", err)
			}
			return held
		}
		held = append(held, uintptr(p))
	}
}

// TestPressureHookNotReentered: a pressure hook that allocates from its own heap is not called
// again by that Alloc (it recursed without bound until the stack overflowed): the nested Alloc
// fails fast with ErrInPressureHook (and ErrOutOfMemory) when there is no memory, and is served
// without the hook when there is. Another goroutine that runs out of memory while the hook
// runs still gets the hook: only the hook's own call chain is refused it.
func TestPressureHookNotReentered(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	h := newHeap(t, dev, Options{Capacity: 4 << 20})
	held := fillHeap(t, h)
	if len(held) == 0 {
		t.Fatal("no block fits the heap")
	}
	t.Cleanup(func() { // before the heap's Close, after a failure
		for _, p := range held {
			_ = h.Free(pcuda.DevicePtr(p))
		}
	})

	// Nothing to free: the nested Alloc fails at once.
	var depth, deepest, calls int
	var nested []error
	h.SetPressure(func(n int, s pcuda.Stream) bool {
		calls++
		depth++
		defer func() { depth-- }()
		deepest = max(deepest, depth)
		if depth > 8 { // the old behaviour: stop before the stack overflows
			return false
		}
		p, err := h.Alloc(n, pcuda.Stream(s))
		if err == nil {
			must(t, "Free", h.Free(p))
		}
		nested = append(nested, err)
		return false
	})
	if _, err := h.Alloc(1<<20+1, 0); !outOfMemory(err) || errors.Is(err, ErrInPressureHook) {
		t.Errorf("Alloc under pressure: %v, want out of memory (from the hook's answer)", err)
	}
	if deepest != 1 || calls != 1 || len(nested) != 1 {
		t.Fatalf("the hook ran %d times, nested %d deep; want once", calls, deepest)
	}
	if err := nested[0]; !errors.Is(err, ErrInPressureHook) || !outOfMemory(err) {
		t.Errorf("Alloc inside the hook: %v, want ErrInPressureHook and out of memory", err)
	}

	// The hook frees a block, then allocates inside itself: served, without the hook.
	calls, deepest, nested = 0, 0, nil
	var inner []cuda.DevicePtr
	h.SetPressure(func(n int, s pcuda.Stream) bool {
		calls++
		depth++
		defer func() { depth-- }()
		deepest = max(deepest, depth)
		if depth > 8 || len(held) == 0 {
			return false
		}
		must(t, "Free", h.Free(pcuda.DevicePtr(held[0])))
		held = held[1:]
		p, err := h.Alloc(4096, pcuda.Stream(s))
		nested = append(nested, err)
		if err == nil {
			inner = append(inner, uintptr(p))
		}
		return true
	})
	p, err := h.Alloc(1<<20+1, 0)
	must(t, "Alloc under pressure", err)
	held = append(held, uintptr(p))
	if deepest != 1 || len(nested) == 0 || len(nested) != calls {
		t.Fatalf("the hook ran %d times, nested %d deep, %d nested Allocs", calls, deepest, len(nested))
	}
	for i, err := range nested {
		if err != nil {
			t.Errorf("nested Alloc %d, with memory free: %v", i, err)
		}
	}
	for _, p := range inner {
		must(t, "Free", h.Free(pcuda.DevicePtr(p)))
	}

	// A hook running on one goroutine does not keep another's Alloc from calling it.
	h.SetPressure(nil)
	held = append(held, fillHeap(t, h)...)
	inHook, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	hooked := 0
	h.SetPressure(func(n int, s pcuda.Stream) bool {
		mu.Lock()
		hooked++
		first := hooked == 1
		mu.Unlock()
		if first {
			close(inHook)
			<-release
		}
		return false
	})
	errs := make(chan error, 1)
	go func() {
		_, err := h.Alloc(1<<20+1, 0)
		errs <- err
	}()
	<-inHook
	_, err = h.Alloc(1<<20+1, 0)
	close(release)
	if !outOfMemory(err) || errors.Is(err, ErrInPressureHook) {
		t.Errorf("Alloc on another goroutine while the hook runs: %v, want out of memory from the hook's answer", err)
	}
	if err := <-errs; !outOfMemory(err) || errors.Is(err, ErrInPressureHook) {
		t.Errorf("Alloc whose hook waited: %v", err)
	}
	if hooked != 2 {
		t.Errorf("the hook ran %d times for two goroutines out of memory, want 2", hooked)
	}
	h.SetPressure(nil)
	for _, p := range held {
		must(t, "Free", h.Free(pcuda.DevicePtr(p)))
	}
	held = nil
}
