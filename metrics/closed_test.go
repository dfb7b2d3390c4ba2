package metrics

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestClosedPool: a pool closed while registered, its memory released, drops out of the scrape
// and of the expvar Var, as if removed: its series end. Its Stats then had no heaps to read,
// and the scrape reported pinmalloc_host_allocs_total and frees_total 0, a counter going back,
// beside the arena's counters going on. A pool closed with buffers live keeps its memory, and
// its series.
func TestClosedPool(t *testing.T) {
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 64 << 20, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	c := New()
	if err := c.AddPool("staging", p); err != nil {
		t.Fatal(err)
	}
	allocs := func() int { return testutil.CollectAndCount(only(c, "pinmalloc_host_allocs_total")) }
	if err := p.Close(); err == nil { // a buffer is live: the pool keeps its memory
		t.Fatal("Close with a live buffer succeeded")
	}
	if n, v := allocs(), testutil.ToFloat64(only(c, "pinmalloc_host_allocs_total")); n != 1 || v != 1 {
		t.Fatalf("a closed pool with a live buffer: %d allocs series, value %v; want 1, 1", n, v)
	}
	if err := p.Free(b); err != nil { // the last buffer: the pool's memory is released
		t.Fatal(err)
	}
	if n := allocs(); n != 0 {
		t.Errorf("a released pool still has %d allocs series (value %v)", n,
			testutil.ToFloat64(only(c, "pinmalloc_host_allocs_total")))
	}
	if n := testutil.CollectAndCount(c); n != 1 {
		t.Errorf("%d metrics with the only pool released; want pinmalloc_info alone", n)
	}
	var js map[string]any
	if err := json.Unmarshal([]byte(c.Var().String()), &js); err != nil || len(js) != 0 {
		t.Errorf("expvar with the only pool released: %v %v", js, err)
	}
	lint(t, c)
}

// TestClosedHeapAndTier: a device heap and a UVM tier closed while registered drop out of the
// scrape and of the expvar Var at the next one, as a released pool does: their series end. Before,
// a closed heap and tier were reported for ever (reserved_bytes 0, the counters standing, the
// tier's budget too), so that a program making and closing heaps grew its scrape without bound
// and a dashboard showed them live.
func TestClosedHeapAndTier(t *testing.T) {
	dev, _ := cudatest.Device(t)
	if dev == nil {
		return
	}
	h, err := device.New(dev, device.Options{Capacity: 16 << 20, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	tier, err := uvm.New(dev, uvm.Options{DeviceBudget: 2 << 20, Heap: h})
	if err != nil {
		t.Fatal(err)
	}
	b, err := tier.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	c := New()
	for _, err := range []error{c.AddDevice("vram", h), c.AddTier("kv", tier)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	count := func(name string) int { return testutil.CollectAndCount(only(c, name)) }
	if d, u := count("pinmalloc_device_allocs_total"), count("pinmalloc_uvm_allocs_total"); d != 1 || u != 1 {
		t.Fatalf("open: %d device and %d uvm allocs series; want 1 and 1", d, u)
	}
	if err := errors.Join(tier.Free(b), tier.Close()); err != nil {
		t.Fatal(err)
	}
	if d, u := count("pinmalloc_device_allocs_total"), count("pinmalloc_uvm_allocs_total"); d != 1 || u != 0 {
		t.Errorf("tier closed: %d device and %d uvm allocs series; want 1 and 0", d, u)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count("pinmalloc_device_allocs_total"); n != 0 {
		t.Errorf("a closed heap still has %d allocs series", n)
	}
	if n := testutil.CollectAndCount(c); n != 1 {
		t.Errorf("%d metrics with the heap and the tier closed; want pinmalloc_info alone", n)
	}
	var js map[string]any
	if err := json.Unmarshal([]byte(c.Var().String()), &js); err != nil || len(js) != 0 {
		t.Errorf("expvar with the heap and the tier closed: %v %v", js, err)
	}
	lint(t, c)
}
