package remote

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// TestOneProcess connects two workers of this process both ways (by listener, and by worker
// address), moves a buffer with a put and a get, exchanges messages, and closes a connection,
// whose peer then reads ErrClosed.
func TestOneProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w1, w2, r1, r2, c1, c2 := connectedPair(t, ctx)
	p1, p2 := r1.pool, r2.pool
	b1, err := p1.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := p2.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b1 {
		b1[i] = byte(i * 3)
	}
	d, err := r2.Describe(b2)
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Put(ctx, b1, d); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1, b2) {
		t.Fatal("put: differ")
	}
	clear(b1)
	if err := c1.Get(ctx, b1, d); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1, b2) {
		t.Fatal("get: differ")
	}
	if err := c1.Send(ctx, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	m, err := c2.Recv(ctx)
	if err != nil || string(m) != "hi" {
		t.Fatal(string(m), err)
	}
	// Dial by address.
	a, err := w1.Address()
	if err != nil {
		t.Fatal(err)
	}
	c3, err := w2.Dial(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	c4, err := w1.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c3.Send(ctx, []byte("yo")); err != nil {
		t.Fatal(err)
	}
	m, err = c4.Recv(ctx)
	if err != nil || string(m) != "yo" {
		t.Fatal(string(m), err)
	}
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Recv(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after the peer's Close: %v", err)
	}
	if err := errors.Join(p1.Free(b1), p2.Free(b2)); err != nil {
		t.Fatal(err)
	}
}

// TestIdleWorkerSleeps: workers with a connection open and nothing to do sleep on their event
// fd: a few wake-ups a second (UCX's keepalive runs inside progress), and next to no CPU.
func TestIdleWorkerSleeps(t *testing.T) {
	needUCX(t)
	w1, w2 := newWorker(t), newWorker(t)
	addr, err := w2.Address()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w1.Dial(t.Context(), addr); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the handshake's last messages
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	wake := w1.Stats().Wakeups + w2.Stats().Wakeups
	time.Sleep(500 * time.Millisecond)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	woke := w1.Stats().Wakeups + w2.Stats().Wakeups - wake
	t.Logf("two idle workers over 500 ms: %d wake-ups, %v of CPU", woke, cpu)
	if woke > 30 || cpu > 100*time.Millisecond {
		t.Fatalf("idle workers woke %d times and took %v of CPU in 500 ms: they poll", woke, cpu)
	}
}

// connectedPair returns two workers of this process, each with a pool registered, and a
// connection from the first to the second (c1) with its accepted end (c2).
func connectedPair(t testing.TB, ctx context.Context) (w1, w2 *Worker, r1, r2 *Registration, c1, c2 *Conn) {
	t.Helper()
	needUCX(t)
	w1, w2 = newWorker(t), newWorker(t)
	for _, w := range []*Worker{w1, w2} {
		p, err := testPool(nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		r, err := w.Register(p)
		if err != nil {
			t.Fatal(err)
		}
		if w == w1 {
			r1 = r
		} else {
			r2 = r
		}
	}
	l, err := w2.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if c1, err = w1.Connect(ctx, l.Addr()); err != nil {
		t.Fatal(err)
	}
	if c2, err = l.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	return w1, w2, r1, r2, c1, c2
}

// putBuffers allocates a buffer of n bytes from r1's pool (src) and one from r2's (dst), and
// returns them with dst's descriptor: a put's two ends over a connectedPair.
func putBuffers(t testing.TB, r1, r2 *Registration, n int) (src, dst []byte, d Descriptor) {
	t.Helper()
	src, err := r1.pool.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if dst, err = r2.pool.Alloc(n); err != nil {
		t.Fatal(err)
	}
	if d, err = r2.Describe(dst); err != nil {
		t.Fatal(err)
	}
	return src, dst, d
}
