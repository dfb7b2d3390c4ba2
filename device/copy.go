package device

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Copies between host []byte and device memory. Every device range must lie inside one live
// block of this heap, found from any address inside it: a range that runs past its block's end
// is refused with ErrOutOfBounds, one in a freed block, in a block with a free pending, or in
// memory the heap does not own with ErrNotOwned, and every copy after Close with ErrClosed
// (so a bad length or a stale pointer never writes over another tenant's block). The check is
// one lookup in the heap's chunk table under the heap's lock.
//
// Host memory. Every copy accepts any []byte. Go memory is pinned (runtime.Pinner) for the
// call, so the garbage collector neither moves nor frees it while the driver reads or writes
// it. The driver copies memory it has not page-locked itself (Go memory, a Locked or Pageable
// pool's buffers, any other mapping) as pageable memory, staged through its own buffers at a
// fraction of the bandwidth: HtoDAsync has read such a source, and DtoHAsync has written such a
// destination, before it returns, so for them the asynchronous copies are synchronous in
// effect, and the buffer is free to reuse at once. A buffer of a pinned.Pool the driver knows
// (the CUDAHost backend) is copied by DMA after the call returns: the async copies record
// their stream on the buffer (pinned.Pool.RecordStream), so that freeing it, with Free or
// FreeAsync, hands it out again only once the stream has passed the copy. Until then the
// caller must not write a source or read a destination: that is the stream's to order. A pool
// orders its reuse after streams of its own device only: a copy between a heap of another
// device and a pool buffer (a pool granted to several GPUs) waits for its stream before it
// returns.

// HtoD copies src to device memory at dst and returns when the copy is done. It copies on the
// legacy default stream and waits for it: while a blocking stream captures a CUDA graph, which
// the driver would end, it is refused with an error matching cuda.ErrCapturing (so are DtoH and
// DtoD), nothing copied. The copy comes after the work queued so far on the stream dst's block
// was allocated on, as DtoD's does: a block reused on its stream may still have its previous
// owner's work queued there, which must not write over the copy. While a CUDA graph capture
// holds that stream, nothing can be ordered after its work queued before the capture: the copy
// is made when the heap knows the stream has passed every free of its heap (Trim, or the idle
// purge's look at it since its last free), and refused otherwise with an error matching
// cuda.ErrCapturing, nothing copied.
func (h *Heap) HtoD(dst cuda.DevicePtr, src []byte) error {
	w, err := h.checkWrite("HtoD copy", uintptr(len(src)), dst)
	if err != nil {
		return err
	}
	return h.hostCopy(src, "HtoD copy", func(addr uintptr) error {
		if err := h.afterOwner(0, w); err != nil { // in hostCopy's hold of the capture gate
			return err
		}
		return h.points().WaitLegacy(h.dev.MemcpyHtoD(uintptr(dst), addr, uintptr(len(src))))
	})
}

// DtoH copies len(dst) bytes of device memory at src to dst and returns when the copy is done;
// refused during a capture on a blocking stream, as HtoD is.
func (h *Heap) DtoH(dst []byte, src cuda.DevicePtr) error {
	if err := h.checkCopy("DtoH copy", uintptr(len(dst)), src); err != nil {
		return err
	}
	return h.hostCopy(dst, "DtoH copy", func(addr uintptr) error { return h.dev.MemcpyDtoH(addr, uintptr(src), uintptr(len(dst))) })
}

// DtoD copies size bytes between device addresses and returns when the copy is done; refused
// during a capture on a blocking stream, as HtoD is. The copy comes after the work queued so far
// on the stream dst's block was allocated on, as HtoD's does, and is refused as HtoD's while a
// capture holds that stream.
func (h *Heap) DtoD(dst, src cuda.DevicePtr, size int) error {
	n, err := copySize("DtoD copy", size)
	if err != nil {
		return err
	}
	w, err := h.checkWrite("DtoD copy", n, dst, src)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	icuda.HoldCaptureBegins() // from the look at the legacy stream to the wait for the copy
	defer icuda.ReleaseCaptureBegins()
	if err := h.legacyRefusal(); err != nil {
		return wrapCopy("DtoD copy", n, err)
	}
	if err := h.afterOwner(0, w); err != nil {
		return wrapCopy("DtoD copy", n, err)
	}
	return wrapCopy("DtoD copy", n, h.points().WaitLegacy(h.dev.MemcpyDtoD(uintptr(dst), uintptr(src), n)))
}

