package pinned_test

import (
	"errors"
	"fmt"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeDevicePointerForeign: DevicePointer of memory that is no buffer of the pool (Go
// memory, another pool's buffer) said ErrInvalidOptions, the provider's "not in committed
// memory", where every other call of the pool says ErrNotOwned; after the pool's memory was
// released it said the same of the pool's own buffer, where the others say ErrClosed.
func TestFakeDevicePointerForeign(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	p, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20})
	ok(t, "New", err)
	q, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20})
	ok(t, "New", err)
	b, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	other, err := q.Alloc(4096)
	ok(t, "Alloc", err)
	foreign := map[string][]byte{"Go memory": make([]byte, 64), "another pool's buffer": other}
	for what, in := range foreign {
		_, err := p.DevicePointer(in)
		if !errors.Is(err, pinned.ErrNotOwned) || errors.Is(err, pinned.ErrInvalidOptions) {
			t.Errorf("DevicePointer of %s: %v, want ErrNotOwned", what, err)
		}
	}
	ok(t, "Free", p.Free(b))
	ok(t, "Close", p.Close())
	if _, err := p.DevicePointer(b); !errors.Is(err, pinned.ErrClosed) {
		t.Errorf("DevicePointer after the pool's memory was released: %v, want ErrClosed", err)
	}
	ok(t, "Free", q.Free(other))
	ok(t, "Close", q.Close())
}

// TestFakeDevicePointerFreed: DevicePointer of a buffer the caller has freed, in a live pool,
// answered with a device pointer to memory no longer the caller's, which a kernel would then
// write: freed back to the heap, freed behind a stream's copy (RecordStream, FreeAsync), or
// freed while held (its free waiting for the Release). It must refuse them as Free refuses a
// second free (ErrDoubleFree), and still answer for a live buffer however it is used.
func TestFakeDevicePointerFreed(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	s := pubcuda.Stream(r.s)
	live := func(what string, b []byte) {
		t.Helper()
		if dp, err := r.pool.DevicePointer(b); err != nil || dp != pubcuda.DevicePtr(mem.Addr(b)) {
			t.Errorf("DevicePointer of %s: %#x, %v, want %#x", what, dp, err, mem.Addr(b))
		}
	}
	freed := func(what string, b []byte) {
		t.Helper()
		if dp, err := r.pool.DevicePointer(b); !errors.Is(err, pinned.ErrDoubleFree) {
			t.Errorf("DevicePointer of %s: %#x, %v, want ErrDoubleFree", what, dp, err)
		}
	}
	for _, n := range holdSizes {
		d := r.devAlloc(n)
		r.f.Hold(true) // the copies stay queued: deferred buffers stay deferred
		a := r.alloc(n, 1)
		live(fmt.Sprintf("a live %d-byte buffer", n), a)
		live(fmt.Sprintf("a live %d-byte buffer from byte 16", n), a[16:])
		ok(t, "Free", r.pool.Free(a))
		freed(fmt.Sprintf("a %d-byte buffer freed", n), a)

		a = r.alloc(n, 2)
		ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), a, s))
		live(fmt.Sprintf("a %d-byte buffer a copy reads", n), a)
		ok(t, "Free", r.pool.Free(a))
		freed(fmt.Sprintf("a %d-byte buffer freed behind a copy", n), a)

		a = r.alloc(n, 3)
		ok(t, "FreeAsync", r.pool.FreeAsync(a, s))
		freed(fmt.Sprintf("a %d-byte buffer freed with FreeAsync", n), a)

		a = r.alloc(n, 4)
		h, err := r.pool.Hold(a)
		ok(t, "Hold", err)
		live(fmt.Sprintf("a held %d-byte buffer", n), a)
		ok(t, "Free", r.pool.Free(a))
		freed(fmt.Sprintf("a held %d-byte buffer freed", n), a)
		ok(t, "Release", h.Release())
		freed(fmt.Sprintf("a %d-byte buffer freed, then released", n), a)

		r.f.Hold(false)
		ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
		ok(t, "Trim", r.pool.Trim())
		ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	}
	r.finish()
}

// TestFakeDevicePointerBesideHolds: DevicePointer of a live buffer that another goroutine holds
// and releases meanwhile answers every time: a hold, and a Release with no free waiting, leave
// the buffer the caller's (run it with -race too).
func TestFakeDevicePointerBesideHolds(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	const rounds = 2000
	a := r.alloc(4096, 1)
	done := make(chan error, 1)
	go func() {
		for range rounds {
			h, err := r.pool.Hold(a)
			if err == nil {
				err = h.Release()
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range rounds {
		if _, err := r.pool.DevicePointer(a); err != nil {
			t.Fatalf("DevicePointer of a live buffer held and released meanwhile: %v", err)
		}
	}
	ok(t, "Hold and Release", <-done)
	ok(t, "Free", r.pool.Free(a))
	r.finish()
}
