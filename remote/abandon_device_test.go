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

// abandonedDeviceTransfer: over shared memory (no UCX failure handling), a connection abandoned
// while UCX still holds a transfer's put or get of device memory ends the transfer with ErrPeer,
// while UCX may still read the local device block (the rest of a put) or write it (a get's
// bytes). So the block stays held in its heap: its Free returns at once, and the heap, filled to
// the brim, never hands it out again, until UCX completes the operation (the peer reads again)
// or the worker's Close has made its last call on UCX's worker; then the Free takes effect.
// Nothing held device memory before: the Free gave the block back at once, and the next
// allocation of its size got it, with UCX's request on it still in flight.
func abandonedDeviceTransfer(t *testing.T, mode Mode, get, closed bool) {
	needUCX(t)
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetVMM(false) // cuMemAlloc regions: the fake's VMM memory is closed to the CPU, and so to UCX
	t.Setenv("UCX_TLS", "sm")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := device.New(cuda.Wrap[*pubcuda.Device](dev), device.Options{Capacity: 64 << 20, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(Options{SharedMemory: true, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	wClosed := false
	defer func() {
		if !wClosed {
			_ = w.Close()
		}
	}()
	peer, err := New(Options{SharedMemory: true, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
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
	if _, err := peer.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 8 << 20 // far beyond the peer's FIFO: a put stays in flight while the peer does not read
	mine, err := h.Alloc(n, 0)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := q.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	d := describe(t, qr, theirs)

	peer.mu.Lock() // the peer stops reading: its progress waits for the mutex
	stalled := true
	defer func() {
		if stalled {
			peer.mu.Unlock()
		}
	}()
	tx := wc.NewTransfer()
	if get {
		err = tx.GetDevice(mine, n, d)
	} else {
		err = tx.PutDevice(mine, n, d)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Start(); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	sending := false
	for i := range w.slots {
		if s := &w.slots[i]; s.kind == slotOp && s.t == tx && s.lr != nil && s.sending {
			sending = true
		}
	}
	w.peerExited(wc) // as the pidfd says of a peer that exited
	w.mu.Unlock()
	if !sending {
		t.Fatal("UCX completed the operation with the peer not reading: nothing was in flight")
	}
	if err := tx.Wait(ctx); !errors.Is(err, ErrPeer) {
		t.Fatalf("the abandoned transfer ended with %v, want ErrPeer", err)
	}
	zombies := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.zombies
	}
	if zombies() == 0 {
		t.Fatal("the abandoned operation left no zombie slot: UCX completed it, nothing to keep")
	}
	if err := h.Free(mine); err != nil {
		t.Fatal(err)
	}
	what := map[bool]string{false: "put", true: "get"}[get]
	if live := h.Stats().Live; live != 1 {
		t.Errorf("%d blocks live after the Free of the device block whose %s UCX still holds, want 1", live, what)
	}
	others := fillDevice(t, h, n)
	if slices.Contains(others, mine) {
		t.Fatalf("the device block of a %s UCX still holds was handed out again", what)
	}
	for _, p := range others {
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
	}

	if closed { // the peer stays stalled: the operation never completes
		wClosed = true
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	} else { // the peer reads again: UCX completes the operation, and the zombie lets go
		peer.mu.Unlock()
		stalled = false
		for zombies() > 0 {
			if ctx.Err() != nil {
				t.Fatal("UCX never completed the abandoned operation once the peer read again")
			}
			time.Sleep(time.Millisecond)
		}
	}
	for h.Stats().Live != 0 {
		if ctx.Err() != nil {
			t.Fatalf("%d blocks live once UCX let go of the operation: its hold was kept", h.Stats().Live)
		}
		time.Sleep(time.Millisecond)
	}
	if !wClosed {
		wClosed = true
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatalf("the heap's Close after its worker's: %v", err)
	}
}

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
