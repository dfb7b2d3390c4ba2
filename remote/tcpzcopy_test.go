package remote

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestTCPSendsByCopy: over UCX's tcp transport, a put by message, the answer of a get by
// message and a message with bytes all go by copy (ucx.Op.Copy: UCX packs every byte, which
// it never does for a zero-copy send, whose failed socket aborts the process in UCX: ucx.go,
// "Sends by copy"), and arrive whole; over shared memory, only the handshake's messages,
// sent before the connection's lanes are known.
func TestTCPSendsByCopy(t *testing.T) {
	needUCX(t)
	for _, tr := range transports[:2] {
		t.Run(tr.name, func(t *testing.T) {
			tr.set(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			a, b := newLocalMode(t, tr, ModeMessages), newLocalMode(t, tr, ModeMessages)
			var cb, ca *Conn
			if tr.shm {
				addr, err := b.w.Address()
				if err != nil {
					t.Fatal(err)
				}
				if cb, err = a.w.Dial(ctx, addr); err != nil {
					t.Fatal(err)
				}
				if ca, err = b.w.Accept(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				l, err := b.w.Listen("127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				if cb, err = a.w.Connect(ctx, l.Addr()); err != nil {
					t.Fatal(err)
				}
				if ca, err = l.Accept(ctx); err != nil {
					t.Fatal(err)
				}
			}
			const n = 3<<20 + 123 // past a segment's end, odd
			src, dst := a.alloc(t, n, 1), b.alloc(t, n, 2)
			back := a.alloc(t, n, 3)
			dd, err := b.reg.Describe(dst)
			if err != nil {
				t.Fatal(err)
			}
			transfer := func(op func(*Transfer) error) {
				t.Helper()
				tx := cb.NewTransfer()
				err := op(tx)
				if err == nil {
					if err = tx.Start(); err == nil {
						err = tx.Wait(ctx)
					}
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			transfer(func(tx *Transfer) error { return tx.Put(src, dd) })
			check(t, "the put's destination", dst, 1)
			fill(dst, 4)
			transfer(func(tx *Transfer) error { return tx.Get(back, dd) })
			check(t, "the get's destination", back, 4)
			msg := bytes.Repeat([]byte("pinmalloc"), 100_000)
			if err := cb.Send(ctx, msg); err != nil {
				t.Fatal(err)
			}
			got, err := ca.Recv(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, msg) {
				t.Fatal("the message came with other bytes")
			}
			a.w.mu.Lock()
			byA := a.w.uw.PackedBytes()
			a.w.mu.Unlock()
			b.w.mu.Lock()
			byB := b.w.uw.PackedBytes()
			b.w.mu.Unlock()
			for _, f := range []func() error{func() error { return a.pool.Free(src) }, func() error { return a.pool.Free(back) }, func() error { return b.pool.Free(dst) }} {
				if err := f(); err != nil {
					t.Fatal(err)
				}
			}
			if tr.shm { // only the handshake's messages, sent before the lanes are known
				if byA >= 1<<10 || byB >= 1<<10 {
					t.Fatalf("over shared memory, %d and %d bytes went by copy of ours, want the handshake's only", byA, byB)
				}
				return
			}
			if want := uint64(n + len(msg)); byA < want {
				t.Errorf("the putter packed %d bytes, want at least %d (its put and its message): some went by zero copy", byA, want)
			}
			if byB < n {
				t.Errorf("the target packed %d bytes, want at least %d (the get's answer): some went by zero copy", byB, n)
			}
		})
	}
}
