package pinned_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeNodesFreeResliced: Nodes.Free, which says Pool.Free's rules apply, refused a buffer
// resliced to length zero from its start (buf[:0], an I/O read of nothing) as an empty slice,
// ErrNotOwned, where Pool.Free frees it: the buffer stayed live for good.
func TestFakeNodesFreeResliced(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	n, err := pinned.NewNodes(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20})
	ok(t, "NewNodes", err)
	b, err := n.AllocFor(0, 4096)
	ok(t, "AllocFor", err)
	ok(t, "Free(buf[:0])", n.Free(b[:0]))
	ok(t, "Close", n.Close())
}

// TestFakeNodesFreeAfterClose: Nodes.Free once the set's pools are closed and their memory
// released says ErrClosed, as Pool.Free does; it said ErrNotOwned ("in no pool of the set"),
// as if the buffer were never the set's.
func TestFakeNodesFreeAfterClose(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	n, err := pinned.NewNodes(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20})
	ok(t, "NewNodes", err)
	b, err := n.AllocFor(0, 4096)
	ok(t, "AllocFor", err)
	ok(t, "Free", n.Free(b))
	ok(t, "Close", n.Close())
	if err := n.Free(b); !errors.Is(err, pinned.ErrClosed) {
		t.Errorf("Nodes.Free after Close: %v, want ErrClosed", err)
	}
}
