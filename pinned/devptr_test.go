package pinned_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
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
	for what, in := range map[string][]byte{"Go memory": make([]byte, 64), "another pool's buffer": other} {
		if _, err := p.DevicePointer(in); !errors.Is(err, pinned.ErrNotOwned) || errors.Is(err, pinned.ErrInvalidOptions) {
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
