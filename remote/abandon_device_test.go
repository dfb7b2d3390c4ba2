package remote

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// Device memory on a transfer abandoned (TestAbandonedTransferKeepsItsBuffer for a pool's
// buffer). The fake CUDA driver (internal/fakecuda) keeps device memory in host memory, and
// this machine's UCX has no CUDA transports (RegisterDevice refuses): registerFakeDevice
// registers the device heap's regions with UCX as host memory, which the fake's device memory
// is (its cuMemAlloc memory: its VMM memory is closed to the CPU), so PutDevice and GetDevice
// run the paths of device memory on this worker (the device hold) with UCX's host transports
// under them. Each case is a test of its own: fakecuda runs each test in a child process, which
// runs no subtests.

func TestFakeAbandonedDevicePutCompleted(t *testing.T) {
	abandonedDeviceTransfer(t, ModeAuto, false, false)
}

func TestFakeAbandonedDevicePutClosed(t *testing.T) {
	abandonedDeviceTransfer(t, ModeAuto, false, true)
}

func TestFakeAbandonedDevicePutRMACompleted(t *testing.T) {
	abandonedDeviceTransfer(t, ModeRMA, false, false)
}

func TestFakeAbandonedDevicePutRMAClosed(t *testing.T) {
	abandonedDeviceTransfer(t, ModeRMA, false, true)
}

func TestFakeAbandonedDeviceGetRMACompleted(t *testing.T) {
	abandonedDeviceTransfer(t, ModeRMA, true, false)
}

func TestFakeAbandonedDeviceGetRMAClosed(t *testing.T) {
	abandonedDeviceTransfer(t, ModeRMA, true, true)
}

// registerFakeDevice registers device heap h with w as RegisterDevice does, with UCX's host
// memory type (see above).
func registerFakeDevice(t *testing.T, w *Worker, h *device.Heap) *Registration {
	t.Helper()
	r := &Registration{w: w, heap: h, memType: ucx.MemoryHost, regions: map[uintptr]*localRegion{}}
	if err := w.observe(r, func() error { return h.Arena().Observe(r) }); err != nil {
		t.Fatal(err)
	}
	return r
}

// fillDevice allocates blocks of n bytes on the legacy stream until h is full, and returns them.
func fillDevice(t *testing.T, h *device.Heap, n int) []pubcuda.DevicePtr {
	t.Helper()
	var ps []pubcuda.DevicePtr
	for {
		p, err := h.Alloc(n, 0)
		if errors.Is(err, device.ErrOutOfMemory) || errors.Is(err, heap.ErrOutOfMemory) {
			return ps
		}
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
}

// abandonedDeviceTransfer is an abandoned transfer's case (abandoned) on device memory: the
// block stays held in its heap, so its Free returns at once and the heap, filled to the brim,
// never hands it out again until UCX lets go. Nothing held device memory before: the Free gave
// the block back at once, and the next allocation of its size got it, with UCX's request on it
// still in flight.
func abandonedDeviceTransfer(t *testing.T, mode Mode, get, closed bool) {
	needUCX(t)
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetVMM(false) // cuMemAlloc regions: the fake's VMM memory is closed to the CPU, and so to UCX
	t.Setenv("UCX_TLS", "sm")
	h, err := device.New(cuda.Wrap[*pubcuda.Device](dev), device.Options{Capacity: 64 << 20, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	abandoned(t, mode, get, closed, &abandonedBlock{h: h})
}

// abandonedBlock is abandonedMemory of a device heap.
type abandonedBlock struct {
	h    *device.Heap
	mine pubcuda.DevicePtr
	n    int
}

func (m *abandonedBlock) what() string                     { return "device block" }
func (m *abandonedBlock) register(t *testing.T, w *Worker) { registerFakeDevice(t, w, m.h) }
func (m *abandonedBlock) alloc(t *testing.T, n int) {
	var err error
	if m.mine, err = m.h.Alloc(n, 0); err != nil {
		t.Fatal(err)
	}
	m.n = n
}
func (m *abandonedBlock) add(tx *Transfer, get bool, d Descriptor) error {
	if get {
		return tx.GetDevice(m.mine, m.n, d)
	}
	return tx.PutDevice(m.mine, m.n, d)
}
func (m *abandonedBlock) free() error { return m.h.Free(m.mine) }
func (m *abandonedBlock) live() int   { return int(m.h.Stats().Live) }
func (m *abandonedBlock) reused(t *testing.T) bool {
	others := fillDevice(t, m.h, m.n)
	for _, p := range others {
		if err := m.h.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	return slices.Contains(others, m.mine)
}
func (m *abandonedBlock) close() error { return m.h.Close() }

// TestFakeDeviceTransferHolds: PutDevice and GetDevice hold their device block in its heap
// until the transfer ends (a Free meanwhile is made then), and Reset of a transfer never started
// lets go; a block freed, or a range running past its block, is refused before anything is
// posted.
func TestFakeDeviceTransferHolds(t *testing.T) {
	needUCX(t)
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetVMM(false) // as in abandonedDeviceTransfer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := device.New(cuda.Wrap[*pubcuda.Device](dev), device.Options{Capacity: 64 << 20, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	w, peer := newWorker(t), newWorker(t)
	registerFakeDevice(t, w, h)
	q, err := testPool(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	qr, err := peer.Register(q)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := peer.Address()
	if err != nil {
		t.Fatal(err)
	}
	wc, err := w.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	const n = 64 << 10
	theirs, err := q.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	d := describe(t, qr, theirs)
	mine, err := h.Alloc(n, 0)
	if err != nil {
		t.Fatal(err)
	}
	keep, err := h.Alloc(n, 0) // its region stays mapped once mine is freed
	if err != nil {
		t.Fatal(err)
	}

	tx := wc.NewTransfer()
	if err := tx.PutDevice(mine, n, d); err != nil {
		t.Fatal(err)
	}
	if err := tx.GetDevice(mine+n/2, n/2, d); err != nil { // an interior pointer holds its block
		t.Fatal(err)
	}
	if err := h.Free(mine); err != nil {
		t.Fatal(err)
	}
	if live := h.Stats().Live; live != 2 {
		t.Errorf("%d blocks live after the Free of a block a transfer holds, want 2", live)
	}
	if err := tx.Start(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if live := h.Stats().Live; live != 1 {
		t.Errorf("%d blocks live once the transfer ended, want 1: its holds were kept", live)
	}
	if err := tx.Reset(); err != nil {
		t.Fatal(err)
	}

	if err := tx.PutDevice(mine, n, d); !errors.Is(err, ErrNotRegistered) || !errors.Is(err, heap.ErrDoubleFree) {
		t.Errorf("PutDevice of a freed block = %v, want ErrNotRegistered and heap.ErrDoubleFree", err)
	}
	if err := tx.PutDevice(keep+1, n, d); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("PutDevice of a range past its block = %v, want ErrOutOfRange", err)
	}
	if tx.Len() != 0 {
		t.Fatalf("%d operations added by refused calls", tx.Len())
	}
	if err := tx.GetDevice(keep, n, d); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(keep); err != nil {
		t.Fatal(err)
	}
	if err := tx.Reset(); err != nil { // never started: its holds go, and the Free with them
		t.Fatal(err)
	}
	if live := h.Stats().Live; live != 0 {
		t.Errorf("%d blocks live after Reset of a transfer never started, want 0", live)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}
