package device

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// ErrQuota means an allocation would take the heap's live bytes beyond Options.Quota.
var ErrQuota = errkind.New(pinmalloc.ErrQuota, "device: quota exceeded")

// guard holds what a heap shared by tenants needs, off by default: ZeroOnFree clears a block
// with a driver memset as it is freed, and Quota caps the live bytes. With both off, Alloc and
// the frees test a field and skip the rest. Everything here runs under Heap.mu.
//
// The memset of a freed block is queued on the freeing stream before the free takes effect: a
// FreeAsync on the block's own stream makes it reusable at once by later work on that stream,
// which runs after the memset; a FreeAsync on another stream is done only once that stream has
// passed a point placed after the memset, so no stream sees the block before it is clear; a
// synchronous Free waits for the memset (cuMemsetD8, then a synchronize of the legacy stream: a
// memset of device memory returns before it has run). A memset queued on another stream than
// the block's (a Free's on the legacy stream, a FreeAsync's on another stream) runs after the
// work queued so far on the block's stream, as a synchronous copy into the block (afterOwner),
// and is refused as that copy is while a capture holds the block's stream. A
// free whose memset's stream a CUDA graph capture holds is refused before anything is queued:
// captured, the memset would not run before the block is reused, and would clear it, reused
// since, at every launch of the graph.
type guard struct {
	zeroOnFree bool
	quota      uintptr
	used       uintptr // live bytes asked for, counted only under a quota
}

// overQuota refuses an allocation of n bytes that would pass the quota.
func (h *Heap) overQuota(n uintptr) error {
	if h.quota == 0 || n <= h.quota-min(h.used, h.quota) {
		return nil
	}
	return fmt.Errorf("%w: %d bytes asked with %d of %d in use", ErrQuota, n, h.used, h.quota)
}

// liveSize returns the size the live block at p was allocated with, when a quota counts it.
func (h *Heap) liveSize(p cuda.DevicePtr) uintptr {
	if h.quota == 0 {
		return 0
	}
	n, _ := h.g.Size(uintptr(p))
	return n
}

// What becomes of a block whose clear a capture refused, said at the end of scrub's error: a
// Free's block stays live, to free again; a parked free's block stays parked (scrubParked).
const (
	freeLater   = "free it once the capture has ended"
	parkedLater = "kept parked: cleared and given back at a later call once the capture has ended"
)

// freeKept ends scrub's error for a Free's (freeLater) clear that the driver refused or whose
// wait failed: the block stays live, whether the memset was queued or not, as for a capture.
// A parked free's caller (scrubParked) says what becomes of its block itself.
const freeKept = "; the block stays allocated: free it again"

// scrub clears the live block at p, on stream s (queued), or at once when s is nil; it refuses,
// queueing nothing, when a capture holds the stream the memset would be queued on. It clears the
// block's whole extent (heap.Group.Extent), not the size asked for alone: the user's work may
// have written the rounding slack too (within the block, or the granule a huge block ends in,
// nothing faults), and the next owner, who may ask for the whole extent, would read it. The
// extent is committed throughout: the memset never reaches a granule the arena has unmapped.
// A capture's refusal ends with then, which says what becomes of the block (freeLater,
// parkedLater); so does a Free's whose memset the driver refused or whose wait failed
// (freeKept). Nothing frees the block on an error: it stays live, or parked, never handed out
// uncleared nor while a memset queued may still write it.
func (h *Heap) scrub(p cuda.DevicePtr, s *cuda.Stream, then string) error {
	if !h.zeroOnFree {
		return nil
	}
	n, err := h.g.Extent(uintptr(p))
	if err != nil {
		return err
	}
	// The memset's stream: a capture there would take the memset into the user's graph (not run
	// before the block's reuse, run at each launch on memory reused since); on the legacy stream
	// while a blocking stream captures, the driver would refuse it and end the capture.
	on := streamq.Stream(0) // Free's memset, on the legacy stream
	if s != nil {
		on = streamq.Stream(*s)
	}
	// The capture gate is held from the look at on to the memset (and a Free's wait for it): a
	// capture begun through package cuda on another goroutine meanwhile waits for the clear.
	icuda.HoldCaptureBegins()
	defer icuda.ReleaseCaptureBegins()
	if err := streamq.CaptureRefusal(h.dev, on); err != nil {
		return fmt.Errorf("device: clearing block %#x of %d bytes as it is freed: %w; %s",
			p, n, err, then)
	}
	// The memset comes after the work queued on the block's stream (afterOwner): a block freed
	// there and reused at once may have its old owner's work still queued, which a clear on the
	// legacy stream (Free) or on another stream (FreeAsync) would overtake. Nothing is asked of
	// a FreeAsync on the block's own stream.
	err = h.afterOwner(cuda.Stream(on), h.orderFor(p, cuda.Stream(on)))
	switch {
	case err != nil:
	case s != nil:
		err = h.dev.MemsetD8Async(uintptr(p), 0, n, uintptr(*s))
	default:
		err = h.points().WaitLegacy(h.dev.MemsetD8(uintptr(p), 0, n))
	}
	if err != nil {
		kept := ""
		if then == freeLater {
			kept = freeKept
		}
		return faulted(fmt.Errorf("device: clearing block %#x of %d bytes as it is freed: %w%s",
			p, n, err, kept))
	}
	return nil
}
