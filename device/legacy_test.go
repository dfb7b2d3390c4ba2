package device

import (
	"bytes"
	"errors"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeFreeAsyncKeepsLegacyOrder: work ordered before a FreeAsync by the legacy default
// stream's implicit synchronization (stream-sync-behavior: an operation on the legacy stream
// waits for the blocking streams' earlier work, and one on a blocking stream for the legacy
// stream's), as cudaFreeAsync orders it, must have run before the block is reused. A block of
// non-blocking stream a is written by a memset on one side (held) and freed on the other: the
// legacy stream's memset and a free on blocking stream b, and b's memset and a free on the
// legacy stream. Neither freeing stream has work of its own queued, so a query finds it idle;
// an Alloc on a must not get the block back before the memset has run. Before the fix the
// frees were handed back at the first poll (cuStreamQuery of an empty stream succeeds), a's
// Alloc took the block, and the memset, run later, overwrote a's bytes. The same with a Sync
// between the free and the Alloc: it synchronized the freeing stream alone.
func TestFakeFreeAsyncKeepsLegacyOrder(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	b := newBlockingStream(t, dev, h) // ordered with the legacy stream
	const n = 64 << 10
	for _, c := range []struct {
		name       string
		work, free cuda.Stream
		sync       bool // Sync after the free (Lists.Drain: a synchronize of the freeing stream)
	}{
		{"memset on legacy, free on blocking", 0, b, false}, {"memset on blocking, free on legacy", b, 0, false},
		{"memset on legacy, free on blocking, Sync", 0, b, true}, {"memset on blocking, free on legacy, Sync", b, 0, true},
	} {
		p := alloc(t, h, n, a)
		f.Hold(true)
		must(t, "MemsetAsync", h.MemsetAsync(pcuda.DevicePtr(p), 0xAB, n, pcuda.Stream(c.work)))
		must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(c.free)))
		if c.sync {
			// Sync waits: with the memset held it would not return, so let it run at its
			// synchronize, and check that the block came back only after the memset ran.
			f.Hold(false)
			must(t, "Sync", h.Sync())
			f.Hold(true)
		}
		q := alloc(t, h, n, a) // its poll finds the freeing stream with nothing of its own queued
		want := pattern(n, 0x5C)
		must(t, "HtoDAsync on a", h.HtoDAsync(pcuda.DevicePtr(q), want, pcuda.Stream(a)))
		must(t, "synchronize a", dev.StreamSynchronize(a))
		f.Hold(false)
		f.Complete()
		must(t, "synchronize the context", dev.Synchronize())
		buf := make([]byte, n)
		must(t, "DtoH", h.DtoH(buf, pcuda.DevicePtr(q)))
		if q == p && !c.sync || !bytes.Equal(buf, want) { // after Sync the block may come back
			t.Errorf("%s: a's Alloc got %s, and its bytes are %s", c.name, same(q == p), intact(bytes.Equal(buf, want)))
		}
		must(t, "Sync", h.Sync())
		freeAll(t, h, []cuda.DevicePtr{q})
	}
}

func same(b bool) string {
	if b {
		return "the block freed behind the memset (before the memset ran)"
	}
	return "another block"
}

func intact(b bool) string {
	if b {
		return "intact"
	}
	return "overwritten by the memset"
}

// TestFakeTrimKeepsLegacyOrder: a block of blocking stream a, written by a memset on the legacy
// stream (held) and freed on a (its own stream: free in a's heap at once, as later work on a
// runs after the memset), must not reach the arena, where any stream takes it, before the
// memset has run. Trim, and ForgetStream(a), synchronize a before a's heap gives its segments
// back; a has nothing of its own queued, so that alone does not wait for the memset. A
// non-blocking stream's Alloc after them must not get the block under the memset.
func TestFakeTrimKeepsLegacyOrder(t *testing.T) { trimKeepsLegacyOrder(t, false) }

// TestFakeForgetStreamKeepsLegacyOrder is TestFakeTrimKeepsLegacyOrder with ForgetStream(a).
func TestFakeForgetStreamKeepsLegacyOrder(t *testing.T) { trimKeepsLegacyOrder(t, true) }

