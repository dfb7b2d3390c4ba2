package uvm_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestSpareRefusedAfterFaultKept: spare VRAM the device heap refuses back after a fault (a heap
// with ZeroOnFree, whose clear of the block the driver refuses: the block stays live there) is
// kept by the tier as the spares a capture's refusal keeps: its Close says so (ErrHeldBack)
// and gives it back once the context works again. Before, the tier let go of every such block,
// which the heap counted live for good: neither the tier nor anyone else could free it, and the
// heap's Close failed with ErrLiveBlocks.
func TestSpareRefusedAfterFaultKept(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr, _, heap, _ := fullSpares(t, dev) // 8u of spare VRAM, ZeroOnFree
	spare := tr.Stats().SpareBytes
	f.Fault(t, dev)
	err := tr.Close()
	if !errors.Is(err, uvm.ErrHeldBack) || !errors.Is(err, pinmalloc.ErrDeviceFault) {
		t.Errorf("Close after a fault, the heap refusing the spare VRAM: %v; want "+
			"uvm.ErrHeldBack and pinmalloc.ErrDeviceFault", err)
	}
	if st := tr.Stats(); st.SpareBytes != spare {
		t.Errorf("after the refused give-back: %d bytes of spare VRAM, want %d", st.SpareBytes, spare)
	}
	f.ClearStickyError() // a context that works again, which a real one never does after a fault
	if err := tr.Close(); err != nil && !errors.Is(err, uvm.ErrClosed) {
		t.Errorf("Close once the context works: %v", err)
	}
	if live := heap.Stats().Live; live != 0 {
		t.Errorf("the heap after the tier's Close: %d blocks live, want 0", live)
	}
}
