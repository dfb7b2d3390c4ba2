package uvm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestPutSparesRefusalSaidOnce: the VRAM of an eviction's completion that the spare VRAM has no
// room for goes back to the device heap; while the heap refuses it (ZeroOnFree during a
// blocking capture), the tier keeps every block as spare, and the error says the refusal once,
// with how many blocks the heap refused. Before, it said the refusal once per block.
func TestPutSparesRefusalSaidOnce(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const u = spareUnit
	tr, _, heap, s := fullSpares(t, dev) // 8u of spare VRAM: full
	hs := filled(t, tr, 4, u/2)          // a size no spare block has: VRAM from the heap
	acquireAll(t, tr, s, uvm.Read, hs)
	var err error
	duringBlockingCapture(t, dev, func() {
		if err = tr.Evict(hs); err == nil {
			err = tr.Sync()
		}
	})
	if !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Fatalf("evicting 4 blocks the spare VRAM has no room for, the heap refusing them: %v; "+
			"want pinmalloc.ErrCapturing", err)
	}
	msg := err.Error()
	if n := strings.Count(msg, "refused"); n != 1 || !strings.Contains(msg, "4 blocks") {
		t.Errorf("the refusal of 4 blocks: %q; want it said once, with the count", msg)
	}
	must(t, tr.Verify())
	if st := tr.Stats(); st.SpareBytes != 8*u+2*u {
		t.Errorf("after the refused give-back: %d bytes of spare VRAM, want %d", st.SpareBytes,
			10*u)
	}
	must(t, tr.Close())
	if live := heap.Stats().Live; live != 0 {
		t.Errorf("the heap after the tier's Close: %d blocks live, want 0", live)
	}
}
