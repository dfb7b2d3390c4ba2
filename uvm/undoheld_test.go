package uvm_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestAbortedRestoreAfterFaultHoldsHostBuffer: a restore whose Mover queued a copy from a
// block's host buffer and then failed, when the driver refuses both the batch's event and a
// synchronize of the H2D stream (a kernel faulted after the copy was queued: the sticky error),
// leaves the block on the host with a buffer that copy may still read, with no batch to order
// its reuse after. The Free of the block then holds that buffer back (ErrHeldBack) rather than
// give it to the pool, whose next block (the pool is full) would be handed it under the copy;
// a Sync whose synchronize of the device succeeds gives it back. Before, the Free gave it to
// the pool at once, and the next block got it.
func TestAbortedRestoreAfterFaultHoldsHostBuffer(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = abortBlock
	tr, m, a, s := dirtyOnFullPool(t, dev)
	must(t, tr.Evict([]uvm.Handle{a}))
	must(t, tr.Sync())

	m.fail, m.fault = true, func() { f.Fault(t, dev) }
	if _, err := tr.Acquire(a, s, uvm.Read); err == nil {
		t.Fatal("an Acquire whose restore failed after a fault succeeded")
	}
	if st := tr.Stats(); st.HeldBackDeviceBytes != n || st.HostBytes != n {
		t.Fatalf("after the failed restore: %d bytes of VRAM held back, %d on the host only; "+
			"want %d of each (the test's premise)", st.HeldBackDeviceBytes, st.HostBytes, n)
	}
	if err := tr.Free(a); !errors.Is(err, uvm.ErrHeldBack) {
		t.Fatalf("Free of a block whose failed restore may still read its host buffer: %v; "+
			"want uvm.ErrHeldBack", err)
	}
	if st := tr.Stats(); st.HeldBackHostBytes != n || st.HostHeldBytes != 0 {
		t.Fatalf("after the Free: %d bytes of host buffers held back, %d held by blocks; "+
			"want %d, 0", st.HeldBackHostBytes, st.HostHeldBytes, n)
	}
	must(t, tr.Verify())
	b, err := tr.Alloc(n)
	must(t, err)
	if _, err := tr.AcquireHost(b, uvm.Write); !errors.Is(err, uvm.ErrHostFull) {
		t.Fatalf("AcquireHost with the pool's one buffer held back: %v; want uvm.ErrHostFull", err)
	}

	f.ClearStickyError()
	must(t, tr.Sync())
	if st := tr.Stats(); st.HeldBackHostBytes != 0 || st.HeldBackDeviceBytes != 0 {
		t.Fatalf("after a Sync that synchronized: %d bytes of host buffers and %d of VRAM held "+
			"back; want 0", st.HeldBackHostBytes, st.HeldBackDeviceBytes)
	}
	_, err = tr.AcquireHost(b, uvm.Write)
	must(t, err)
	must(t, tr.ReleaseHost(b))
	must(t, tr.Free(b))
}
