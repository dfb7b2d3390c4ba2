package device

import (
	"fmt"
	"runtime"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// Copies between host []byte and device memory. The synchronous ones accept any []byte,
// including Go memory (pinned for the duration of the call), but copies from pageable memory
// are staged by the driver and run at a fraction of the bandwidth: use page-locked buffers
// (package pinned) for speed. The asynchronous ones return before the copy is done, so their
// host buffer must be memory the Go runtime does not manage (a pinned.Pool buffer, say), must
// stay allocated, and must not be touched until the stream has passed the copy.

// HtoD copies src to device memory at dst and returns when the copy is done.
func (h *Heap) HtoD(dst cuda.DevicePtr, src []byte) error {
	return h.hostCopy(src, "HtoD copy", func(addr uintptr) error { return h.dev.MemcpyHtoD(dst, addr, uintptr(len(src))) })
}

// DtoH copies len(dst) bytes of device memory at src to dst and returns when the copy is done.
func (h *Heap) DtoH(dst []byte, src cuda.DevicePtr) error {
	return h.hostCopy(dst, "DtoH copy", func(addr uintptr) error { return h.dev.MemcpyDtoH(addr, src, uintptr(len(dst))) })
}

// DtoD copies n bytes between device addresses and returns when the copy is done.
func (h *Heap) DtoD(dst, src cuda.DevicePtr, n uintptr) error {
	return wrapCopy("DtoD copy", n, h.dev.MemcpyDtoD(dst, src, n))
}

// HtoDAsync queues a copy of src to device memory at dst on stream s.
func (h *Heap) HtoDAsync(dst cuda.DevicePtr, src []byte, s cuda.Stream) error {
	return h.asyncCopy(s, "HtoD copy", len(src), func() error { return h.dev.MemcpyHtoDAsync(dst, mem.Addr(src), uintptr(len(src)), s) })
}

// DtoHAsync queues a copy of len(dst) bytes of device memory at src to dst on stream s.
func (h *Heap) DtoHAsync(dst []byte, src cuda.DevicePtr, s cuda.Stream) error {
	return h.asyncCopy(s, "DtoH copy", len(dst), func() error { return h.dev.MemcpyDtoHAsync(mem.Addr(dst), src, uintptr(len(dst)), s) })
}

// DtoDAsync queues a copy of n bytes between device addresses on stream s.
func (h *Heap) DtoDAsync(dst, src cuda.DevicePtr, n uintptr, s cuda.Stream) error {
	return h.asyncCopy(s, "DtoD copy", int(n), func() error { return h.dev.MemcpyDtoDAsync(dst, src, n, s) })
}

// MemsetAsync queues setting n bytes of device memory at p to v on stream s.
func (h *Heap) MemsetAsync(p cuda.DevicePtr, v byte, n uintptr, s cuda.Stream) error {
	return h.asyncCopy(s, "memset", int(n), func() error { return h.dev.MemsetD8Async(p, v, n, s) })
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

// asyncCopy checks the stream, then queues the operation.
func (h *Heap) asyncCopy(s cuda.Stream, what string, n int, queue func() error) error {
	h.mu.Lock()
	err := ErrClosed
	if !h.closed {
		err = h.checkStream(s)
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

func wrapCopy[N int | uintptr](what string, n N, err error) error {
	if err != nil {
		return fmt.Errorf("device: %s of %d bytes: %w", what, n, err)
	}
	return nil
}
