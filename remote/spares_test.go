package remote

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestIdleWorkerDropsSpares: a target keeps the buffers its tcp puts' bytes were copied into
// for the next ones (package ucx, spares) while they stream in, and gives them back once its
// worker goes idle.
func TestIdleWorkerDropsSpares(t *testing.T) {
	t.Setenv("UCX_TLS", "tcp")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, w2, r1, r2, c1, _ := connectedPair(t, ctx)
	src, _, d := putBuffers(t, r1, r2, 1<<20)
	for range 4 {
		if err := c1.Put(ctx, src, d); err != nil {
			t.Fatal(err)
		}
	}
	spares := func() int {
		w2.mu.Lock()
		defer w2.mu.Unlock()
		return w2.uw.Spares()
	}
	deadline := time.Now().Add(5 * time.Second)
	for n := spares(); n != 0; n = spares() {
		if time.Now().After(deadline) {
			t.Fatalf("the target idle for 5 s keeps %d spare buffers", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkPutsByMessage measures puts by message over tcp between two workers of this process:
// one Transfer of 64 MiB's worth of puts of the size into one buffer, Start and Wait timed.
func BenchmarkPutsByMessage(b *testing.B) {
	b.Setenv("UCX_TLS", "tcp")
	ctx := context.Background()
	_, _, r1, r2, c1, _ := connectedPair(b, ctx)
	for _, size := range []int{64 << 10, 1 << 20} {
		src, _, d := putBuffers(b, r1, r2, size)
		n := (64 << 20) / size
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			b.SetBytes(int64(size * n))
			timePuts(b, c1, slices.Repeat([][]byte{src}, n), slices.Repeat([]Descriptor{d}, n))
		})
	}
}
