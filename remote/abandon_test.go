package remote

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestPoolClosesAfterAbandonedAnswers: over shared memory (no UCX failure handling), a peer
// whose process exits (as its pidfd would say) while the answers to its gets are in flight
// leaves them in UCX, as zombie slots holding their buffers (pinned.Pool.Hold). Once the
// worker's Close has made its last call on UCX's worker, nothing sends them any more (UCX
// moves the bytes of a send over shared memory or TCP only inside a call on the worker), so
// their holds must go: the pool's Close returned ErrBusy for ever after.
func TestPoolClosesAfterAbandonedAnswers(t *testing.T) {
	needUCX(t)
	t.Setenv("UCX_TLS", "sm")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	target, err := New(Options{SharedMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	hostile, err := New(Options{SharedMemory: true})
	if err != nil {
		_ = target.Close()
		t.Fatal(err)
	}
	defer hostile.Close()
	p, err := testPool(nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := target.Register(p)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := target.Address()
	if err != nil {
		t.Fatal(err)
	}
	hc, err := hostile.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := target.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8 << 20 // far beyond the peer's FIFO: the answers stay in flight while it does not read
	target.mu.Lock()
	target.getMax = n // the peer's gets ask for so much (an honest peer's, getPart, fill nothing)
	target.mu.Unlock()
	b, err := p.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	d := describe(t, r, b)
	// The peer asks for the buffer twice and reads nothing after: its progress waits for the
	// mutex, held to the end, while its requests (short messages, which a call on UCX's
	// worker writes into the target's FIFO at once) reach the target.
	hostile.mu.Lock()
	defer hostile.mu.Unlock()
	for i := range 2 {
		op := ucx.Op{Ep: hc.ep, Kind: ucx.OpData}
		h := dataHeader{kind: dataGet, conn: hc.peerID, op: uint64(i+1)<<32 | 7, addr: d.addr, n: n, region: d.region, base: d.base, size: d.size}
		h.encode(&op.Header)
		hostile.postAnswer(hc, op, nil, localHold{})
	}
	hostile.signal()
	held := func() int {
		target.mu.Lock()
		defer target.mu.Unlock()
		k := 0
		for i := range target.slots {
			if target.slots[i].hold != (localHold{}) {
				k++
			}
		}
		return k
	}
	for held() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the target's answers never went in flight")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	target.mu.Lock()
	target.peerExited(tc) // as the pidfd says of a peer that exited
	target.mu.Unlock()
	<-tc.dead
	stuck := held()
	if stuck == 0 {
		t.Skip("the answers were sent before the peer stopped reading: nothing was in flight")
	}
	if err := target.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("the pool's Close after its worker's, with %d answers of an abandoned connection left in UCX: %v", stuck, err)
	}
}

// TestAbandonedTransferKeepsItsBuffer: over shared memory (no UCX failure handling), a
// connection abandoned while UCX still holds a transfer's put or get (the peer reads nothing:
// its FIFO is full, or its answer to an emulated get never comes) ends the transfer with
// ErrPeer, but UCX may still read the local buffer (the rest of a put's fragments) or write
// it (a get's answer) in a later call on the worker. So the buffer stays held in its pool: a
// Free of it waits, and no Alloc hands it out again, until UCX completes the operation (the
// peer reads again) or the worker's Close has made its last call on UCX's worker. The
// transfer's end released the hold at once: the buffer went back to its pool with UCX's
// request on it still in flight.
func TestAbandonedTransferKeepsItsBuffer(t *testing.T) {
	needUCX(t)
	t.Setenv("UCX_TLS", "sm")
	for _, op := range []struct {
		name string
		mode Mode
		get  bool
	}{{"put", ModeAuto, false}, {"put-rma", ModeRMA, false}, {"get-rma", ModeRMA, true}} {
		for _, end := range []string{"completed", "closed"} {
			t.Run(op.name+"/"+end, func(t *testing.T) { abandonedTransfer(t, op.mode, op.get, end == "closed") })
		}
	}
}

func abandonedTransfer(t *testing.T, mode Mode, get, closed bool) {
	p, err := testPool(nil)
	if err != nil {
		t.Fatal(err)
	}
	abandoned(t, mode, get, closed, &abandonedBuffer{p: p})
}

// abandonedMemory is the local memory of an abandoned transfer's case (abandoned): a pool's
// buffer, or a device heap's block (abandon_device_test.go).
type abandonedMemory interface {
	what() string                                   // "buffer", "device block"
	register(t *testing.T, w *Worker)               // its pool or heap with w
	alloc(t *testing.T, n int)                      // the memory of the operation
	add(tx *Transfer, get bool, d Descriptor) error // its put or get on tx
	free() error                                    // its Free
	live() int                                      // the buffers or blocks live
	reused(t *testing.T) bool                       // the memory handed out again: filled, then freed
	close() error                                   // its pool's or heap's Close
}

// abandonedBuffer is abandonedMemory of a pool.
type abandonedBuffer struct {
	p    *pinned.Pool
	mine []byte
}

func (m *abandonedBuffer) what() string { return "buffer" }
func (m *abandonedBuffer) register(t *testing.T, w *Worker) {
	if _, err := w.Register(m.p); err != nil {
		t.Fatal(err)
	}
}
func (m *abandonedBuffer) alloc(t *testing.T, n int) {
	var err error
	if m.mine, err = m.p.Alloc(n); err != nil {
		t.Fatal(err)
	}
}
func (m *abandonedBuffer) add(tx *Transfer, get bool, d Descriptor) error {
	if get {
		return tx.Get(m.mine, d)
	}
	return tx.Put(m.mine, d)
}
func (m *abandonedBuffer) free() error { return m.p.Free(m.mine) }
func (m *abandonedBuffer) live() int   { return int(m.p.Usage().Live) }
func (m *abandonedBuffer) reused(t *testing.T) bool {
	other, err := m.p.Alloc(len(m.mine))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.p.Free(other); err != nil {
			t.Fatal(err)
		}
	}()
	return &other[0] == &m.mine[0]
}
func (m *abandonedBuffer) close() error { return m.p.Close() }

// abandoned runs one case of an abandoned transfer (TestAbandonedTransferKeepsItsBuffer) on
// the local memory m: a put or get of 8 MiB, a peer that stops reading, its connection
// abandoned, then the operation completed (the peer reads again) or the worker closed.
func abandoned(t *testing.T, mode Mode, get, closed bool, m abandonedMemory) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
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
	m.register(t, w)
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
	m.alloc(t, n)
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
	if err := m.add(tx, get, d); err != nil {
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
	if err := m.free(); err != nil {
		t.Fatal(err)
	}
	op := map[bool]string{false: "put", true: "get"}[get]
	if live := m.live(); live != 1 {
		t.Fatalf("%d live after the Free of the %s whose %s UCX still holds, want 1: its hold went with the transfer's end", live, m.what(), op)
	}
	if m.reused(t) {
		t.Fatalf("the %s of a %s UCX still holds was handed out again", m.what(), op)
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
	for m.live() != 0 {
		if ctx.Err() != nil {
			t.Fatalf("%d live once UCX let go of the operation: its hold was kept", m.live())
		}
		time.Sleep(time.Millisecond)
	}
	if !wClosed {
		wClosed = true
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.close(); err != nil {
		t.Fatalf("the Close of the %s's pool or heap after its worker's: %v", m.what(), err)
	}
}

// TestZombieHoldsOnRDMA: at the worker's Close, a zombie slot's hold (an abandoned answer's,
// put's or get's) is let go once UCX's worker is destroyed, or, left alive, where only a call
// on the worker touches the buffer (cpuOnly); one on an RDMA lane stays held, so the buffer's
// Free waits and its pool's Close says it is busy.
func TestZombieHoldsOnRDMA(t *testing.T) {
	p, err := testPool(nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	pa, err := p.Hold(a)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := p.Hold(b)
	if err != nil {
		t.Fatal(err)
	}
	ha, hb := localHold{buf: pa}, localHold{buf: pb}
	w := &Worker{slots: []slot{{kind: slotZombie, hold: ha, cpuOnly: true}, {kind: slotZombie, hold: hb}}}
	held := w.zombieHolds(false)
	if len(held) != 1 || held[0] != ha || w.slots[1].hold != hb {
		t.Fatalf("left alive, zombieHolds let go of %v, want only the cpu-only one's", held)
	}
	for _, x := range [][]byte{a, b} {
		if err := p.Free(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := held[0].Release(); err != nil {
		t.Fatal(err)
	}
	if live := p.Usage().Live; live != 1 {
		t.Fatalf("%d buffers live, want the one on an RDMA lane", live)
	}
	if err := p.Close(); !errors.Is(err, pinned.ErrBusy) {
		t.Fatalf("the pool's Close with a buffer an RDMA lane may still touch: %v, want ErrBusy", err)
	}
	held = w.zombieHolds(true) // destroyed: UCX purged its requests
	if len(held) != 1 || held[0] != hb {
		t.Fatalf("destroyed, zombieHolds let go of %v, want the RDMA one's", held)
	}
	if err := held[0].Release(); err != nil { // the last: the pool's memory goes (Close said so)
		t.Fatal(err)
	}
	if live := p.Usage().Live; live != 0 {
		t.Fatalf("%d buffers live once every hold went", live)
	}
}
