package pinned_test

import (
	"errors"
	"testing"
	"time"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeCloseAfterFaultDoesNotWait: a Close after a device fault, with a buffer freed on a
// stream still waiting for it, returns at once: the sticky error answers every wait, so none
// can tell that the stream passed the buffer. It says so (ErrBusy, ErrDeviceFault) and keeps
// the memory, which a Close once the error is cleared gives back. Before, it polled the stream
// for its whole wait (5 s) first.
func TestFakeCloseAfterFaultDoesNotWait(t *testing.T) {
	f, dev, p, s := faultRig(t)
	if f == nil {
		return
	}
	b, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	ok(t, "FreeAsync", p.FreeAsync(b, pubcuda.Stream(s)))
	f.Fault(t, dev)
	wait := pinned.SetCloseWait(2 * time.Second)
	defer pinned.SetCloseWait(wait)
	start := time.Now()
	err = p.Close()
	if took := time.Since(start); took >= time.Second {
		t.Errorf("Close after a fault took %v; want it at once, no wait can succeed", took)
	}
	if !errors.Is(err, pinned.ErrBusy) || !errors.Is(err, pinned.ErrDeviceFault) {
		t.Errorf("Close after a fault: %v; want ErrBusy and ErrDeviceFault", err)
	}
	f.ClearStickyError()
	ok(t, "Close once the driver works again", p.Close())
	if live := f.LiveObjects(); live["events"] != 0 || live["reservations"] != 0 || live["handles"] != 0 {
		t.Errorf("after the second Close the fake holds %v", live)
	}
}

// TestFakeFreeAfterCloseAndFaultDoesNotWait: the Free of the last live buffer of a closed pool,
// a buffer a stream uses (RecordStream), after a device fault, returns at once: it finishes the
// close, whose wait for that stream the sticky error answers. Before, it polled the stream for
// the close's whole wait (5 s).
func TestFakeFreeAfterCloseAndFaultDoesNotWait(t *testing.T) {
	f, dev, p, s := faultRig(t)
	if f == nil {
		return
	}
	b, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	ok(t, "RecordStream", p.RecordStream(b, pubcuda.Stream(s)))
	if err := p.Close(); !errors.Is(err, pinned.ErrLiveBlocks) {
		t.Fatalf("Close with a buffer live: %v; want ErrLiveBlocks", err)
	}
	f.Fault(t, dev)
	wait := pinned.SetCloseWait(2 * time.Second)
	defer pinned.SetCloseWait(wait)
	start := time.Now()
	err = p.Free(b)
	if took := time.Since(start); took >= time.Second {
		t.Errorf("the last Free of a closed pool after a fault took %v; want it at once, no wait can succeed", took)
	}
	ok(t, "Free", err)
	f.ClearStickyError()
	ok(t, "Close once the driver works again", p.Close())
}

// faultRig returns the fake driver and device (nil where the fake cannot run), a CUDAHost pool
// of 64 MiB, and a non-blocking stream destroyed when the test ends: the set-up of the tests of
// a pool after a device fault.
func faultRig(t *testing.T) (*fakecuda.Driver, *icuda.Device, *pinned.Pool, icuda.Stream) {
	t.Helper()
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return nil, nil, nil, 0
	}
	p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 64 << 20})
	s, err := dev.StreamCreate(true)
	ok(t, "StreamCreate", err)
	t.Cleanup(func() { ok(t, "StreamDestroy", dev.StreamDestroy(s)) })
	return f, dev, p, s
}
