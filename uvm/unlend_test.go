package uvm_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestAcquireWriteUnlendFailsAfterFault: an Acquire for writing of a block on the device whose
// host buffer Go had (AcquireHost) lets go of that buffer behind the tier's copies; when the
// driver refuses both the D2H stream's batch and the CPU's wait (a kernel faulted: the sticky
// error), the Acquire fails with the driver's error and changes nothing: the block keeps its
// buffer and its valid host copy, is not acquired, and no memory is held back. Before, the
// Acquire succeeded, the buffer was held back in silence (Stats counted it), and only a later
// Sync or Close said ErrHeldBack.
func TestAcquireWriteUnlendFailsAfterFault(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 * kib
	tr, h, _, s := cleanBlock(t, dev, n)
	_, err := tr.AcquireHost(h, uvm.Read)
	must(t, err)
	must(t, tr.ReleaseHost(h))

	f.Fault(t, dev)
	_, err = tr.Acquire(h, s, uvm.Write)
	if code, _ := cuda.ResultCode(err); code != fakecuda.ResultIllegalAddress {
		t.Fatalf("Acquire for writing of a block whose host buffer was lent, after a kernel "+
			"faulted: %v; want the driver's error", err)
	}
	st := tr.Stats()
	if st.HeldBackHostBytes != 0 || st.HostHeldBytes != n || st.AcquiredBytes != 0 {
		t.Fatalf("after the failed Acquire: %d bytes of host buffers held back, %d held, %d "+
			"acquired; want 0, %d, 0", st.HeldBackHostBytes, st.HostHeldBytes, st.AcquiredBytes, n)
	}
	must(t, tr.Verify())
	if err := tr.Release(h, s); !errors.Is(err, uvm.ErrNotAcquired) {
		t.Fatalf("Release after the failed Acquire: %v; want uvm.ErrNotAcquired", err)
	}

	f.ClearStickyError()
	must(t, tr.Sync())
	acquireAll(t, tr, s, uvm.Write, []uvm.Handle{h})
	must(t, tr.Sync())
	if st := tr.Stats(); st.HeldBackHostBytes != 0 || st.HostHeldBytes != 0 {
		t.Fatalf("after the Acquire once the device works: %d bytes of host buffers held back, "+
			"%d held; want 0, 0", st.HeldBackHostBytes, st.HostHeldBytes)
	}
	must(t, tr.Free(h))
}
