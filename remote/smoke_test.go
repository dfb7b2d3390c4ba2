package remote_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/remote"
)

func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w1, err := remote.New(remote.Options{})
	if err != nil {
		t.Skip(err)
	}
	defer w1.Close()
	w2, err := remote.New(remote.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	p1, _ := pinned.New(pinned.Options{Capacity: 64 << 20})
	p2, _ := pinned.New(pinned.Options{Capacity: 64 << 20})
	r1, err := w1.Register(p1)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := w2.Register(p2)
	if err != nil {
		t.Fatal(err)
	}
	_ = r1
	l, err := w2.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Log(l.Addr())
	c1, err := w1.Connect(ctx, l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c2, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := p1.Alloc(1 << 20)
	b2, _ := p2.Alloc(1 << 20)
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
	t.Logf("%+v", w1.Stats())
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Recv(ctx); err == nil {
		t.Fatal("recv after peer close")
	}
	p1.Free(b1)
	p2.Free(b2)
}
