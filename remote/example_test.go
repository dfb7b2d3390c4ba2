package remote_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/remote"
)

// Two workers (one process here; two processes or hosts in use) move a block from one pool to
// the other by descriptor. The receiving side registers its pool once and describes a buffer;
// the sending side puts its block there with a Transfer.
func Example() {
	if err := example(); errors.Is(err, remote.ErrNoUCX) {
		fmt.Println("no UCX:", err) // apt-get install libucx0
	} else if err != nil {
		fmt.Println(err)
	}
}

func example() error {
	ctx := context.Background()
	decode, err := remote.New(remote.Options{})
	if err != nil {
		return err
	}
	defer decode.Close()
	prefill, err := remote.New(remote.Options{})
	if err != nil {
		return err
	}
	defer prefill.Close()

	// Each side's pool, registered once: every region as the pool maps it.
	dstPool, _ := pinned.New(pinned.Options{Capacity: 64 << 20, Backend: pinned.Pageable})
	defer dstPool.Close()
	srcPool, _ := pinned.New(pinned.Options{Capacity: 64 << 20, Backend: pinned.Pageable})
	defer srcPool.Close()
	dstReg, err := decode.Register(dstPool)
	if err != nil {
		return err
	}
	if _, err := prefill.Register(srcPool); err != nil {
		return err
	}

	// Connect: the decode side listens, the prefill side connects.
	l, err := decode.Listen("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	c, err := prefill.Connect(ctx, l.Addr())
	if err != nil {
		return err
	}
	dc, err := l.Accept(ctx)
	if err != nil {
		return err
	}

	// The decode side describes a buffer and sends the descriptor.
	dst, _ := dstPool.Alloc(16 << 10)
	defer dstPool.Free(dst)
	d, err := dstReg.Describe(dst)
	if err != nil {
		return err
	}
	b, _ := d.AppendBinary(nil)
	if err := dc.Send(ctx, b); err != nil {
		return err
	}

	// The prefill side reads it and puts its block there.
	m, err := c.Recv(ctx)
	if err != nil {
		return err
	}
	got, _, err := remote.ParseDescriptor(m)
	if err != nil {
		return err
	}
	src, _ := srcPool.Alloc(16 << 10)
	defer srcPool.Free(src)
	copy(src, "a KV block")
	t := c.NewTransfer()
	if err := t.Put(src, got); err != nil {
		return err
	}
	if err := t.Start(); err != nil {
		return err
	}
	if err := t.Wait(ctx); err != nil {
		return err
	}
	fmt.Println(string(dst[:10]))
	return nil
}

// TestExample runs Example's body, which says nothing testable without UCX.
func TestExample(t *testing.T) {
	err := example()
	if errors.Is(err, remote.ErrNoUCX) && os.Getenv("PINMALLOC_REQUIRE_UCX") == "" {
		t.Skipf("no UCX: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}
