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

// TestExample runs the bodies of Example and ExampleWorker_SegmentSource, which say nothing
// testable without UCX.
func TestExample(t *testing.T) {
	for name, body := range map[string]func() error{"Example": example, "ExampleWorker_SegmentSource": exampleSegments} {
		t.Run(name, func(t *testing.T) {
			err := body()
			if errors.Is(err, remote.ErrNoUCX) && os.Getenv("PINMALLOC_REQUIRE_UCX") == "" {
				t.Skipf("no UCX: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Two workers of one host over shared memory: the decode side's pool is of UCX's segments
// (a SegmentSource), so the prefill side's put is one copy into the segment it maps.
func ExampleWorker_SegmentSource() {
	if err := exampleSegments(); errors.Is(err, remote.ErrNoUCX) {
		fmt.Println("no UCX:", err) // apt-get install libucx0
	} else if err != nil {
		fmt.Println(err)
	}
}

func exampleSegments() error {
	ctx := context.Background()
	if old, ok := os.LookupEnv("UCX_TLS"); ok { // UCX reads it as each worker is made
		defer os.Setenv("UCX_TLS", old)
	} else {
		defer os.Unsetenv("UCX_TLS")
	}
	os.Setenv("UCX_TLS", "sm")
	decode, err := remote.New(remote.Options{SharedMemory: true})
	if err != nil {
		return err
	}
	defer decode.Close()
	prefill, err := remote.New(remote.Options{SharedMemory: true})
	if err != nil {
		return err
	}
	defer prefill.Close()

	// The decode side's pool: regions UCX allocates, registered as they are (Pageable: no
	// memlock needed).
	dstPool, err := pinned.New(pinned.Options{Capacity: 64 << 20, Source: decode.SegmentSource(remote.SegmentOptions{Pageable: true})})
	if err != nil {
		return err
	}
	defer dstPool.Close()
	dstReg, err := decode.Register(dstPool)
	if err != nil {
		return err
	}
	srcPool, _ := pinned.New(pinned.Options{Capacity: 64 << 20, Backend: pinned.Pageable})
	defer srcPool.Close()
	if _, err := prefill.Register(srcPool); err != nil {
		return err
	}

	// Connect by worker address (a control plane of the program's own carries it).
	addr, err := decode.Address()
	if err != nil {
		return err
	}
	go func() { _, _ = decode.Accept(ctx) }()
	c, err := prefill.Dial(ctx, addr)
	if err != nil {
		return err
	}

	dst, _ := dstPool.Alloc(16 << 10)
	defer dstPool.Free(dst)
	d, err := dstReg.Describe(dst) // sent to the prefill side as bytes, in use
	if err != nil {
		return err
	}
	src, _ := srcPool.Alloc(16 << 10)
	defer srcPool.Free(src)
	copy(src, "a KV block")
	if err := c.Put(ctx, src, d); err != nil {
		return err
	}
	fmt.Println(string(dst[:10]), "by copy:", prefill.Stats().Copied)
	return nil
}
