package pinned

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestFakeDrainPendRefusedReusedHandle: buffers freed on stream A fill a shard's FreeAsync
// cache, one of them behind a copy from it still queued (held); the user destroys A without
// ForgetStream and captures a graph on stream c, which the pool knows. The next Alloc drains the
// full cache (drainPend): its query of A is refused (the handle is) and the cache goes to A's
// list, and the reclaim after it loses its TryLock to another (the test holds the lock). The
// driver gives A's handle to a new stream b. The next reclaim asked the handle about A's list
// (b, idle) and took the buffers back with A's copy from the first still queued: the next owner's
// bytes went to the device. The refusal drainPend met must be the list's, as a poll's is.
func TestFakeDrainPendRefusedReusedHandle(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one shard's cache, whatever P runs the test
	const n = 4096
	r := newRefusedRig(t, n)
	if r == nil {
		return
	}
	r.needCache(t, "the invariants build's checks take the reclaim lock this test holds")
	f, dev, p, o, A, d := r.f, r.dev, r.p, r.p.order, r.A, r.d
	c, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	z, err := p.Alloc(n)
	must(t, "Alloc", err)
	must(t, "RecordStream on c", p.RecordStream(z, cuda.Stream(c))) // the pool knows c
	ys := make([][]byte, pendMax)
	for i := range ys {
		ys[i], err = p.Alloc(n)
		must(t, "Alloc", err)
		for j := range ys[i] {
			ys[i][j] = 0xA
		}
	}
	f.Hold(true)
	must(t, "HtoDAsync on A", dev.MemcpyHtoDAsync(d, mem.Addr(ys[0]), n, A)) // held: reads ys[0] later
	for _, y := range ys {
		must(t, "FreeAsync on A", p.FreeAsync(y, cuda.Stream(A)))
	}
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(A))
	endCapture := r.capture(t, c)
	defer endCapture()

	o.reclMu.Lock()                 // another goroutine's reclaim: the Alloc's TryLock loses
	q, err := p.AllocAligned(n, 64) // the slow path, where a full cache is drained
	o.reclMu.Unlock()
	must(t, "Alloc that drains the full cache", err)
	b, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	if b != A {
		t.Fatalf("the driver gave the new stream %#x, not A's handle %#x: the test proves nothing", b, A)
	}
	t.Logf("Trim during the capture: %v", p.Trim())
	first := mem.Addr(ys[0])
	var got [][]byte
	for range 2 * pendMax {
		g, err := p.Alloc(n)
		must(t, "Alloc", err)
		if mem.Addr(g) == first {
			t.Fatalf("Alloc handed out %#x, freed on A behind A's copy from it, still queued: a reclaim trusted the new stream on A's handle", first)
		}
		got = append(got, g)
	}

	endCapture()
	f.Hold(false)
	must(t, "Trim", p.Trim()) // Recover: the context synchronized, A's buffers back
	r.finish(t, append(got, q, z), b, c)
}
