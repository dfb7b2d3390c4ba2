package pinned_test

import (
	"bytes"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeStagingWaitsForStreams: the staging loop users run (take a buffer, fill it, queue its
// copy to the device, FreeAsync it) on a pool four times smaller than the copies queued. The
// pool used to fail with ErrOutOfMemory once every buffer waited for a copy not yet run (on an
// H200, the GPU check's 1 MiB staging case: capacity exhausted); now an Alloc that finds the pool
// full waits for the streams of the deferred buffers, as a device heap does, and every copy
// carries the bytes of its own buffer.
func TestFakeStagingWaitsForStreams(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{Capacity: 8 << 20})
	if r == nil {
		return
	}
	const n, rounds = 1 << 20, 32
	r.f.Hold(true) // queries answer "not ready": only a synchronize runs the copies
	dst := make([]cuda.DevicePtr, rounds)
	for i := range dst {
		dst[i] = r.devAlloc(n)
		b, err := r.pool.Alloc(n)
		if err != nil {
			t.Fatalf("round %d: Alloc(%d) with %d copies queued: %v", i, n, i, err)
		}
		for j := range b {
			b[j] = byte(i + 1)
		}
		ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(dst[i]), b, pubcuda.Stream(r.s)))
		ok(t, "FreeAsync", r.pool.FreeAsync(b, pubcuda.Stream(r.s)))
	}
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	for i, d := range dst {
		if got := r.read(d, n); !bytes.Equal(got, bytes.Repeat([]byte{byte(i + 1)}, n)) {
			t.Fatalf("round %d: the device got other bytes than its buffer's", i)
		}
		ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	}
	if st := r.pool.Stats(); st.Reserved > 8<<20 {
		t.Fatalf("the pool reserved %d bytes beyond its capacity", st.Reserved)
	}
	r.finish()
}

// TestFakeStagingWaitsForDestroyedStream: the staging loop on two streams, one destroyed (its
// copies still queued, as the driver allows) before the pool fills. The wait for the deferred
// buffers cannot synchronize the destroyed stream; it answers it as a reclaim answers a lost
// list, with a synchronize of the context, and the Alloc gets its memory. It failed with the
// driver's refusal, although the memory of both streams' buffers was about to come back.
func TestFakeStagingWaitsForDestroyedStream(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{Capacity: 8 << 20})
	if r == nil {
		return
	}
	const n = 1 << 20
	gone, err := r.dev.StreamCreate(true)
	ok(t, "StreamCreate", err)
	r.f.Hold(true)
	var dst []cuda.DevicePtr
	for i := range 8 { // the pool holds 8: all wait for a stream
		s := r.s
		if i%2 == 0 {
			s = gone
		}
		d := r.devAlloc(n)
		dst = append(dst, d)
		b, err := r.pool.Alloc(n)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		for j := range b {
			b[j] = byte(i + 1)
		}
		ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), b, pubcuda.Stream(s)))
		ok(t, "FreeAsync", r.pool.FreeAsync(b, pubcuda.Stream(s)))
	}
	ok(t, "StreamDestroy", r.dev.StreamDestroy(gone)) // its copies still queued
	for i := range 4 {
		b, err := r.pool.Alloc(n)
		if err != nil {
			t.Fatalf("Alloc %d with the deferred buffers' streams one live, one destroyed: %v", i, err)
		}
		ok(t, "Free", r.pool.Free(b))
	}
	r.f.Hold(false)
	ok(t, "Synchronize", r.dev.Synchronize())
	for i, d := range dst {
		if got := r.read(d, n); !bytes.Equal(got, bytes.Repeat([]byte{byte(i + 1)}, n)) {
			t.Fatalf("round %d: the device got other bytes than its buffer's", i)
		}
		ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	}
	r.finish()
}
