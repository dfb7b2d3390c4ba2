package remote

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/ipcpool"
)

// TestSharedBufferMoves: a buffer of a pool shared by the processes of a host (package
// ipcpool), handed to another process (Handle: the pool shares it), is described, and put and
// got, by a worker: the KV block a serving stack shares on its host and sends to another. Both
// sides' holds of it were refused with ErrDoubleFree: the pool took the hold bit the Share had
// set for a free's.
func TestSharedBufferMoves(t *testing.T) {
	needUCX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	owner, err := ipcpool.Serve(filepath.Join(t.TempDir(), "pool.sock"), ipcpool.Options{Size: 4 << 20, FallbackPageable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	w1, w2 := newWorker(t), newWorker(t)
	r1, err := w1.Register(owner.Pool)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	p2, err := testPool(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	r2, err := w2.Register(p2)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	a, err := w2.Address()
	if err != nil {
		t.Fatal(err)
	}
	c, err := w1.Dial(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const n = 64 << 10
	shared, err := owner.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	fill(shared, 1)
	if _, err := owner.Handle(shared); err != nil { // shared with the host's other processes
		t.Fatal(err)
	}
	if _, err := r1.Describe(shared); err != nil {
		t.Fatalf("Describe of a shared buffer: %v", err)
	}
	dst, err := p2.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	d, err := r2.Describe(dst)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, shared, d); err != nil {
		t.Fatalf("Put from a shared buffer: %v", err)
	}
	if !bytes.Equal(dst, shared) {
		t.Fatal("put from a shared buffer: the bytes differ")
	}
	fill(dst, 2)
	if err := c.Get(ctx, shared, d); err != nil {
		t.Fatalf("Get into a shared buffer: %v", err)
	}
	if !bytes.Equal(dst, shared) {
		t.Fatal("get into a shared buffer: the bytes differ")
	}
	if err := errors.Join(owner.Free(shared), p2.Free(dst)); err != nil {
		t.Fatal(err)
	}
}