func trimKeepsLegacyOrder(t *testing.T, forget bool) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20})
	if f == nil {
		return
	}
	a := newBlockingStream(t, dev, h) // ordered with the legacy stream
	c := newStream(t, dev, h)
	const n = 64 << 10
	p := alloc(t, h, n, a)
	f.Hold(true)
	defer f.Complete()
	must(t, "MemsetAsync on the legacy stream", h.MemsetAsync(pcuda.DevicePtr(p), 0xAB, n, 0))
	must(t, "FreeAsync on a", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(a)))
	var trimErr error
	if forget {
		trimErr = h.ForgetStream(pcuda.Stream(a))
	} else {
		trimErr = h.Trim()
	}
	q := alloc(t, h, n, c)
	want := pattern(n, 0x5C)
	must(t, "HtoDAsync on c", h.HtoDAsync(pcuda.DevicePtr(q), want, pcuda.Stream(c)))
	must(t, "synchronize c", dev.StreamSynchronize(c))
	f.Hold(false)
	f.Complete()
	syncErr := dev.Synchronize()
	buf := make([]byte, n)
	dtohErr := h.DtoH(buf, pcuda.DevicePtr(q))
	if trimErr != nil || syncErr != nil || dtohErr != nil || !bytes.Equal(buf, want) {
		t.Errorf("Trim or ForgetStream: %v; c's Alloc got %s; the context's synchronize: %v; c's bytes (%v) %s", trimErr, same(q == p), syncErr, dtohErr, intact(bytes.Equal(buf, want)))
	}
	must(t, "Free", h.Free(pcuda.DevicePtr(q)))
}

// TestFakeQuotaReclaimsLegacyFree: a block freed on the legacy stream, with every stream idle,
// leaves the quota for the next Alloc. The legacy stream is never found idle by a query (its
// work waits for every blocking stream's), so the first poll only gives the free a point; the
// Alloc refused by the quota must poll again. Before, it failed with ErrQuota with nothing live.
func TestFakeQuotaReclaimsLegacyFree(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, Quota: 1 << 20})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	p := alloc(t, h, 1<<20, a)
	must(t, "FreeAsync on the legacy stream", h.FreeAsync(pcuda.DevicePtr(p), 0))
	q, err := h.Alloc(1<<20, pcuda.Stream(a))
	if err != nil {
		t.Fatalf("Alloc of the whole quota after a free on the idle legacy stream: %v", err)
	}
	must(t, "Free", h.Free(q))
}

// TestFakePerThreadStreamRefused: the per-thread default stream (CU_STREAM_PER_THREAD, 2) names
// the default stream of whichever OS thread calls. A FreeAsync on it waits for a point that a
// later poll records, on another goroutine's thread perhaps, so on another stream; a same-stream
// reuse on it would order nothing between threads. Alloc, FreeAsync and the async copies refuse
// it, as a pool does; before, they took it.
func TestFakePerThreadStreamRefused(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20})
	if f == nil {
		return
	}
	const perThread = pcuda.Stream(2)
	if _, err := h.Alloc(4096, perThread); !errors.Is(err, ErrInvalidStream) {
		t.Errorf("Alloc on the per-thread stream: %v, want ErrInvalidStream", err)
	}
	a := newStream(t, dev, h)
	p := alloc(t, h, 4096, a)
	if err := h.FreeAsync(pcuda.DevicePtr(p), perThread); !errors.Is(err, ErrInvalidStream) {
		t.Errorf("FreeAsync on the per-thread stream: %v, want ErrInvalidStream", err)
	}
	if err := h.HtoDAsync(pcuda.DevicePtr(p), make([]byte, 16), perThread); !errors.Is(err, ErrInvalidStream) {
		t.Errorf("HtoDAsync on the per-thread stream: %v, want ErrInvalidStream", err)
	}
	must(t, "Free", h.Free(pcuda.DevicePtr(p)))
}

// TestFakeCloseKeepsLegacyOrder: Close gives the heap's memory back only once the legacy default
// stream's earlier work is done too, when a stream of the heap is blocking. A block of blocking
// stream b is written by a held memset on the legacy stream, queued by the user directly, and freed
// on b, with nothing of b's own queued: Close must refuse with ErrBusy. Before, it queried b alone,
// found it idle and unmapped the memory under the memset.
func TestFakeCloseKeepsLegacyOrder(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20})
	if f == nil {
		return
	}
	b := newBlockingStream(t, dev, h)
	const n = 64 << 10
	p := alloc(t, h, n, b)
	f.Hold(true)
	// The user's own work on the legacy stream (a kernel given the pointer), which the heap
	// has not seen: the heap learns of the legacy stream only through b's order.
	must(t, "memset on the legacy stream", dev.MemsetD8Async(p, 0xAB, n, 0))
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
	if err := h.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("Close with the legacy stream's memset held: %v, want ErrBusy", err)
	}
	f.Hold(false)
	f.Complete()
	must(t, "synchronize the context", dev.Synchronize())
}
