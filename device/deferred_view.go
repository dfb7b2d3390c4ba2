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
// by stream handle (a stream destroyed before a ForgetStream that a capture refused counts under
// the handle it had, with the new stream given that handle if any); nil when none waits or the
// heap is closed. It first does the deferred
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
	_ = h.settleParked(false, noneMine)
	var out []StreamDeferred
	// add appends stream s's deferred frees, if any, to out.
	add := func(s cuda.Stream, marked, open []cuda.DevicePtr) {
		sd := StreamDeferred{Stream: s}
		for _, vs := range [2][]cuda.DevicePtr{marked, open} {
			for _, p := range vs {
				sd.Blocks++
				if n, err := h.g.Size(uintptr(p)); err == nil {
					sd.Bytes += int(n)
				}
			}
		}
		if sd.Blocks > 0 { // (none: a list lingering after its frees were done)
			out = append(out, sd)
		}
	}
	h.lists.Range(func(s uintptr, marked, open []cuda.DevicePtr) { // each stream once
		add(cuda.Stream(s), marked, open)
	})
	for _, ps := range h.parked { // a destroyed stream's, parked (park.go): under its old handle
		if ps.list != nil {
			ps.list.Items(func(marked, open []cuda.DevicePtr) { add(ps.s, marked, open) })
		}
	}
	slices.SortFunc(out, func(a, b StreamDeferred) int { return cmp.Compare(a.Stream, b.Stream) })
	// A handle may stand for a parked stream and the new stream given its handle: one entry.
	merged := out[:0]
	for _, sd := range out {
		if k := len(merged) - 1; k >= 0 && merged[k].Stream == sd.Stream {
			merged[k].Blocks += sd.Blocks
			merged[k].Bytes += sd.Bytes
			continue
		}
		merged = append(merged, sd)
	}
	return merged
}
