package remote

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWaitEndsWithItsConnection: with SharedMemory the close of a failed connection's endpoint
// is not forced (UCX cancels nothing there), so the puts that a peer that stalls kept in UCX
// stayed there, and the transfer with them: its Wait, without a deadline, waited as long as the
// peer stalled, after the connection had failed. The transfer ends with the connection now,
// as on one abandoned: its operations UCX still holds are zombie slots that keep its buffer
// held until UCX lets go of them, and the pool closes once they have.
func TestWaitEndsWithItsConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var regs [2]*Registration
	sp := newStalledPair(t, ctx, Options{Mode: ModeMessages}, func(i int, w *Worker) {
		p, err := testPool(nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() }) // after its worker's Close
		if regs[i], err = w.Register(p); err != nil {
			t.Fatal(err)
		}
	})
	ws, c := sp.ws, sp.c
	const n = 4 << 20 // parts far beyond the peer's FIFO: they stay in flight while it stalls
	dst, err := regs[1].pool.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	d, err := regs[1].Describe(dst)
	if err != nil {
		t.Fatal(err)
	}
	src, err := regs[0].pool.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	sp.stall()
	tr := c.NewTransfer()
	if err := tr.Put(src, d); err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	w := ws[0]
	for { // the parts UCX could not hand over stay in flight
		w.mu.Lock()
		stuck := c.dataOps == dataWindow || c.dataOps > 0 && len(w.queue) == 0
		w.mu.Unlock()
		if stuck {
			break
		}
		select {
		case <-tr.Done():
			t.Fatalf("the put to a stalled peer ended: %v", tr.Err())
		case <-ctx.Done():
			t.Fatal("the put never went in flight")
		case <-time.After(time.Millisecond):
		}
	}
	w.mu.Lock()
	w.failConn(c, errors.Join(ErrProtocol, errors.New("the test fails it")))
	w.mu.Unlock()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	err = tr.Wait(wctx)
	wcancel()
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("Wait returned %v, 5 s after its connection failed; want the connection's error", err)
	}
	w.mu.Lock()
	zombies := w.zombies
	w.mu.Unlock()
	if zombies == 0 {
		t.Fatal("no operation UCX still holds keeps the put's buffer held")
	}
	if err := regs[0].pool.Free(src); err != nil {
		t.Fatal(err)
	}
	sp.resume()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := regs[0].pool.Close(); err != nil {
		t.Fatalf("the pool of the put's buffer does not close once the worker has: %v", err)
	}
}
