package uvm_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// cleanBlock makes a tier of a 1 MiB budget on dev, and a block of n bytes of it, filled with
// pattern(0), on the device and clean (its host copy valid), read on a new stream s of dev's,
// with every transfer done; it returns the tier, the block, its device address and s.
func cleanBlock(t *testing.T, dev *icuda.Device, n int) (*uvm.Tier, uvm.Handle, cuda.DevicePtr, cuda.Stream) {
	t.Helper()
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20})
	s := stream(t, dev)
	h := filled(t, tr, 1, n)[0]
	p := acquireAll(t, tr, s, uvm.Read, []uvm.Handle{h})[0]
	must(t, tr.Sync())
	return tr, h, p, s
}

// TestFreeAfterFaultHoldsMemoryBack: Free of a block on the device, with a host copy, after a
// kernel faulted (the context's sticky error: the driver refuses the D2H stream's waits and the
// CPU's) frees the block, keeps its VRAM and host buffer out of use, counts them and says so
// with ErrHeldBack; Close then keeps them, with what holds them, and says so, and a later Close
// gives everything back once the device synchronizes. Before, Free returned the driver's error
// alone, Stats showed nothing held, and the memory was lost to the tier: Close found its pool
// and heap with live memory, left them open for good (the fake's leak check named their
// reservations) and said only "buffers still live".
func TestFreeAfterFaultHoldsMemoryBack(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 * kib
	tr, h, _, _ := cleanBlock(t, dev, n)
	host, err := tr.AcquireHost(h, uvm.Read)
	must(t, err)
	heldHost := mem.Addr(host)
	must(t, tr.ReleaseHost(h))

	f.Fault(t, dev)
	err = tr.Free(h)
	if !errors.Is(err, uvm.ErrHeldBack) || !errors.Is(err, pinmalloc.ErrRefused) {
		t.Fatalf("Free after a kernel faulted: %v; want uvm.ErrHeldBack", err)
	}
	if code, _ := cuda.ResultCode(err); code != fakecuda.ResultIllegalAddress {
		t.Fatalf("Free after a kernel faulted: %v; want the driver's error in the chain", err)
	}
	st := tr.Stats()
	if st.HeldBackDeviceBytes != n || st.HeldBackHostBytes != n || st.LiveBytes != 0 || st.DeviceBytes != 0 || st.HostHeldBytes != 0 {
		t.Fatalf("after the Free: %d bytes of VRAM and %d of host buffers held back, %d live, %d on the device, %d of host buffers held; want %d, %d, 0, 0, 0",
			st.HeldBackDeviceBytes, st.HeldBackHostBytes, st.LiveBytes, st.DeviceBytes, st.HostHeldBytes, n, n)
	}
	must(t, tr.Verify())
	if err := tr.Free(h); !errors.Is(err, uvm.ErrInvalidHandle) {
		t.Fatalf("second Free of the block: %v; want uvm.ErrInvalidHandle (the block is freed)", err)
	}

	// Its host buffer is not handed to the next block (a copy of the faulted context's may still
	// land in it, as far as the tier can tell).
	next, err := tr.Alloc(n)
	must(t, err)
	b, err := tr.AcquireHost(next, uvm.Write)
	must(t, err)
	if mem.Addr(b) == heldHost {
		t.Fatalf("the next block was given the host buffer %#x held back", heldHost)
	}
	must(t, tr.ReleaseHost(next))

	err = tr.Close()
	if !errors.Is(err, uvm.ErrHeldBack) || !strings.Contains(err.Error(), "64 KiB of VRAM and 64 KiB of host buffers") {
		t.Fatalf("Close with memory held back: %v; want uvm.ErrHeldBack naming 64 KiB of VRAM and 64 KiB of host buffers", err)
	}
	if _, err := tr.Alloc(n); !errors.Is(err, uvm.ErrClosed) {
		t.Fatalf("Alloc after a Close that kept memory: %v; want uvm.ErrClosed", err)
	}
	if st := tr.Stats(); st.Released || st.HeldBackDeviceBytes != n {
		t.Errorf("after a Close that kept memory: Released %v, %d bytes of VRAM held back; want false, %d",
			st.Released, st.HeldBackDeviceBytes, n)
	}
	if live := dev.Stats(); live.Reservations == 0 || live.Streams == 0 {
		t.Fatalf("after a Close that kept memory held back, the device has %+v live; want the tier's heap, pool and streams kept", live)
	}

	f.ClearStickyError() // a context that works again, which a real one never does after a fault
	must(t, tr.Close())
	if !tr.Stats().Released {
		t.Error("Stats.Released false after the Close that gave everything back")
	}
	if err := tr.Close(); !errors.Is(err, uvm.ErrClosed) {
		t.Fatalf("Close after the Close that gave everything back: %v; want uvm.ErrClosed", err)
	}
}

