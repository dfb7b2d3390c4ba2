package device

import (
	"cmp"
	"slices"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// The per-stream view of the deferred frees, for observers (the debug page): not on any hot
// path.

// StreamDeferred is what waits for one stream: the blocks freed on it (FreeAsync) whose free
// waits for the device to pass it, and their bytes.
type StreamDeferred struct {
	Stream cuda.Stream
	Blocks int
	Bytes  int
}

// DeferredByStream returns, per freeing stream, the deferred frees that wait still, ordered
// by stream handle; nil when none waits or the heap is closed. It first does the deferred
// frees that have completed, as Stats does, so its total is Stats().Deferred. It holds the
// heap's lock for a walk of every deferred free: call it from an observer, not from a loop of
// allocations.
func (h *Heap) DeferredByStream() []StreamDeferred {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	_ = h.poll()
	var out []StreamDeferred
	h.lists.Range(func(s uintptr, marked, open []cuda.DevicePtr) { // each stream once
		if len(marked)+len(open) == 0 {
			return // a list lingering after its frees were done
		}
		sd := StreamDeferred{Stream: cuda.Stream(s)}
		for _, vs := range [2][]cuda.DevicePtr{marked, open} {
			for _, p := range vs {
				sd.Blocks++
				if n, err := h.g.Size(uintptr(p)); err == nil {
					sd.Bytes += int(n)
				}
			}
		}
		out = append(out, sd)
	})
	slices.SortFunc(out, func(a, b StreamDeferred) int { return cmp.Compare(a.Stream, b.Stream) })
	return out
}
