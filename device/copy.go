package device

import (
	"fmt"
	"runtime"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// Copies between host []byte and device memory. Every device range must lie inside one live
// block of this heap, found from any address inside it: a range that runs past its block's end
// is refused with ErrOutOfBounds, one in a freed block, in a block with a free pending, or in
// memory the heap does not own with ErrNotOwned, and every copy after Close with ErrClosed
// (so a bad length or a stale pointer never writes over another tenant's block). The check is
// one lookup in the heap's chunk table under the heap's lock. The synchronous ones accept any []byte,
// including Go memory (pinned for the duration of the call), but copies from pageable memory
// are staged by the driver and run at a fraction of the bandwidth: use page-locked buffers
// (package pinned) for speed. The asynchronous ones return before the copy is done, so their
// host buffer must be memory the Go runtime does not manage (a pinned.Pool buffer, say), must
// stay allocated, and must not be touched until the stream has passed the copy.

// HtoD copies src to device memory at dst and returns when the copy is done.
func (h *Heap) HtoD(dst cuda.DevicePtr, src []byte) error {
	if err := h.checkCopy("HtoD copy", uintptr(len(src)), dst); err != nil {
		return err
	}
	return h.hostCopy(src, "HtoD copy", func(addr uintptr) error {
		return h.syncLegacy(h.dev.MemcpyHtoD(dst, addr, uintptr(len(src))))
	})
}

// DtoH copies len(dst) bytes of device memory at src to dst and returns when the copy is done.
func (h *Heap) DtoH(dst []byte, src cuda.DevicePtr) error {
	if err := h.checkCopy("DtoH copy", uintptr(len(dst)), src); err != nil {
		return err
	}
	return h.hostCopy(dst, "DtoH copy", func(addr uintptr) error { return h.dev.MemcpyDtoH(addr, src, uintptr(len(dst))) })
}

// DtoD copies n bytes between device addresses and returns when the copy is done.
func (h *Heap) DtoD(dst, src cuda.DevicePtr, n uintptr) error {
	if err := h.checkCopy("DtoD copy", n, dst, src); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return wrapCopy("DtoD copy", n, h.syncLegacy(h.dev.MemcpyDtoD(dst, src, n)))
}

// syncLegacy waits, after a synchronous copy or memset that succeeded (err nil), for the legacy
// default stream they were queued on. cuMemcpyHtoD from pageable memory returns once the
// source is staged, with the DMA to the device possibly still in flight, and cuMemcpyDtoD and a
// cuMemsetD8 of device memory return before they have run (the driver API's "API
// synchronization behavior"): without the wait, work on a non-blocking stream, which does not
// wait for the legacy stream, could run before them, and a block reused at once could be
// overwritten after the fact.
func (h *Heap) syncLegacy(err error) error {
	if err != nil {
		return err
	}
	return h.dev.StreamSynchronize(0)
}

// HtoDAsync queues a copy of src to device memory at dst on stream s.
func (h *Heap) HtoDAsync(dst cuda.DevicePtr, src []byte, s cuda.Stream) error {
	return h.asyncCopy(s, "HtoD copy", uintptr(len(src)), []cuda.DevicePtr{dst}, func() error { return h.dev.MemcpyHtoDAsync(dst, mem.Addr(src), uintptr(len(src)), s) })
}

// DtoHAsync queues a copy of len(dst) bytes of device memory at src to dst on stream s.
func (h *Heap) DtoHAsync(dst []byte, src cuda.DevicePtr, s cuda.Stream) error {
	return h.asyncCopy(s, "DtoH copy", uintptr(len(dst)), []cuda.DevicePtr{src}, func() error { return h.dev.MemcpyDtoHAsync(mem.Addr(dst), src, uintptr(len(dst)), s) })
}

// DtoDAsync queues a copy of n bytes between device addresses on stream s.
func (h *Heap) DtoDAsync(dst, src cuda.DevicePtr, n uintptr, s cuda.Stream) error {
	return h.asyncCopy(s, "DtoD copy", n, []cuda.DevicePtr{dst, src}, func() error { return h.dev.MemcpyDtoDAsync(dst, src, n, s) })
}

// MemsetAsync queues setting n bytes of device memory at p to v on stream s.
func (h *Heap) MemsetAsync(p cuda.DevicePtr, v byte, n uintptr, s cuda.Stream) error {
	return h.asyncCopy(s, "memset", n, []cuda.DevicePtr{p}, func() error { return h.dev.MemsetD8Async(p, v, n, s) })
}

// hostCopy runs a synchronous copy to or from b with b's memory pinned against the Go runtime
// moving it (Pin does nothing for memory that is not Go's).
func (h *Heap) hostCopy(b []byte, what string, copyFn func(addr uintptr) error) error {
	if len(b) == 0 {
		return nil
	}
	var pin runtime.Pinner
	pin.Pin(&b[0])
	defer pin.Unpin()
	return wrapCopy(what, len(b), copyFn(mem.Addr(b)))
}

// asyncCopy checks the stream and the device ranges, then queues the operation.
func (h *Heap) asyncCopy(s cuda.Stream, what string, n uintptr, ptrs []cuda.DevicePtr, queue func() error) error {
	h.mu.Lock()
	err := ErrClosed
	if !h.closed {
		if err = h.checkStream(s); err == nil {
			err = h.checkRanges(what, n, ptrs...)
		}
	}
	h.mu.Unlock()
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return wrapCopy(what, n, queue())
}

// checkCopy checks, under the heap's lock, that the heap is open and that n bytes from each
// of ptrs lie inside one live block.
func (h *Heap) checkCopy(what string, n uintptr, ptrs ...cuda.DevicePtr) error {
	if err := h.lock(); err != nil {
		return err
	}
	defer h.mu.Unlock()
	return h.checkRanges(what, n, ptrs...)
}

// checkRanges checks that [p, p+n) lies inside one live block of the heap for each p. h.mu is
// held, so no free of this heap runs meanwhile.
func (h *Heap) checkRanges(what string, n uintptr, ptrs ...cuda.DevicePtr) error {
	if n == 0 {
		return nil
	}
	for _, p := range ptrs {
		base, size, err := h.g.Block(uintptr(p))
		if err != nil {
			return fmt.Errorf("%w: %s of %d bytes at %#x: %w", ErrNotOwned, what, n, p, err)
		}
		if h.deferred[cuda.DevicePtr(base)] {
			return fmt.Errorf("%w: %s of %d bytes at %#x: block %#x has a free pending", ErrNotOwned, what, n, p, base)
		}
		if off := uintptr(p) - base; n > size-off {
			return fmt.Errorf("%w: %s of %d bytes at %#x (%d bytes into block %#x of %d bytes) runs %d bytes past its end",
				ErrOutOfBounds, what, n, p, off, base, size, n-(size-off))
		}
	}
	return nil
}

func wrapCopy[N int | uintptr](what string, n N, err error) error {
	if err != nil {
		return fmt.Errorf("device: %s of %d bytes: %w", what, n, err)
	}
	return nil
}
