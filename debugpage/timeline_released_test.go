package debugpage

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// names returns the names of h's registered sources, in order.
func names(h *Handler) []string {
	var out []string
	for _, s := range h.list() {
		out = append(out, s.name)
	}
	return out
}

// TestTimelineDropsReleasedPool: the timeline's sampler unregisters a pool it finds released
// (closed, its memory given back), with no page asked for, and samples it no more; the other
// sources go on. Before, it sampled a released pool until a page was asked for, keeping it
// registered (and its pool reachable).
func TestTimelineDropsReleasedPool(t *testing.T) {
	var pools [2]*pinned.Pool
	h := New()
	for i, name := range []string{"closed", "open"} {
		p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 8 << 20})
		if err != nil {
			t.Fatal(err)
		}
		pools[i] = p
		if err := h.AddPool(name, p); err != nil {
			t.Fatal(err)
		}
	}
	defer pools[1].Close()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h.sampleAll(t0)
	closed := h.list()[0]
	if err := pools[0].Close(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		h.sampleAll(t0.Add(time.Duration(i) * time.Second))
	}
	if got := names(h); len(got) != 1 || got[0] != "open" {
		t.Errorf("registered after the samples: %q; want only open", got)
	}
	if n := len(closed.ring.samples()); n != 1 {
		t.Errorf("the released pool has %d samples; want the 1 taken before its Close", n)
	}
	if n := len(h.list()[0].ring.samples()); n != 4 {
		t.Errorf("the open pool has %d samples; want 4", n)
	}
}

// TestTimelineSampleCost: a sample of a pool holding buffers reads its Usage alone; only a
// pool holding none (which may be released) costs a Stats too.
func TestTimelineSampleCost(t *testing.T) {
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h := New()
	if err := h.AddPool("staging", p); err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	stats, usage := countReads(t)
	h.sampleAll(time.Now())
	if *stats != 0 || *usage != 1 {
		t.Errorf("a sample of a pool holding a buffer read its Stats %d times, its Usage %d; "+
			"want 0 and 1", *stats, *usage)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	h.sampleAll(time.Now())
	if *stats != 1 || *usage != 2 {
		t.Errorf("after a sample of the pool idle, %d Stats and %d Usage read; want 1 and 2",
			*stats, *usage)
	}
}

// TestFakeTimelineDropsClosedHeapAndTier is TestTimelineDropsReleasedPool for a UVM tier and
// a device heap: each is unregistered by the sampler once its Stats says Released, and a heap
// whose Close the driver refused to give its memory back stays (and is sampled) until a later
// Close does.
func TestFakeTimelineDropsClosedHeapAndTier(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	ts := newTierScene(t, dev, 1)
	h := New()
	for _, err := range []error{h.AddTier("kv", ts.tier), h.AddDevice("vram", ts.heap)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	vram := h.list()[1]
	registered := func(when string, want ...string) {
		t.Helper()
		h.sampleAll(time.Now())
		if got := names(h); !slices.Equal(got, want) {
			t.Errorf("%s: registered %q, want %q", when, got, want)
		}
	}
	registered("open", "kv", "vram")
	err := errors.Join(ts.tier.Free(ts.blocks[0]), ts.tier.ForgetStream(ts.s), ts.tier.Close())
	if err != nil {
		t.Fatal(err)
	}
	registered("the tier closed", "vram")
	if err := errors.Join(ts.heap.ForgetStream(ts.s), dev.StreamDestroy(ts.s)); err != nil {
		t.Fatal(err)
	}
	fake.FailNext(cudatest.MemUnmap, cudatest.InvalidValue)
	fake.FailNext(cudatest.MemRelease, cudatest.InvalidValue)
	if err := ts.heap.Close(); err == nil {
		t.Fatal("the heap's Close with the unmap refused succeeded")
	}
	registered("the heap closed, its memory kept", "vram")
	if err := ts.heap.Close(); err != nil {
		t.Fatalf("second Close of the heap: %v", err)
	}
	registered("the heap closed, its memory given back")
	if n := len(vram.ring.samples()); n != 3 {
		t.Errorf("the heap has %d samples; want the 3 taken before it was released", n)
	}
}