// legacyRefusal is the refusal of a synchronous copy, which the driver runs on the legacy
// default stream and waits for, while a blocking stream captures a CUDA graph: the driver would
// refuse the copy and end the user's capture. It matches cuda.ErrCapturing; nil when no
// capture holds the legacy stream (one cgo call, which invalidates nothing). The caller holds
// the capture gate (icuda.HoldCaptureBegins) from it through the copy and the wait for it, so
// that a capture begun through package cuda on another goroutine meanwhile waits for the copy.
func (h *Heap) legacyRefusal() error {
	if err := streamq.CaptureRefusal(h.dev, 0); err != nil {
		return fmt.Errorf("%w; a synchronous copy runs there: copy once the capture has ended, or with an async copy on a stream of your own", err)
	}
	return nil
}

// points are the heap's device's points (streamq): HtoD, DtoD and a ZeroOnFree Free wait for
// the legacy stream they queue on (Points.WaitLegacy), so that a block reused at once is not
// overwritten after the fact by work a non-blocking stream does not wait for.
func (h *Heap) points() *streamq.Points { return h.lists.Points() }

// HtoDAsync queues a copy of src to device memory at dst on stream s. A src in Go memory (or
// any memory the driver has not page-locked) is read before the call returns; a src in a
// pinned.Pool of CUDA pinned memory is read when s runs the copy, and the pool's Free of it
// waits for that (see the notes on host memory above). While s captures a CUDA graph, a src of
// no pool of this device (Go memory, say) is refused with an error matching cuda.ErrCapturing:
// the graph would read it at each launch.
func (h *Heap) HtoDAsync(dst cuda.DevicePtr, src []byte, s cuda.Stream) error {
	if err := h.checkAsync(s, "HtoD copy", uintptr(len(src)), dst); err != nil || len(src) == 0 {
		return err
	}
	return h.hostAsync("HtoD copy", src, s, func(addr, n uintptr) error { return h.dev.MemcpyHtoDAsync(uintptr(dst), addr, n, uintptr(s)) })
}

// DtoHAsync queues a copy of len(dst) bytes of device memory at src to dst on stream s. A dst
// in Go memory (or any memory the driver has not page-locked) is written before the call
// returns; a dst in a pinned.Pool of CUDA pinned memory is written when s runs the copy, and
// the pool's Free of it waits for that (see the notes on host memory above). While s captures
// a CUDA graph, a dst of no pool of this device (Go memory, say) is refused with an error
// matching cuda.ErrCapturing: the graph would write it at each launch.
func (h *Heap) DtoHAsync(dst []byte, src cuda.DevicePtr, s cuda.Stream) error {
	if err := h.checkAsync(s, "DtoH copy", uintptr(len(dst)), src); err != nil || len(dst) == 0 {
		return err
	}
	return h.hostAsync("DtoH copy", dst, s, func(addr, n uintptr) error { return h.dev.MemcpyDtoHAsync(addr, uintptr(src), n, uintptr(s)) })
}

// DtoDAsync queues a copy of size bytes between device addresses on stream s.
func (h *Heap) DtoDAsync(dst, src cuda.DevicePtr, size int, s cuda.Stream) error {
	n, err := copySize("DtoD copy", size)
	if err != nil {
		return err
	}
	return h.asyncCopy(s, "DtoD copy", n, []cuda.DevicePtr{dst, src}, func() error { return h.dev.MemcpyDtoDAsync(uintptr(dst), uintptr(src), n, uintptr(s)) })
}

// MemsetAsync queues setting size bytes of device memory at p to v on stream s.
func (h *Heap) MemsetAsync(p cuda.DevicePtr, v byte, size int, s cuda.Stream) error {
	n, err := copySize("memset", size)
	if err != nil {
		return err
	}
	return h.asyncCopy(s, "memset", n, []cuda.DevicePtr{p}, func() error { return h.dev.MemsetD8Async(uintptr(p), v, n, uintptr(s)) })
}

// hostCopy runs a synchronous copy to or from b with b pinned (see pinHost).
func (h *Heap) hostCopy(b []byte, what string, copyFn func(addr uintptr) error) error {
	if len(b) == 0 {
		return nil
	}
	icuda.HoldCaptureBegins() // from the look at the legacy stream to the wait for the copy
	defer icuda.ReleaseCaptureBegins()
	if err := h.legacyRefusal(); err != nil {
		return wrapCopy(what, len(b), err)
	}
	var pin runtime.Pinner
	addr, n := pinHost(&pin, b)
	err := copyFn(addr)
	pin.Unpin()
	return wrapCopy(what, n, err)
}

