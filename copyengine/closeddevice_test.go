package copyengine

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestNewOnClosedDevice: New on a closed device fails with an error matching
// pinmalloc.ErrClosed, whatever the method. Before, MethodAuto took the kernel's and the batch
// API's refusals for a driver without them and returned a Batcher of the per-copy method, whose
// every Copy then failed.
func TestNewOnClosedDevice(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	must(t, "Close the device", dev.Close())
	for _, m := range []Method{MethodAuto, MethodKernel, MethodBatchAPI, MethodPerCopy} {
		if b, err := New(public(dev), Options{Method: m}); b != nil || !errors.Is(err, pinmalloc.ErrClosed) {
			t.Errorf("New(%s) on a closed device: %v, %v; want nil and pinmalloc.ErrClosed", m, b, err)
		}
	}
}

// TestCloseAfterDevice: a Batcher closed after its device (a misuse: the device must stay open
// until the Batcher's Close) says once that the device is closed, with an error matching
// pinmalloc.ErrClosed, and a second Close returns nil: what the Batcher held no call can give
// back now. Before, Close returned the device's refusal once per staging buffer, stream, event
// and module (six times here), kept the buffers, and every later Close said it all again.
func TestCloseAfterDevice(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	dev, err := cuda.Open(0) // left to the context's destruction on purpose: no checks at cleanup
	must(t, "cuda.Open", err)
	host, err := dev.MemHostAlloc(1<<20, cuda.HostAllocDeviceMap|cuda.HostAllocPortable)
	must(t, "MemHostAlloc", err)
	d, err := dev.MemAlloc(1 << 20)
	must(t, "MemAlloc", err)
	b, err := New(public(dev), Options{Method: MethodKernel, LowPriority: true})
	must(t, "New", err)
	must(t, "Copy", b.Copy([]Job{mkJob(d, host, 64)}, 0))
	must(t, "Close the device", dev.Close())
	err = b.Close()
	if !errors.Is(err, pinmalloc.ErrClosed) {
		t.Fatalf("Close after the device's: %v, want pinmalloc.ErrClosed", err)
	}
	if n := strings.Count(err.Error(), "is closed"); n != 1 {
		t.Errorf("Close after the device's says it %d times: %v", n, err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("a second Close after the device's: %v, want nil", err)
	}
	if err := b.Copy([]Job{mkJob(d, host, 64)}, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Copy after Close: %v, want ErrClosed", err)
	}
	f.ForgetReclaimed()
}
