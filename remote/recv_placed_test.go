package remote

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// TestRecvWakesWhenItsPutIsDropped: a message of the peer's that came after its put by message
// waits in Recv for the put to be placed; Recv then waits on nothing but the put's end (the
// connection's end does not wake it, the put's does). A connection that failed with the put
// still waiting for its buffer's hold drops the put, and the message is the peer's last, to be
// returned, but the drop woke no Recv: one waiting then (woken by the message, and gone back
// to wait for the put), without a deadline, waited for ever.
func TestRecvWakesWhenItsPutIsDropped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, w2, _, r2, _, c2 := connectedPair(t, ctx)
	buf, err := r2.pool.Alloc(256)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.pool.Free(buf)
	lr, err := w2.regionOf(buf)
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{}) // no round takes the put to hold its buffer
	w2.mu.Lock()
	w2.paused = gate
	w2.mu.Unlock()
	defer func() {
		w2.mu.Lock()
		w2.paused = nil
		w2.mu.Unlock()
		close(gate)
	}()
	w2.mu.Lock()
	ev := ucx.Event{Kind: ucx.EventData, Len: 64, Key: 1 << 60}
	dataHeader{kind: dataPut, conn: c2.id, op: 1<<32 | 3, addr: uint64(mem.Addr(buf)), n: 64,
		region: lr.id, base: uint64(lr.base), size: uint64(lr.size)}.encode(&ev.Header)
	w2.handle(&ev)
	queued := len(w2.unheld)
	want := []byte("after the put")
	w2.message(0, append(header(msgData, c2.id, len(want)), want...))
	select {
	case <-c2.recv: // the message's wake, taken by a Recv that found it waiting for the put
	default:
	}
	w2.recvHook = func() { // Recv has seen its message wait for the put: the put is dropped now
		w2.mu.Lock()
		w2.failConn(c2, errors.Join(ErrProtocol, errors.New("the test fails it")))
		w2.mu.Unlock()
	}
	w2.mu.Unlock()
	if queued != 1 {
		t.Fatalf("%d puts wait for their buffer's hold; want 1", queued)
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	got, err := c2.Recv(rctx)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Recv returned %q, %v; want %q, the message after the dropped put", got, err, want)
	}
}
