package uvm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestForeignHandle: a handle of one tier, given to another, is refused with ErrInvalidHandle
// by every call that takes one, and changes nothing there. Before, every tier numbered its
// slots' generations from 1, so the first block of one tier had the handle of the first block
// of any other: a Free of tier a's block on tier b freed b's block, which b's user still held.
// The error says the handle is not b's; it said "(freed)", which b never did.
func TestForeignHandle(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 * kib
	a := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	b := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s := stream(t, dev)
	ha := filled(t, a, 2, n)
	hb := filled(t, b, 2, n)
	must(t, a.Free(ha[0])) // a's slot 0 one generation on: its handles still b's own
	freed := ha[0]
	ha[0] = allocN(t, a, 1, n)[0]
	err := a.Free(freed)
	if !errors.Is(err, uvm.ErrInvalidHandle) || !strings.Contains(err.Error(), "(freed)") {
		t.Errorf("Free on tier a of a's freed handle %v: %v; want uvm.ErrInvalidHandle, saying it "+
			"was freed", freed, err)
	}
	for _, h := range ha {
		for name, err := range map[string]error{
			"Free":        b.Free(h),
			"Release":     b.Release(h, s),
			"ReleaseHost": b.ReleaseHost(h),
			"Evict":       b.Evict([]uvm.Handle{h}),
			"Prefetch":    b.Prefetch([]uvm.Handle{h}, s),
			"Acquire":     func() error { _, err := b.Acquire(h, s, uvm.Read); return err }(),
			"AcquireHost": func() error { _, err := b.AcquireHost(h, uvm.Read); return err }(),
		} {
			if !errors.Is(err, uvm.ErrInvalidHandle) {
				t.Errorf("%s on tier b of tier a's handle %v: %v; want uvm.ErrInvalidHandle", name, h, err)
			} else if !strings.Contains(err.Error(), "not a block of this tier") {
				t.Errorf("%s on tier b of tier a's handle %v: %v; want it said not b's", name, h, err)
			}
		}
	}
	if st := b.Stats(); st.Blocks != 2 || st.Frees != 0 || st.DeviceBytes != 0 || st.HostBytes != 2*n {
		t.Errorf("tier b after calls with tier a's handles: %d blocks, %d freed, %d bytes on the device, %d on the host; want 2, 0, 0, %d",
			st.Blocks, st.Frees, st.DeviceBytes, st.HostBytes, 2*n)
	}
	checkBlocks(t, b, hb, []byte{0, 1}, n)
}
