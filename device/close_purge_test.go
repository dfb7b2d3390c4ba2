package device

import (
	"errors"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeCloseAfterPurgePoint: the idle purge asked for the quiet heap of blocking stream b
// while the user's memset on the legacy default stream was queued: b found quiet but not idle
// (its work waits for the legacy stream's), the purge recorded a point in b, which waits for
// that memset and for nothing else. The user then synchronized the legacy stream, and has
// nothing in flight: Close must succeed the first time, waiting for the purge's point (held by
// the fake after the legacy stream's synchronize, as a GPU runs it a little later). Before,
// Close waited only for the deferred frees' points, found b running the purge's and said
// ErrBusy on stream b.
func TestFakeCloseAfterPurgePoint(t *testing.T) { closeAroundPurgePoint(t, "synchronized") }

// TestFakeCloseAfterPurgePointBehindPoll is TestFakeCloseAfterPurgePoint with the heap's own
// point in the legacy stream for the purge's to wait for, not the user's memset: a free of
// stream a's block on the legacy stream, given a point there by Stats, before the purge's
// tick. Close waits for both. Before, it said ErrBusy on stream b.
func TestFakeCloseAfterPurgePointBehindPoll(t *testing.T) { closeAroundPurgePoint(t, "poll") }

// TestFakeCloseBusyAfterPurgePoint: with the user's memset queued on b after the purge's point,
// Close says ErrBusy and leaves the memset queued (it may wait for the purge's point, not for
// the user's work after it); once the user has synchronized, Close succeeds.
func TestFakeCloseBusyAfterPurgePoint(t *testing.T) { closeAroundPurgePoint(t, "work on b after") }

// TestFakeCloseBusyBeforePurgePoint: with the user's memset on the legacy stream, which the
// purge's point in b waits for, still queued, Close says ErrBusy and waits for neither.
func TestFakeCloseBusyBeforePurgePoint(t *testing.T) { closeAroundPurgePoint(t, "legacy queued") }

func closeAroundPurgePoint(t *testing.T, user string) {
	f, dev, h := purgeHeap(t, false, true) // the fake holds work from here on
	if f == nil {
		return
	}
	defer f.Complete()
	b := newBlockingStream(t, dev, h)
	var a cuda.Stream
	var q cuda.DevicePtr
	if user == "poll" {
		a = newStream(t, dev, h)
		q = alloc(t, h, 4096, a)
	}
	const n = 64 << 10
	p := alloc(t, h, n, b)
	must(t, "MemsetAsync on b", h.MemsetAsync(pcuda.DevicePtr(p), 0x5A, n, pcuda.Stream(b)))
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
	u, err := dev.MemAlloc(n) // the user's own memory, which the heap never sees
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", dev.MemFree(u)) }()
	must(t, "synchronize the context", dev.Synchronize()) // the user's
	h.purgeTick()                                         // b's heap busy since the last look
	if user == "poll" {
		must(t, "FreeAsync of a's block on the legacy stream", h.FreeAsync(pcuda.DevicePtr(q), 0))
		h.Stats() // a point for it in the legacy stream, held
	} else {
		must(t, "memset on the legacy stream", dev.MemsetD8Async(u, 0xAB, n, 0))
	}
	records := f.Stat(fakecuda.EventRecords)
	h.purgeTick() // b's heap quiet: asked for, with a point in b behind the legacy stream's work
	if f.Stat(fakecuda.EventRecords) == records {
		t.Fatal("the purge recorded no point in b: the test tests nothing")
	}
	switch user {
	case "synchronized":
		must(t, "synchronize the legacy stream", dev.StreamSynchronize(0))
	case "work on b after":
		must(t, "synchronize the legacy stream", dev.StreamSynchronize(0))
		must(t, "memset on b", dev.MemsetD8Async(u, 0xCD, n, b))
	}
	if f.Pending() == 0 {
		t.Fatal("nothing pending: the purge's point has run, the test tests nothing")
	}
	switch user {
	case "synchronized", "poll":
		closeClean(t, f, dev, h, "with only the purge's point (and the heap's) in flight")
		return
	}
	if err := h.Close(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Close with the user's memset queued (%s): %v, want ErrBusy", user, err)
	}
	if f.Pending() == 0 {
		t.Fatalf("Close ran the user's memset (%s): it waited for the user's work", user)
	}
	must(t, "synchronize the context", dev.Synchronize())
	if err := h.Close(); err != nil {
		t.Fatalf("Close once the user's work has run: %v", err)
	}
}