// TestSyncGivesBackHeldMemory: memory held back by a Free after a fault is given back by the
// first Sync whose synchronize of the device succeeds: the VRAM becomes spare for the next
// restore, the host buffer goes back to the pool, and Stats no longer counts them.
func TestSyncGivesBackHeldMemory(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 * kib
	tr, h, p, s := cleanBlock(t, dev, n)

	f.Fault(t, dev)
	if err := tr.Free(h); !errors.Is(err, uvm.ErrHeldBack) {
		t.Fatalf("Free after a kernel faulted: %v; want uvm.ErrHeldBack", err)
	}
	if err := tr.Sync(); !errors.Is(err, uvm.ErrHeldBack) {
		t.Fatalf("Sync while the context has a sticky error: %v; want uvm.ErrHeldBack", err)
	}
	if st := tr.Stats(); st.HeldBackDeviceBytes != n || st.HeldBackHostBytes != n {
		t.Fatalf("after a failed Sync: %d bytes of VRAM and %d of host buffers held back; want %d of each", st.HeldBackDeviceBytes, st.HeldBackHostBytes, n)
	}

	f.ClearStickyError()
	must(t, tr.Sync())
	st := tr.Stats()
	if st.HeldBackDeviceBytes != 0 || st.HeldBackHostBytes != 0 || st.SpareBytes != n {
		t.Fatalf("after a Sync that synchronized: %d bytes of VRAM and %d of host buffers held back, %d spare; want 0, 0, %d",
			st.HeldBackDeviceBytes, st.HeldBackHostBytes, st.SpareBytes, n)
	}
	must(t, tr.Verify())
	next := filled(t, tr, 1, n)[0]
	if q := acquireAll(t, tr, s, uvm.Read, []uvm.Handle{next})[0]; q != p {
		t.Fatalf("the next block came to %#x, not to the VRAM %#x given back", q, p)
	}
	must(t, tr.Free(next))
}

// TestFailedRestoreHoldsMemoryBack: a restore that fails once its copies were tried gives its VRAM
// back behind the H2D stream; when the driver refuses both the batch's event and a synchronize of
// that stream (a context with a sticky error, where a GPU refuses every call, as the fake does),
// copies into the VRAM may still run: it is held back. It went to the spare VRAM, for the next
// restore or the heap's other users. Once the device synchronizes, Sync gives it back.
func TestFailedRestoreHoldsMemoryBack(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 * kib
	tr, h, _, s := cleanBlock(t, dev, n)
	must(t, tr.Evict([]uvm.Handle{h}))
	must(t, tr.Sync())
	if st := tr.Stats(); st.SpareBytes != n || st.HostBytes != n {
		t.Fatalf("after the eviction: %d bytes of spare VRAM, %d on the host only; want %d of each", st.SpareBytes, st.HostBytes, n)
	}

	f.Fault(t, dev)
	if _, err := tr.Acquire(h, s, uvm.Read); err == nil {
		t.Fatal("Acquire of a block on the host succeeded after a kernel faulted")
	}
	st := tr.Stats()
	if st.SpareBytes != 0 || st.HeldBackDeviceBytes != n || st.HostBytes != n {
		t.Fatalf("after the failed restore: %d bytes of spare VRAM, %d held back, %d on the host only; want 0, %d, %d",
			st.SpareBytes, st.HeldBackDeviceBytes, st.HostBytes, n, n)
	}
	must(t, tr.Verify())

	f.ClearStickyError()
	must(t, tr.Sync())
	if st := tr.Stats(); st.SpareBytes != n || st.HeldBackDeviceBytes != 0 {
		t.Fatalf("after a Sync that synchronized: %d bytes of spare VRAM, %d held back; want %d, 0", st.SpareBytes, st.HeldBackDeviceBytes, n)
	}
	p, err := tr.Acquire(h, s, uvm.Read)
	must(t, err)
	must(t, tr.Release(h, s))
	if got := readDev(t, dev, s, p, n); !bytes.Equal(got, pattern(0, n)) {
		t.Fatalf("the block restored after the fault: %#x at 0, want %#x", got[0], pattern(0, n)[0])
	}
	must(t, tr.Free(h))
}

// TestHeldBackSaysDriverErrorOnce: after a kernel faulted, the Free of a block on the device
// and the AcquireHost for writing that drops a block's device copy (each a retire whose waits
// the driver refuses, on the D2H stream and then on the CPU, with the same sticky error) say
// the driver's error once, and keep it in the chain. Before, each said
// CUDA_ERROR_ILLEGAL_ADDRESS twice: the queued wait's refusal and the CPU wait's, joined.
func TestHeldBackSaysDriverErrorOnce(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 * kib
	tr, h, _, s := cleanBlock(t, dev, n)
	h2 := filled(t, tr, 1, n)[0]
	acquireAll(t, tr, s, uvm.Read, []uvm.Handle{h2})
	must(t, tr.Sync())

	f.Fault(t, dev)
	_, herr := tr.AcquireHost(h2, uvm.Write)
	for what, err := range map[string]error{"Free": tr.Free(h), "AcquireHost for writing": herr} {
		if code, _ := cuda.ResultCode(err); code != fakecuda.ResultIllegalAddress {
			t.Errorf("%s after a kernel faulted: %v; want the driver's error in the chain", what, err)
		}
		if n := strings.Count(fmt.Sprint(err), "CUDA_ERROR_ILLEGAL_ADDRESS"); n != 1 {
			t.Errorf("%s after a kernel faulted: %v; want the driver's error said once, not %d times", what, err, n)
		}
	}
	f.ClearStickyError()
}
