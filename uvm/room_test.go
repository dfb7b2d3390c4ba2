package uvm_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// sharedRoomRig makes a device of 32 MiB, a device heap of a larger capacity shared by a tier
// and another user, whose pressure hook before the tier's counts its calls, and 16 dirty blocks
// of 256 KiB on the device, one freed since (its VRAM spare). It returns the tier, the heap,
// the other user's stream and the count of the calls of the hook the tier replaced.
func sharedRoomRig(t *testing.T, f *fakecuda.Driver, dev *icuda.Device) (*uvm.Tier, *device.Heap, cuda.Stream, *int) {
	t.Helper()
	const size, n = 256 * kib, 16
	f.SetMemory(0, 32<<20)
	prevCalls := new(int)
	h, err := device.New(public(dev), device.Options{Capacity: 1 << 30, Align: 256,
		Pressure: func(int, cuda.Stream) bool { *prevCalls++; return false }})
	must(t, err)
	t.Cleanup(func() { must(t, h.Close()) })
	tr := newTier(t, dev, uvm.Options{DeviceBudget: n * size, Heap: h})
	s, su := stream(t, dev), stream(t, dev)
	var hs []uvm.Handle
	for i := range n {
		x, err := tr.Alloc(size)
		must(t, err)
		p, err := tr.Acquire(x, s, uvm.Write)
		must(t, err)
		writeDev(t, dev, s, p, pattern(byte(i), size))
		must(t, tr.Release(x, s))
		hs = append(hs, x)
	}
	must(t, tr.Free(hs[0]))
	must(t, tr.Sync())
	t.Cleanup(func() {
		for _, x := range hs[1:] {
			must(t, tr.Free(x))
		}
	})
	return tr, h, su, prevCalls
}

// TestRelieveRefusesBadRequests: the pressure hook asked for n bytes of zero or less (a caller's
// mistake: Relieve is exported to make room ahead of an allocation), or for more than the heap
// could ever hold (its capacity, or the device's memory: here another user's Alloc of 48 MiB
// on a device of 32), does nothing and says false. It took n < 0 as a request for 0 bytes: it
// gave the tier's spare VRAM back and said true (the heap would retry for nothing); an
// impossible request evicted every block of the tier, then the hook the tier replaced was asked
// too, and the Alloc failed all the same.
func TestRelieveRefusesBadRequests(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr, h, su, prevCalls := sharedRoomRig(t, f, dev)
	before := tr.Stats()
	if before.SpareBytes == 0 {
		t.Fatalf("no spare VRAM: the test's premise")
	}
	for _, n := range []int{-1, 0, 1 << 40} {
		if tr.Relieve(n, su) {
			t.Errorf("Relieve(%d) said it gave VRAM back", n)
		}
	}
	if _, err := h.Alloc(48<<20, su); !errors.Is(err, device.ErrOutOfMemory) {
		t.Errorf("Alloc of 48 MiB on a device of 32: %v, want ErrOutOfMemory", err)
	}
	st := tr.Stats()
	if out := st.Out[uvm.CauseHeapPressure]; out.Blocks != 0 || st.DeviceBytes != before.DeviceBytes ||
		st.SpareBytes != before.SpareBytes {
		t.Errorf("bad or impossible requests evicted %d blocks (device bytes %d -> %d, spare %d -> %d)",
			out.Blocks, before.DeviceBytes, st.DeviceBytes, before.SpareBytes, st.SpareBytes)
	}
	if *prevCalls != 0 {
		t.Errorf("the hook the tier replaced was asked %d times for requests no eviction serves", *prevCalls)
	}
	// A request that fits is still served.
	p, err := h.Alloc(30<<20, su)
	must(t, err)
	if st := tr.Stats(); st.Out[uvm.CauseHeapPressure].Blocks == 0 {
		t.Errorf("an Alloc that fits once the tier evicts evicted nothing: %+v", st)
	}
	must(t, h.Free(p))
}

// TestMakeRoomErrors: MakeRoom, Relieve for a caller that wants to know why, refuses n of zero or
// less (ErrInvalidOptions) and n more than the heap could ever hold (ErrTooLarge) and changes
// nothing; a request it can serve evicts and returns nil, without asking the hook the tier
// replaced; with nothing left to give it returns ErrAllPinned.
func TestMakeRoomErrors(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr, _, _, prevCalls := sharedRoomRig(t, f, dev)
	before := tr.Stats()
	for _, c := range []struct {
		n    int
		want error
	}{{-1, uvm.ErrInvalidOptions}, {0, uvm.ErrInvalidOptions}, {64 << 20, uvm.ErrTooLarge}, {1 << 40, uvm.ErrTooLarge}} {
		if err := tr.MakeRoom(c.n); !errors.Is(err, c.want) {
			t.Errorf("MakeRoom(%d) = %v, want %v", c.n, err, c.want)
		}
	}
	if st := tr.Stats(); st.DeviceBytes != before.DeviceBytes || st.SpareBytes != before.SpareBytes {
		t.Errorf("refused requests changed the tier: device bytes %d -> %d, spare %d -> %d",
			before.DeviceBytes, st.DeviceBytes, before.SpareBytes, st.SpareBytes)
	}
	must(t, tr.MakeRoom(32<<20)) // every block
	if st := tr.Stats(); st.DeviceBytes != 0 || st.SpareBytes != 0 {
		t.Errorf("MakeRoom of all the device: %d bytes on the device, %d spare; want 0", st.DeviceBytes, st.SpareBytes)
	}
	if err := tr.MakeRoom(1 << 20); !errors.Is(err, uvm.ErrAllPinned) {
		t.Errorf("MakeRoom with nothing left to give = %v, want ErrAllPinned", err)
	}
	if *prevCalls != 0 {
		t.Errorf("MakeRoom asked the hook the tier replaced %d times", *prevCalls)
	}
}
