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
//
// Parked entries wait for a synchronize of the context rather than for Stream to pass a point:
// with Parked, Stream is the handle of a stream destroyed before a ForgetStream that a CUDA graph
// capture refused (the driver may have given that handle to a new stream since, whose own frees
// are a separate entry), or 0 for the frees of held blocks (Hold) whose ZeroOnFree memset the
// driver refused at their last Release, whatever their stream (the legacy stream, which is never
// destroyed, is never parked). The heap makes that synchronize at its next Sync, Trim,
// ForgetStream, Close or Alloc out of memory once no capture holds the context.
type StreamDeferred struct {
	Stream cuda.Stream
	Blocks int
	Bytes  int
	Parked bool
}

// DeferredByStream returns, per freeing stream, the deferred frees that wait still, ordered
// by stream handle, a stream's own before those parked under its handle (StreamDeferred says
// which wait for a synchronize of the context); nil when none waits or the heap is closed. It
// first does the deferred frees that have completed, as Stats does, so its total is
// Stats().Deferred. It holds the heap's lock for a walk of every deferred free: call it from an
// observer, not from a loop of allocations.
func (h *Heap) DeferredByStream() []StreamDeferred {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	_ = h.poll()
	_ = h.settleParked(false, noneMine)
	var out []StreamDeferred
	// add appends the deferred frees marked and open, if any, to out under stream s.
	add := func(s cuda.Stream, parked bool, marked, open []cuda.DevicePtr) {
		sd := StreamDeferred{Stream: s, Parked: parked}
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
		add(cuda.Stream(s), false, marked, open)
	})
	for _, ps := range h.parked { // park.go: a destroyed stream's under its old handle
		if ps.list == nil {
			continue
		}
		s := ps.s
		if ps.refused { // a held block's free, refused its memset: no stream's
			s = 0
		}
		ps.list.Items(func(marked, open []cuda.DevicePtr) { add(s, true, marked, open) })
	}
	slices.SortFunc(out, func(a, b StreamDeferred) int {
		return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(b2i(a.Parked), b2i(b.Parked)))
	})
	// Several parked entries may share a handle (or 0, the refused frees): one entry each.
	merged := out[:0]
	for _, sd := range out {
		k := len(merged) - 1
		if k >= 0 && merged[k].Stream == sd.Stream && merged[k].Parked == sd.Parked {
			merged[k].Blocks += sd.Blocks
			merged[k].Bytes += sd.Bytes
			continue
		}
		merged = append(merged, sd)
	}
	return merged
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
