package pinned_test

import (
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
