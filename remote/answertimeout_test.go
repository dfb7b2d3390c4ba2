package remote

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// TestAnswerTimeout: with Options.AnswerTimeout, a peer that stops reading the answers to its
// gets has its connection failed with ErrPeer once one has waited that long, and the buffer
// the answers were sent from is let go: freed and its pool closed while the peer still reads
// nothing (without it, TestAnswerHoldsItsBuffer: the pool's Close says ErrBusy until the peer
// reads again). A negative AnswerTimeout is refused.
func TestAnswerTimeout(t *testing.T) {
	if _, err := New(Options{AnswerTimeout: -time.Second}); !errors.Is(err, pinmalloc.ErrInvalid) {
		t.Fatalf("New with a negative AnswerTimeout: %v, want ErrInvalid", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hostile, target, _, tr, hc, tc := connectedPair(t, ctx)
	const limit = 200 * time.Millisecond
	target.mu.Lock()
	target.opts.AnswerTimeout = limit
	target.getMax = 32 << 20 // the peer's gets ask for so much (n)
	target.mu.Unlock()
	const n = 32 << 20 // two answers of it fill the sockets: they stay in flight
	b, err := tr.pool.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	d := describe(t, tr, b)
	hostile.mu.Lock()
	for i := range 2 {
		op := ucx.Op{Ep: hc.ep, Kind: ucx.OpData}
		h := dataHeader{kind: dataGet, conn: hc.peerID, op: uint64(i+1)<<32 | 7, addr: d.addr, n: n, region: d.region, base: d.base, size: d.size}
		h.encode(&op.Header)
		hostile.postAnswer(hc, op, nil, localHold{})
	}
	hostile.signal()
	hostile.mu.Unlock()
	inFlight := func() int {
		target.mu.Lock()
		defer target.mu.Unlock()
		held := 0
		for _, lr := range target.byID {
			held += lr.held
		}
		return held
	}
	for inFlight() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the target's answers never went in flight")
		}
		time.Sleep(time.Millisecond)
	}
	hostile.mu.Lock() // the peer stops reading: its progress waits for the mutex
	defer hostile.mu.Unlock()
	stalled := time.Now()
	if err := tr.pool.Free(b); err != nil { // held by the answers: it takes effect once they let go
		t.Fatal(err)
	}
	for inFlight() > 0 || tr.pool.Usage().Live > 0 {
		if time.Since(stalled) > 20*limit {
			t.Fatalf("%d answers in flight, %d buffers live %v after the peer stopped reading (AnswerTimeout %v): connection error %v", inFlight(), tr.pool.Usage().Live, time.Since(stalled), limit, tc.Err())
		}
		time.Sleep(time.Millisecond)
	}
	if tc.Err() == nil {
		t.Skip("the answers were sent before the peer stopped reading: nothing was in flight")
	}
	if err := tc.Err(); !errors.Is(err, ErrPeer) {
		t.Fatalf("the stalled peer's connection: %v, want ErrPeer", err)
	}
	if err := tr.pool.Close(); err != nil {
		t.Fatalf("the pool's Close once the stalled peer's answers timed out: %v", err)
	}
	t.Logf("the answers let go of their buffer %v after the peer stopped reading", time.Since(stalled))
}
