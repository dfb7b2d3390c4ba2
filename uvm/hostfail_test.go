package uvm_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestHostPoolDriverFailureNotFull: a host buffer the pool cannot commit because the driver
// refuses for a cause other than memory (CUDA_ERROR_NOT_PERMITTED from cuMemCreate) is not a
// full pool: the error carries the driver's code, does not match ErrHostFull, names the block
// by its handle, and the tier drops no host copy of its clean blocks over it. Before, the tier
// took any refusal of the pool's for a full one: it dropped the clean block's host copy, took
// its room and said nothing of the driver's failure (or, with no copy to drop, ErrHostFull).
// The block then gets its buffer once the driver works.
func TestHostPoolDriverFailureNotFull(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 << 10
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20})
	s := stream(t, dev)
	// A clean block on the device, with a host copy in the pool's first granule: one the tier
	// would drop for room.
	clean := filled(t, tr, 1, n)[0]
	_, err := tr.Acquire(clean, s, uvm.Read)
	must(t, err)
	must(t, tr.Release(clean, s))
	// The next commit of host memory fails: blocks written on the host one after another,
	// until one needs a new granule of the pool.
	f.FailAfter(fakecuda.CallCreate, 0, fakecuda.ResultNotPermitted)
	var more []uvm.Handle
	var h uvm.Handle
	for range 64 { // 4 MiB: past the pool's first 2 MiB granule
		h, err = tr.Alloc(n)
		must(t, err)
		if _, err = tr.AcquireHost(h, uvm.Write); err != nil {
			break
		}
		must(t, tr.ReleaseHost(h))
		more = append(more, h)
	}
	if code, ok := cuda.ResultCode(err); !ok || code != fakecuda.ResultNotPermitted || errors.Is(err, uvm.ErrHostFull) {
		t.Fatalf("AcquireHost whose host commit the driver refuses (not for memory): %v (code %d, ErrHostFull %v); want code %d, not ErrHostFull (nil: the failure hidden by a host copy dropped)",
			err, code, errors.Is(err, uvm.ErrHostFull), fakecuda.ResultNotPermitted)
	}
	if want := fmt.Sprintf("block %#x:", uint64(h)); !strings.Contains(err.Error(), want) {
		t.Errorf("the error does not name the block (%q): %v", want, err)
	}
	if st := tr.Stats(); st.HostCopiesDropped != 0 {
		t.Errorf("%d host copies dropped for room that was there", st.HostCopiesDropped)
	}
	b, err := tr.AcquireHost(h, uvm.Write) // the driver works again
	must(t, err)
	copy(b, pattern(7, n))
	must(t, tr.ReleaseHost(h))
	b, err = tr.AcquireHost(clean, uvm.Read)
	must(t, err)
	if !bytes.Equal(b, pattern(0, n)) {
		t.Errorf("the clean block's host bytes: %#x at 0, want %#x", b[0], pattern(0, n)[0])
	}
	must(t, tr.ReleaseHost(clean))
	for _, hd := range append(more, clean, h) {
		must(t, tr.Free(hd))
	}
}
