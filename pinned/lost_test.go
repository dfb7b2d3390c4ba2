package pinned

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestFakeLostListKeepsLaterFrees: a reclaim finds a live, busy stream's list lost (the driver
// refuses the event it would record there: here an event of another device), synchronizes the
// context and takes the list's buffers back. A buffer freed on that stream after the
// synchronize, with a copy queued after it, used to be taken back with them while the copy was
// still queued; now it waits for the next reclaim.
func TestFakeLostListKeepsLaterFrees(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	p, err := New(Options{Backend: CUDAHost, Capacity: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	o := p.order
	s, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	const n = 64 << 10
	d, err := dev.MemAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	alloc := func() []byte {
		b, err := p.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	f.Hold(true)
	a := alloc()
	if err := dev.MemcpyHtoDAsync(d, mem.Addr(a), n, s); err != nil {
		t.Fatal(err)
	}
	if err := p.FreeAsync(a, cuda.Stream(s)); err != nil {
		t.Fatal(err)
	}
	p.flushAll()

	// Events of device 1: the driver refuses to record them on s, a stream of device 0.
	dev1 := f.Open(t, 1)
	own := o.points()
	o.lists.SetPoints(streamq.NewPoints(dev, icuda.NewEventPool(dev1)))
	b := alloc()
	afterLostSync = func() {
		// After the synchronize: a copy from b queued on s, then b freed on s.
		if err := dev.MemcpyHtoDAsync(d, mem.Addr(b), n, s); err != nil {
			t.Error(err)
		}
		if _, err := o.g.HoldSized(mem.Addr(b), n); err != nil {
			t.Error(err)
		}
		o.queue(o.list(cuda.Stream(s)), deferred{addr: mem.Addr(b), n: n})
	}
	_ = o.reclaim(nil, true) // finds s's list lost: its event is refused
	afterLostSync = nil
	if o.g.Held(mem.Addr(a)) {
		t.Error("the buffer freed before the synchronize is still held")
	}
	if !o.g.Held(mem.Addr(b)) {
		t.Fatal("a buffer freed on the stream after the synchronize was taken back with the copy from it still queued")
	}

	ok := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	ok("events of device 1", o.points().Close())
	o.lists.SetPoints(own)
	f.Hold(false)
	ok("StreamSynchronize", dev.StreamSynchronize(s))
	ok("ForgetStream", p.ForgetStream(cuda.Stream(s)))
	if o.g.Held(mem.Addr(b)) {
		t.Error("the buffer freed after the synchronize is still held once its stream has passed it")
	}
	ok("MemFree", dev.MemFree(d))
	ok("StreamDestroy", dev.StreamDestroy(s))
	ok("Close", p.Close())
}
