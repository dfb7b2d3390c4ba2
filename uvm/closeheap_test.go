package uvm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestCloseKeepsHeapItCouldNotClose: when the driver refuses to give back the VRAM of the
// tier's own device heap at Close (an unmap and a handle's release refused), Close says so and
// keeps the heap, Stats.Released false, so that a later Close tries again and gives the memory
// back. Before, Close dropped the heap whatever its Close returned: the second Close returned
// ErrClosed, Released was true, and the heap's memory stayed mapped until the process ended.
func TestCloseKeepsHeapItCouldNotClose(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 << 10
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20})
	s := stream(t, dev)
	h, err := tr.Alloc(n)
	must(t, err)
	_, err = tr.Acquire(h, s, uvm.Write) // the heap commits VRAM; the host pool commits nothing
	must(t, err)
	must(t, tr.Release(h, s))
	must(t, tr.Free(h))
	mapped := func() int64 { return f.LiveObjects()["mappings"] + f.LiveObjects()["handles"] }
	if mapped() == 0 {
		t.Fatalf("no device memory mapped before Close: %v", f.LiveObjects())
	}
	// The unmap refused at the heap's purge, the handle's release at its arena's give-back.
	f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
	f.FailAfter(fakecuda.CallRelease, 0, fakecuda.ResultInvalidValue)
	streams := f.LiveObjects()["streams"]
	err = tr.Close()
	if err == nil || !strings.Contains(err.Error(), "a later Close tries again") {
		t.Fatalf("Close whose device heap the driver refused to close: %v; want an error saying a later Close tries again", err)
	}
	if tr.Stats().Released {
		t.Error("Stats.Released after a Close that kept the device heap's memory")
	}
	if mapped() == 0 {
		t.Fatalf("the refused Close gave the device memory back: %v", f.LiveObjects())
	}
	// The kept heap has seen the tier's streams: its retry may wait for them, so they stay
	// until it is closed. Before, Close destroyed them, and a later stream could take a handle.
	if v := f.LiveObjects()["streams"]; v != streams {
		t.Errorf("%d streams after the Close that kept the heap, want the %d before it", v, streams)
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("second Close: %v; want nil: it closes the device heap the first could not", err)
	}
	if !tr.Stats().Released {
		t.Error("Stats.Released false after the second Close gave the device heap's memory back")
	}
	if v := mapped(); v != 0 {
		t.Errorf("after the second Close: %d device mappings and handles still live (%v)", v, f.LiveObjects())
	}
	if v := f.LiveObjects()["streams"]; v != streams-2 {
		t.Errorf("%d streams after the second Close, want %d: its two destroyed", v, streams-2)
	}
	if err := tr.Close(); !errors.Is(err, uvm.ErrClosed) {
		t.Errorf("third Close: %v, want ErrClosed", err)
	}
}
