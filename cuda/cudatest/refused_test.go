package cudatest_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFailNextHostUnregister: on a driver without VMM host memory a CUDAHost pool pins its
// memory by registration. A Trim whose cuMemHostUnregister the driver refuses leaves the memory
// committed and the pool's, and the next Trim gives it back; a Close whose unregistration is
// refused (a populated pool: its memory is given back at the release) returns the driver's
// error and keeps the memory, and the next Close or Trim gives it back, the device with it (the
// test's cleanup finds nothing held).
func TestFailNextHostUnregister(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	fake.SetHostVMM(false)
	newPool := func(populate bool) *pinned.Pool {
		p, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20, PurgeDelay: -1, Populate: populate})
		if err != nil {
			t.Fatal(err)
		}
		if st := p.Stats(); st.Provider != "cuda-host-register" {
			t.Fatalf("CUDAHost without VMM host memory: provider %q", st.Provider)
		}
		b, err := p.Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
		return p
	}
	refused := func(what string, err error) {
		t.Helper()
		if code, ok := cuda.ResultCode(err); !ok || code != cudatest.NotPermitted {
			t.Fatalf("%s after FailNext(HostUnregister, NotPermitted) = %v (code %d)", what, err, code)
		}
	}

	p := newPool(false)
	committed := p.Stats().Committed
	fake.FailNext(cudatest.HostUnregister, cudatest.NotPermitted)
	if err := p.Trim(); err != nil {
		t.Fatal(err) // a refused decommit is not Trim's error: the memory stays, for the next
	}
	if got := p.Stats().Committed; got != committed || committed == 0 {
		t.Fatalf("Committed after a refused Trim = %d, want %d (the memory kept)", got, committed)
	}
	b, err := p.Alloc(1 << 20) // the memory kept is usable
	if err != nil {
		t.Fatal(err)
	}
	h := newHeap(t, dev, 8<<20)
	q, err := h.Alloc(len(b), 0)
	if err != nil {
		t.Fatal(err)
	}
	b[0], b[len(b)-1] = 7, 9
	if err := h.HtoD(q, b); err != nil {
		t.Fatalf("a copy from a buffer where the give-back was refused: %v", err)
	}
	clear(b)
	if err := errors.Join(h.DtoH(b, q), h.Free(q)); err != nil || b[0] != 7 || b[len(b)-1] != 9 {
		t.Fatalf("copied back %d, %d: %v", b[0], b[len(b)-1], err)
	}
	if err := errors.Join(p.Free(b), p.Trim()); err != nil {
		t.Fatal(err)
	}
	if got := p.Stats().Committed; got >= committed {
		t.Fatalf("Committed after the next Trim = %d, want less than %d", got, committed)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	for _, retry := range []string{"Close", "Trim"} {
		p = newPool(true)
		committed = p.Stats().Committed
		fake.FailNext(cudatest.HostUnregister, cudatest.NotPermitted)
		refused("Close", p.Close())
		if got := p.Stats().Committed; got != committed || committed == 0 {
			t.Fatalf("Committed after a refused Close = %d, want %d (the memory kept)", got, committed)
		}
		var err error
		if retry == "Close" {
			err = p.Close()
		} else {
			err = p.Trim()
		}
		if err != nil {
			t.Fatalf("the next %s: %v", retry, err)
		}
		if got := p.Stats().Committed; got != 0 {
			t.Fatalf("Committed after the next %s = %d", retry, got)
		}
		if err := p.Close(); !errors.Is(err, pinned.ErrClosed) {
			t.Fatalf("a Close after the next %s = %v, want ErrClosed", retry, err)
		}
	}
}

// TestFailNextCloseRefused: a device heap's Close whose give-back the driver refuses twice
// (the purge's cuMemRelease, then the release's cuMemUnmap) returns the driver's error, and the
// memory stays allocated; the next Close gives it back. Before, the heap was closed with its
// memory lost: the next Close said closed.
func TestFailNextCloseRefused(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	h, err := device.New(dev, device.Options{Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.Alloc(1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	used := fake.Used()
	fake.FailNext(cudatest.MemRelease, cudatest.NotPermitted)
	fake.FailNext(cudatest.MemUnmap, cudatest.NotPermitted)
	if code, ok := cuda.ResultCode(h.Close()); !ok || code != cudatest.NotPermitted {
		t.Fatalf("Close whose give-back is refused: code %d", code)
	}
	if got := fake.Used(); got != used || used == 0 {
		t.Fatalf("Used after a refused Close = %d, want %d (the memory kept)", got, used)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("the next Close: %v", err)
	}
	if got := fake.Used(); got != 0 {
		t.Fatalf("Used after the next Close = %d", got)
	}
	if err := h.Close(); !errors.Is(err, device.ErrClosed) {
		t.Fatalf("a Close after that = %v, want ErrClosed", err)
	}
}