// hostAsync queues an async copy to or from host buffer b on stream s with b pinned for the
// call (see pinHost) and s recorded on b when b is a buffer of a pinned.Pool whose memory the
// driver copies asynchronously (pinned.PoolOf finds it), which the driver reads or writes after
// the call; a buffer of a pool of another device, which cannot order its reuse after s, is
// copied and waited for. queue gets b's address and length. The unpin is not deferred: a defer
// keeps b alive by itself, and would hide a missing pin from TestFakeAsyncGoSourceGC.
func (h *Heap) hostAsync(what string, b []byte, s cuda.Stream, queue func(addr, n uintptr) error) error {
	pool := pinned.PoolOf(b) // before b's address is taken: b is not used after pinHost
	// Memory no stream of this device orders: Go memory (or other memory of no pool), or a pool
	// of another device's, waited for before the call returns.
	wait := pool != nil && pool.Device() != h.dev.Ordinal()
	if pool == nil || wait {
		// On a capturing stream the copy would be a node of the user's graph, reading or
		// writing that memory at each launch, long after the pin (and the wait, a synchronize
		// of the stream, would invalidate the capture). The capture gate is held from the look
		// to the wait: a capture begun through package cuda meanwhile waits for the copy.
		icuda.HoldCaptureBegins()
		defer icuda.ReleaseCaptureBegins()
		if err := streamq.CaptureRefusal(h.dev, streamq.Stream(s)); err != nil {
			return wrapCopy(what, len(b), fmt.Errorf("%w: host memory of no pinned.Pool of this device cannot be captured", err))
		}
	}
	var pin runtime.Pinner
	addr, n := pinHost(&pin, b)
	if afterAddr != nil {
		afterAddr()
	}
	var err error
	if pool != nil && !wait {
		err = pool.RecordStream(mem.Bytes(addr, n), s) // pool memory: not Go's, the slice keeps nothing alive
	}
	if err == nil {
		err = queue(addr, n)
	}
	if err == nil && wait {
		err = h.dev.StreamSynchronize(uintptr(s))
	}
	pin.Unpin()
	return wrapCopy(what, n, err)
}

// pinHost pins b's memory, when it is Go's, against the garbage collector moving or freeing it
// until pin is unpinned, and returns its address and length. From the moment the address is
// taken the slice is dead to the collector unless something keeps it: without the pin, a
// collection between the address and the end of the driver call (which reads or writes Go
// memory during the call, as pageable memory) could free it and hand it to another
// allocation. Pin does nothing for memory that is not Go's (a pool's buffers).
//
// Its callers keep nothing of b once it returns (neither b nor its length, which the compiler
// would read from b's stack slot, keeping b alive), and it is not inlined, so that in
// TestFakeAsyncGoSourceGC the pin alone keeps b: the test then fails if the pin goes.
//
//go:noinline
func pinHost(pin *runtime.Pinner, b []byte) (addr, n uintptr) {
	pin.Pin(&b[0])
	return mem.Addr(b), uintptr(len(b))
}

// afterAddr, when set (by tests), runs between taking a host buffer's address and the driver
// call that uses it.
var afterAddr func()

// asyncCopy checks the stream and the device ranges, then queues the operation.
func (h *Heap) asyncCopy(s cuda.Stream, what string, n uintptr, ptrs []cuda.DevicePtr, queue func() error) error {
	if err := h.checkAsync(s, what, n, ptrs...); err != nil || n == 0 {
		return err
	}
	return wrapCopy(what, n, queue())
}

// checkAsync checks, under the heap's lock, that the heap is open, the driver accepts s and n
// bytes from each of ptrs lie inside one live block.
func (h *Heap) checkAsync(s cuda.Stream, what string, n uintptr, ptrs ...cuda.DevicePtr) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	if _, err := h.checkStream(s); err != nil {
		return err
	}
	return h.checkRanges(what, n, ptrs...)
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

// checkWrite is checkCopy for a synchronous copy that writes at ptrs[0], and returns what the
// write must come after (afterOwner).
func (h *Heap) checkWrite(what string, n uintptr, ptrs ...cuda.DevicePtr) (writeOrder, error) {
	if err := h.lock(); err != nil {
		return writeOrder{s: noOwner}, err
	}
	defer h.mu.Unlock()
	if err := h.checkRanges(what, n, ptrs...); err != nil || n == 0 {
		return writeOrder{s: noOwner}, err
	}
	return h.orderFor(ptrs[0], 0), nil
}

// writeOrder is what a write into a block queued on another stream than the block's must come
// after (afterOwner): the work queued so far on s, the stream whose heap holds the block (or
// noOwner), which may include a previous owner's when the block was freed on s and reused at
// once. passed says that none can be left there: s is known to have passed the work that used
// every block freed in its heap (freesPassed).
type writeOrder struct {
	s      cuda.Stream
	passed bool
}

