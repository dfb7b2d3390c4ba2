package remote

import (
	"context"
	"testing"
	"time"
)

// TestDataWindow: a worker whose MaxInFlight is above dataWindow keeps no more than dataWindow
// puts and gets by message in flight on one connection, so that an honest peer never has more
// answers due than its target queues (maxQueuedAnswers): the rest of a transfer waits for
// earlier operations, and the transfer still completes. Before the window, a worker of
// MaxInFlight 1<<20 posted them all, and a target bounding its queue at less failed it.
func TestDataWindow(t *testing.T) {
	needUCX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w1, err := New(Options{MaxInFlight: 2 * dataWindow})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w1.Close() })
	w2 := newWorker(t)
	p1, err := testPool(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p1.Close() })
	r1, err := w1.Register(p1)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := testPool(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p2.Close() })
	r2, err := w2.Register(p2)
	if err != nil {
		t.Fatal(err)
	}
	l, err := w2.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c1, err := w1.Connect(ctx, l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c2, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src := liveBuffer(t, r1, 64)
	d := describe(t, r2, liveBuffer(t, r2, 64))
	tr := c1.NewTransfer()
	n := dataWindow + 100
	for i := range n {
		di, err := d.Slice(i%64, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Put(src[i%64:i%64+1], di); err != nil {
			t.Fatal(err)
		}
	}
	w2.mu.Lock() // the target answers nothing meanwhile
	err = tr.Start()
	w1.mu.Lock()
	remote := 0
	for i := range w1.slots {
		if s := &w1.slots[i]; s.kind == slotOp && s.c == c1 && s.remote {
			remote++
		}
	}
	w1.mu.Unlock()
	w2.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if remote > dataWindow {
		t.Errorf("%d puts by message in flight on one connection, want %d at most", remote, dataWindow)
	}
	if err := tr.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c2.Err(); err != nil {
		t.Fatalf("the target's connection: %v", err)
	}
}
