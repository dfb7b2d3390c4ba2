package device

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeForgetParkedLiveNotOthersCapture: ForgetStream(s) of a parked stream s whose heap is
// kept for its live block (a synchronize of the context has passed it: it waits for none)
// returns s's outcome, heap.ErrLiveBlocks, even while a capture refuses the synchronize that
// another stream t, parked since, waits for. Before, it returned that refusal (cuda.ErrCapturing,
// naming the capture of c) as s's, "forget stream s, destroyed and parked", and no
// heap.ErrLiveBlocks: a caller waited for a capture's end that changes nothing for s.
func TestFakeForgetParkedLiveNotOthersCapture(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c)
	s, live, endCapture := parkDestroyed(t, f, dev, h, a, c, 64<<10, true)
	endCapture()
	f.Hold(false)
	must(t, "Trim", h.Trim()) // s passed by its synchronize: its heap kept for its live block
	// A stream the heap never sees takes s's handle, so that t, parked next, has another.
	x, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", dev.StreamDestroy(x)) }()
	// t, destroyed with a free deferred on it, parked by a ForgetStream(t) refused during a
	// capture on c: it waits for a synchronize of the context.
	tt, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	if tt == s {
		t.Fatalf("t has s's handle %#x: the test proves nothing", s)
	}
	p := alloc(t, h, 64<<10, a)
	must(t, "synchronize the context", dev.Synchronize())
	f.Hold(true)
	must(t, "FreeAsync on t", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(tt)))
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(tt))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
	if err := h.ForgetStream(pcuda.Stream(tt)); !errors.Is(err, pcuda.ErrCapturing) {
		t.Fatalf("ForgetStream of destroyed t during a capture: %v; want cuda.ErrCapturing", err)
	}
	err = h.ForgetStream(pcuda.Stream(s))
	if !errors.Is(err, heap.ErrLiveBlocks) || errors.Is(err, pcuda.ErrCapturing) ||
		strings.Contains(err.Error(), fmt.Sprintf("%#x", c)) {
		t.Errorf("ForgetStream of parked s, kept for its live block, while t waits for a "+
			"synchronize a capture on c refuses: %v; want s's heap.ErrLiveBlocks, not t's "+
			"cuda.ErrCapturing", err)
	}
	g, err := dev.StreamEndCapture(c)
	must(t, "StreamEndCapture (the heap left the capture valid)", err)
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	f.Hold(false)
	freeAll(t, h, []cuda.DevicePtr{live})
	must(t, "ForgetStream of s after the capture", h.ForgetStream(pcuda.Stream(s)))
	must(t, "ForgetStream of t after the capture", h.ForgetStream(pcuda.Stream(tt)))
	h.mu.Lock()
	left := len(h.parked)
	h.mu.Unlock()
	if left != 0 {
		t.Errorf("after the capture: %d parked; want 0", left)
	}
	freeAll(t, h, []cuda.DevicePtr{keep})
}