// orderFor returns what a write into the live block at p must come after; first is the stream
// likeliest to hold it (ownerStream). h.mu is held.
func (h *Heap) orderFor(p cuda.DevicePtr, first cuda.Stream) writeOrder {
	s := h.ownerStream(p, first)
	return writeOrder{s: s, passed: s == noOwner || h.freesPassed(s)}
}

// freesPassed reports whether stream s is known to have passed the work that used every block
// freed in its heap: none was freed there, or the heap's stream has passed a point placed after
// its last free (a purge request of the heap handed back, or a synchronize of the stream by
// reclaim). A block freed on its own stream is free at once (FreeAsync's same-stream rule), its
// previous owner's work possibly still queued on s: only such a point says it has run. h.mu
// is held.
func (h *Heap) freesPassed(s cuda.Stream) bool {
	sh := h.streams[s]
	return sh == nil || h.passed[sh] >= sh.FreeMark()
}

// ownerStream returns the stream whose heap holds the live block at p (afterOwner), or noOwner
// for a block of a parked heap (no stream allocates there any more) or none. It asks first
// whether the stream first, the likeliest, is the one (a FreeAsync's on the block's own stream:
// no walk of the streams). h.mu is held.
func (h *Heap) ownerStream(p cuda.DevicePtr, first cuda.Stream) cuda.Stream {
	owner, err := h.g.Owner(uintptr(p))
	if err != nil {
		return noOwner
	}
	if h.streams[first] == owner {
		return first
	}
	for s, sh := range h.streams {
		if sh == owner {
			return s
		}
	}
	return noOwner
}

// noOwner is ownerStream's answer for a block of no stream's heap: no handle the driver gives.
const noOwner = ^cuda.Stream(0)

// afterOwner orders stream on, where a write into a block is queued, after the work queued so
// far on w.s, the stream where the block was allocated (checkWrite, orderFor): the legacy
// default stream (0) of a synchronous copy or of a Free's clear (Options.ZeroOnFree), or the
// stream of a FreeAsync's clear. That block may be one freed on w.s and reused at once
// (FreeAsync's same-stream rule), whose earlier owner's work queued on w.s may still read or
// write it, and a non-blocking stream's work is not ordered with another's. It costs an event
// record on w.s and a wait queued on on, but for w.s the same stream as on (its own order) or
// both default streams; a blocking w.s is recorded too, though the legacy stream's work comes
// after its work anyway (no query of its flags). A stream the driver refuses (destroyed without
// ForgetStream) records nothing: the write is ordered after nothing there. Nor does a stream a
// CUDA graph capture holds, whose work queued before the capture no point can be placed after
// until it ends: the write goes ahead when w.passed says no previous owner's work can be left
// there, and is refused otherwise, with an error matching cuda.ErrCapturing, nothing queued.
// An event the driver cannot make refuses the write, nothing queued: an error matching
// streamq.ErrNoEvent (pinmalloc.ErrRefused; ErrOutOfMemory when memory ran out), not w.s's.
// The caller holds the capture gate (icuda.HoldCaptureBegins) from its look at stream on
// through the write queued there.
func (h *Heap) afterOwner(on cuda.Stream, w writeOrder) error {
	s := w.s
	if s == noOwner || s == on ||
		streamq.DefaultStream(streamq.Stream(on)) && streamq.DefaultStream(streamq.Stream(s)) {
		return nil
	}
	ev, err := h.events.Get()
	if err != nil { // s not asked: the driver's want or refusal (pinmalloc.ErrRefused)
		return fmt.Errorf("%w to order it after stream %#x with: %w", streamq.ErrNoEvent, s, err)
	}
	defer h.events.Put(ev)
	if err := streamq.RecordOutsideCaptureHeld(h.dev, ev, streamq.Stream(s)); err != nil {
		if w.passed || !errors.Is(err, cuda.ErrCapturing) {
			return nil
		}
		return fmt.Errorf("the block may have been freed and reused on its stream, its "+
			"previous owner's work still queued there: %w; write once the capture has ended", err)
	}
	return h.dev.StreamWaitEvent(uintptr(on), ev)
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
		if h.deferred[cuda.DevicePtr(base)] || h.freedHeld(cuda.DevicePtr(base)) {
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
		return faulted(fmt.Errorf("device: %s of %d bytes: %w", what, n, err))
	}
	return nil
}

// copySize returns a copy's or memset's size as the driver takes it; a negative size is
// refused with an error wrapping ErrOutOfBounds.
func copySize(what string, size int) (uintptr, error) {
	if size < 0 {
		return 0, fmt.Errorf("%w: %s of %d bytes", ErrOutOfBounds, what, size)
	}
	return uintptr(size), nil
}
