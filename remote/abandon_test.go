package remote

import (
	"context"
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
	b, err := p.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	d := describe(t, r, b)
	hostile.mu.Lock()
	for i := range 2 {
		op := ucx.Op{Ep: hc.ep, Kind: ucx.OpData}
		h := dataHeader{kind: dataGet, conn: hc.peerID, op: uint64(i+1)<<32 | 7, addr: d.addr, n: n, region: d.region, base: d.base, size: d.size}
		h.encode(&op.Header)
		hostile.postAnswer(hc, op, nil, pinned.Hold{})
	}
	hostile.signal()
	hostile.mu.Unlock()
	held := func() int {
		target.mu.Lock()
		defer target.mu.Unlock()
		k := 0
		for i := range target.slots {
			if target.slots[i].hold != (pinned.Hold{}) {
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
	hostile.mu.Lock() // the peer stops reading: its progress waits for the mutex
	defer hostile.mu.Unlock()
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
