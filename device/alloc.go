package device

// Alloc: a block from the stream's heap, the streams' held memory reclaimed when there is none,
// then the pressure hook (pressure.go).

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
)

// Alloc returns a block of at least size bytes of device memory for use on stream s. Its contents
// are undefined. Out of memory, it calls Options.Pressure (see the package documentation);
// inside that hook, it does not call it again and fails with ErrInPressureHook.
func (h *Heap) Alloc(size int, s cuda.Stream) (cuda.DevicePtr, error) {
	if size < 0 {
		return 0, fmt.Errorf("%w: %d bytes", heap.ErrInvalidSize, size)
	}
	n := uintptr(size)
	p, err := h.alloc(n, s)
	if err == nil {
		return p, nil
	}
	if press := h.press.Load(); press != nil && outOfMemory(err) {
		p, err = h.relieve(*press, n, s, err)
	}
	return p, faulted(err)
}

func (h *Heap) alloc(n uintptr, s cuda.Stream) (cuda.DevicePtr, error) {
	h.mu.Lock()
	defer h.unlock("Alloc")
	if err := h.ready(s); err != nil {
		return 0, err
	}
	sh, err := h.heapFor(s)
	if err != nil {
		return 0, err
	}
	if err := h.overQuota(n); err != nil {
		return 0, err
	}
	p, err := sh.Alloc(n)
	if err != nil && outOfMemory(err) {
		// A stream the reclaim cannot wait for (one capturing a graph, say) keeps its memory,
		// and the reclaim's error says so; what the other streams gave back is in the arena
		// all the same: try it before failing.
		h.st.Reclaims++
		rerr := h.reclaim()
		if p, err = sh.Alloc(n); err != nil && rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	if err != nil {
		return 0, err
	}
	h.st.Allocs++
	if h.quota > 0 {
		h.used += n
	}
	return cuda.DevicePtr(p), nil
}

// outOfMemory reports an error that more memory could cure: the heap's capacity or the
// device's memory used up.
func outOfMemory(err error) bool { return errors.Is(err, ErrOutOfMemory) }
