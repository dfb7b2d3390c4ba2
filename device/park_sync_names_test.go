package device

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeSyncRefusalNamesHeldFree: a Sync during a capture, with only a held block's free
// parked (its memset refused at its last Release: it waits for a synchronize of the context,
// then for its clear), says the capture's refusal of that synchronize as the held block's free's,
// not as that of streams destroyed before their ForgetStream, of which there is none. Before, the
// refusal named such streams and their memory whatever waited.
func TestFakeSyncRefusalNamesHeldFree(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c)
	parkRefusedFree(t, f, h, a, 64<<10)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
	err := h.Sync()
	if !errors.Is(err, pcuda.ErrCapturing) || strings.Contains(err.Error(), "destroyed") ||
		!strings.Contains(err.Error(), "held block") {
		t.Errorf("Sync during a capture, with a held block's free parked: %v; want an error "+
			"matching cuda.ErrCapturing that names the held block's free, no destroyed stream", err)
	}
	g, err := dev.StreamEndCapture(c)
	must(t, "StreamEndCapture (the heap left the capture valid)", err)
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	must(t, "Sync after the capture", h.Sync())
	if st := h.Stats(); st.Deferred != 0 {
		t.Errorf("after the capture: %d deferred; want 0", st.Deferred)
	}
	freeAll(t, h, []cuda.DevicePtr{keep})
}
