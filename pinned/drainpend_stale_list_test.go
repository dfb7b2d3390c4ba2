package pinned

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestFakeDrainPendStaleListRefusedReusedHandle: a shard's FreeAsync cache takes stream A's list
// L1, then reclaims that do not flush that shard's cache (another shard's allocation: here a
// spill shard's, the test holding the home shard) find L1 empty twice and retire it. FreeAsync's
// fast path kept filling the cache under L1, buffers freed on A behind A's copies (held). A
// larger buffer freed on A makes A a new list L2; the user destroys A without ForgetStream and
// captures a graph on stream c, which the pool knows; another such reclaim finds A's handle
// refused on L2 (its synchronize of the context put off by the capture), and the driver gives
// A's handle to a new stream b. The next allocation of the shard drained the full cache
// (drainPend) by asking the handle through L1, which knows nothing of L2's refusal: b, idle, so
// the buffers came back with A's copy from the first still queued, and that copy sent the next
// owner's bytes to the device. Every byte the copy sent must be the one freed.
func TestFakeDrainPendStaleListRefusedReusedHandle(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one home shard, whatever P runs the test
	const n = 4096
	r := newRefusedRig(t, n)
	if r == nil {
		return
	}
	r.needCache(t, "the invariants build's checks change when the reclaims run")
	f, dev, p, o, A, d := r.f, r.dev, r.p, r.p.order, r.A, r.d
	c, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	w, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	alloc := func(n int, v byte) []byte {
		t.Helper()
		b, err := p.Alloc(n)
		must(t, "Alloc", err)
		for i := range b {
			b[i] = v
		}
		return b
	}
	const big = 512 << 10 // weight 33: every slow path reclaims while it waits (reclaimWeight)
	z := alloc(n, 0)
	must(t, "RecordStream on c", p.RecordStream(z, cuda.Stream(c))) // the pool knows c
	bw, bA := alloc(big, 0), alloc(big, 0)
	ys := make([][]byte, pendMax)
	for i := range ys {
		ys[i] = alloc(n, 0xA)
	}
	// spill allocates on a spill shard while the test holds the home shard, so that the slow
	// path's reclaim (weight over reclaimWeight) flushes no cache but the spill shard's.
	var got [][]byte
	spill := func() {
		t.Helper()
		s := p.own()
		if s != p.home[0].Load() {
			t.Fatal("own gave no home shard: the test proves nothing")
		}
		got = append(got, alloc(n, 0)) // the home shard held: a spill shard's, after homeWait
		letGo(s)
	}

	f.Hold(true)
	must(t, "DtoHAsync on w", dev.MemcpyDtoHAsync(mem.Addr(bw), d, n, w)) // w busy: its list stays
	must(t, "FreeAsync on w", p.FreeAsync(bw, cuda.Stream(w)))
	must(t, "HtoDAsync on A", dev.MemcpyHtoDAsync(d, mem.Addr(ys[0]), n, A)) // reads ys[0] later
	must(t, "FreeAsync on A", p.FreeAsync(ys[0], cuda.Stream(A)))            // the cache takes L1
	sh := p.home[0].Load()
	l1 := sh.pendL
	if l1 == nil || len(sh.pend) != 1 {
		t.Fatal("the shard's FreeAsync cache did not take the buffer: the test proves nothing")
	}
	spill()
	spill() // L1 empty at two polls: retired, the cache still under it
	if !l1.Left() {
		t.Fatal("A's list did not leave the lists: the test proves nothing")
	}
	for _, y := range ys[1:] {
		must(t, "FreeAsync on A", p.FreeAsync(y, cuda.Stream(A))) // the fast path: under L1
	}
	if sh.pendL != l1 || len(sh.pend) != pendMax {
		t.Fatalf("the cache holds %d buffers under another list: the test proves nothing", len(sh.pend))
	}
	must(t, "FreeAsync of a large buffer on A", p.FreeAsync(bA, cuda.Stream(A))) // L2
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(A))
	endCapture := r.capture(t, c)
	defer endCapture()
	spill() // finds A refused on L2; the capture puts off the synchronize of the context
	if !o.lists.Refused(streamq.Stream(A)) {
		t.Fatal("the reclaim did not find A's handle refused: the test proves nothing")
	}
	b, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	if b != A {
		t.Fatalf("the driver gave the new stream %#x, not A's handle %#x: the test proves nothing", b, A)
	}

	q, err := p.AllocAligned(n, 64) // the slow path, on the home shard: its full cache drained
	must(t, "Alloc that drains the full cache", err)
	got = append(got, q)
	for range 2 * pendMax {
		got = append(got, alloc(n, 0xB)) // the next owners' bytes
	}

	endCapture()
	f.Hold(false)
	must(t, "Trim", p.Trim()) // Recover: the context synchronized, A's copy run, A's buffers back
	sent := make([]byte, n)
	must(t, "DtoH", dev.MemcpyDtoH(mem.Addr(sent), d, n))
	for i, v := range sent {
		if v != 0xA {
			t.Fatalf("byte %d of what A's copy from ys[0] sent is %#x, want 0xa: the buffer was handed out again while the destroyed stream's copy still read it (drainPend asked the new stream on A's handle through A's retired list)", i, v)
		}
	}
	for _, g := range append(got, z) {
		must(t, "Free", p.Free(g))
	}
	must(t, "ForgetStream of b", p.ForgetStream(cuda.Stream(b)))
	must(t, "StreamDestroy of b", dev.StreamDestroy(b))
	must(t, "ForgetStream of c", p.ForgetStream(cuda.Stream(c)))
	must(t, "StreamDestroy of c", dev.StreamDestroy(c))
	must(t, "ForgetStream of w", p.ForgetStream(cuda.Stream(w)))
	must(t, "StreamDestroy of w", dev.StreamDestroy(w))
	must(t, "MemFree", dev.MemFree(d))
	must(t, "Close", p.Close())
}
