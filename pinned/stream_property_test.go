package pinned_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/pattern"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// stamp fills b with a pattern of seed that no other seed shares at any index; it repeats every
// 256 bytes.
func stamp(b []byte, seed uint32) {
	pattern.Fill(b, 256, func(i int) byte { return byte(seed>>(uint(i)%4*8)) ^ byte(i*29) })
}

func stamped(n int, seed uint32) []byte {
	b := make([]byte, n)
	stamp(b, seed)
	return b
}

// TestFakeStreamProperty runs a long random sequence of pool and stream operations against the
// fake, whose streams run their work late (and not at all while Hold is on): allocations stamped
// with their own pattern, async copies from them to per-stream device blocks and into them, frees
// right after (Free, FreeAsync on any stream), RecordStream of sub-slices, queries, synchronizes,
// ForgetStream. A buffer reused before a stream had passed its copies shows: a device block then
// holds another stamp than the last copy queued into it, or a live buffer another stamp than its
// own.
func TestFakeStreamProperty(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{Capacity: 128 << 20})
	if r == nil {
		return
	}
	ops := 1000
	if pinned.LongRun() {
		ops = 4000
	}
	const maxN = 1200 << 10
	streams := []cuda.Stream{r.s, r.stream(), r.stream()}
	type block struct {
		d    cuda.DevicePtr
		want []byte // what the last copy queued into it leaves there
	}
	blocks := make([]block, len(streams))
	for i := range blocks {
		d, err := r.heap.Alloc(maxN, pcuda.Stream(streams[i]))
		ok(t, "device Alloc", err)
		blocks[i] = block{d: uintptr(d), want: make([]byte, maxN)}
		ok(t, "MemsetAsync", r.heap.MemsetAsync(d, 0, maxN, pcuda.Stream(streams[i])))
	}
	type live struct {
		b    []byte
		seed uint32
		src  bool // a copy from it is queued: a copy into it would race that one (the test's own race)
	}
	var bufs []live
	seed0 := rand.Uint64()
	t.Logf("seed %d", seed0)
	rng := rand.New(rand.NewPCG(seed0, 2))
	sizes := []int{100, 4 << 10, 60 << 10, 300 << 10, maxN}
	var seed uint32
	check := func(step int, k int) {
		t.Helper()
		ok(t, "StreamSynchronize", r.dev.StreamSynchronize(streams[k]))
		if got := r.read(blocks[k].d, maxN); !bytes.Equal(got, blocks[k].want) {
			t.Fatalf("step %d: device block %d holds other bytes than the last copy queued into it (a source reused early)", step, k)
		}
		for _, l := range bufs {
			if !bytes.Equal(l.b, stamped(len(l.b), l.seed)) {
				t.Fatalf("step %d: a live buffer of %d bytes lost its bytes (a late copy into a buffer freed early)", step, len(l.b))
			}
		}
	}
	for step := range ops {
		k := rng.IntN(len(streams))
		s := streams[k]
		switch x := rng.IntN(100); {
		case x < 30 && len(bufs) < 48:
			n := sizes[rng.IntN(len(sizes))] - rng.IntN(64)
			b, err := r.pool.Alloc(n)
			ok(t, "Alloc", err)
			seed++
			stamp(b, seed)
			bufs = append(bufs, live{b: b, seed: seed})
		case x < 55 && len(bufs) > 0:
			l := &bufs[rng.IntN(len(bufs))]
			ok(t, "HtoDAsync", r.heap.HtoDAsync(pcuda.DevicePtr(blocks[k].d), l.b, pcuda.Stream(s)))
			copy(blocks[k].want, l.b)
			l.src = true
		case x < 62 && len(bufs) > 0 && !bufs[len(bufs)-1].src: // a copy into a buffer, then its free: the write lands late
			i := len(bufs) - 1
			l := bufs[i]
			ok(t, "DtoHAsync", r.heap.DtoHAsync(l.b, pcuda.DevicePtr(blocks[k].d), pcuda.Stream(s)))
			bufs = append(bufs[:i], bufs[i+1:]...)
			if rng.IntN(2) == 0 {
				ok(t, "Free", r.pool.Free(l.b))
			} else {
				ok(t, "FreeAsync", r.pool.FreeAsync(l.b, pcuda.Stream(s)))
			}
		case x < 85 && len(bufs) > 0:
			i := rng.IntN(len(bufs))
			l := bufs[i]
			bufs = append(bufs[:i], bufs[i+1:]...)
			switch rng.IntN(3) {
			case 0:
				ok(t, "Free", r.pool.Free(l.b))
			case 1:
				ok(t, "FreeAsync", r.pool.FreeAsync(l.b, pcuda.Stream(s)))
			default:
				lo := rng.IntN(len(l.b))
				ok(t, "RecordStream", r.pool.RecordStream(l.b[lo:lo+1+rng.IntN(len(l.b)-lo)], pcuda.Stream(s)))
				ok(t, "Free", r.pool.Free(l.b))
			}
		case x < 90:
			r.f.Hold(rng.IntN(3) == 0)
		case x < 93:
			_ = r.pool.Stats()
		case x < 95: // waits for s, takes back its buffers, takes it off the live ones
			ok(t, "pool ForgetStream", r.pool.ForgetStream(pcuda.Stream(s)))
		default:
			check(step, k)
		}
	}
	r.f.Hold(false)
	for k := range streams {
		check(ops, k)
	}
	for _, l := range bufs {
		ok(t, "Free", r.pool.Free(l.b))
	}
	for k, b := range blocks {
		ok(t, "device Free", r.heap.FreeAsync(pcuda.DevicePtr(b.d), pcuda.Stream(streams[k])))
	}
	if st := r.pool.Stats(); st.Deferred != 0 || st.Live != 0 {
		t.Errorf("at the end: %d deferred, %d live", st.Deferred, st.Live)
	}
	for _, s := range streams[1:] {
		ok(t, "ForgetStream", r.heap.ForgetStream(pcuda.Stream(s)))
	}
	r.finish()
}
