package remote

import (
	"bytes"
	"context"
	"testing"
	"time"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeTransferWaitsForStream: a put from a buffer of a CUDAHost pool into which a copy is
// queued on a CUDA stream (the fake driver holds it back) sends the bytes the copy brings: Put
// waits for the streams recorded on the buffer first (RecordStream's rule), as a copy on
// another stream would.
func TestFakeTransferWaitsForStream(t *testing.T) {
	needUCX(t)
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	pub := cuda.Wrap[*pubcuda.Device](dev)
	src, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Device: 0, Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	heap, err := device.New(pub, device.Options{Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer heap.Close()
	dst, err := testPool(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	w1 := newWorker(t)
	w2 := newWorker(t)
	if _, err := w1.Register(src); err != nil {
		t.Fatal(err)
	}
	reg2, err := w2.Register(dst)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := w2.Address()
	if err != nil {
		t.Fatal(err)
	}
	c, err := w1.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}

	const n = 64 << 10
	s, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = heap.ForgetStream(pubcuda.Stream(s)); _ = dev.StreamDestroy(s) }()
	d, err := heap.Alloc(n, pubcuda.Stream(s))
	if err != nil {
		t.Fatal(err)
	}
	if err := heap.MemsetAsync(d, 0x5C, n, pubcuda.Stream(s)); err != nil {
		t.Fatal(err)
	}
	if err := dev.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	b, err := src.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	clear(b)
	target, err := dst.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := reg2.Describe(target)
	if err != nil {
		t.Fatal(err)
	}
	f.Hold(true) // the copy stays queued
	if err := heap.DtoHAsync(b, d, pubcuda.Stream(s)); err != nil {
		t.Fatal(err)
	}
	if b[0] != 0 {
		t.Fatal("the fake ran the copy at once")
	}
	f.Hold(false)
	if err := c.Put(ctx, b, desc); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(target, bytes.Repeat([]byte{0x5C}, n)) {
		t.Fatal("the put sent the buffer's bytes before the copy queued into it had landed")
	}
	if err := src.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := dst.Free(target); err != nil {
		t.Fatal(err)
	}
	if err := heap.Free(d); err != nil {
		t.Fatal(err)
	}
}

// TestSendAfterPutOrdered: a put by message, then a message on the same connection, without
// waiting for the put: the peer's Recv must not return the message before the put's bytes are
// in place. The target copies a put's bytes after the progress round that received it (once its
// buffer is held, out of the mutex: holdAnswers), and a message received in that round was
// returned by Recv at once, while the copy had not begun. Here both arrive in one round (the
// target's progress waits for the test's lock while they are sent), and the copy is slowed
// (targetHook).
func TestSendAfterPutOrdered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, target, r1, r2, c1, c2 := connectedPair(t, ctx)
	dst := liveBuffer(t, r2, 4096)
	d := describe(t, r2, dst)
	src := liveBuffer(t, r1, 4096)
	fill(src, 11)
	target.mu.Lock()
	target.targetHook = func() { time.Sleep(300 * time.Millisecond) }
	tr := c1.NewTransfer()
	if err := tr.Put(src, d); err != nil {
		target.mu.Unlock()
		t.Fatal(err)
	}
	if err := tr.Start(); err != nil {
		target.mu.Unlock()
		t.Fatal(err)
	}
	err := c1.Send(ctx, []byte("after the put"))
	target.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	m, err := c2.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	target.mu.Lock() // the copy, if done, was made under it
	landed := bytes.Equal(dst, src)
	target.mu.Unlock()
	if !landed {
		t.Fatalf("Recv returned %q, sent after a put on the connection, before the put's bytes were in place", m)
	}
	if err := tr.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}
