package metrics

import (
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// registered is how many sources c holds, released ones included.
func registered(c *Collector) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sources)
}

// TestReleasedPoolsForgotten: a scrape, or a read of the expvar Var, that finds a pool released
// unregisters it. Before, the scrape left released pools out but the collector kept them (and
// their pools' counters) in its map, which grew with every pool a program made and closed.
func TestReleasedPoolsForgotten(t *testing.T) {
	c := New()
	const n = 64
	var open []*pinned.Pool
	for i := range n {
		p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 8 << 20,
			PurgeDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddPool(fmt.Sprintf("pool%d", i), p); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 { // half are found released by the scrape, half by the Var
			open = append(open, p)
		} else if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := registered(c); got != n {
		t.Fatalf("%d sources registered; want %d", got, n)
	}
	testutil.CollectAndCount(c)
	if got := registered(c); got != n/2 {
		t.Errorf("after a scrape with %d pools released, %d sources stay; want %d", n/2, got, n/2)
	}
	if err := c.AddFunc("func", Host, func() Figures { return Figures{} }); err != nil {
		t.Fatal(err)
	}
	for _, p := range open {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Var().String()
	if got := registered(c); got != 1 {
		t.Errorf("after a Var read with every pool released, %d sources stay; want the func", got)
	}
}

// TestReleasedHeapAndTierForgotten: a device heap and a UVM tier closed, their memory given
// back, are unregistered by the next scrape, as a released pool; a heap whose memory the driver
// kept at Close stays registered (and scraped) until a later Close gives it back.
func TestReleasedHeapAndTierForgotten(t *testing.T) {
	dev, fake := cudatest.Device(t)
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
	if err := errors.Join(tier.Free(b), tier.Close()); err != nil {
		t.Fatal(err)
	}
	testutil.CollectAndCount(c)
	if got := registered(c); got != 1 {
		t.Errorf("the tier released: %d sources stay; want the heap alone", got)
	}
	p, err := h.Alloc(1<<20, 0) // memory committed, for Close to give back
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	// The unmap refused at the heap's purge, the handle's release at the arena's give-back.
	fake.FailNext(cudatest.MemUnmap, cudatest.InvalidValue)
	fake.FailNext(cudatest.MemRelease, cudatest.InvalidValue)
	if err := h.Close(); err == nil {
		t.Fatal("the heap's Close with the unmap refused succeeded")
	}
	testutil.CollectAndCount(c)
	if got := registered(c); got != 1 {
		t.Errorf("the heap closed, its memory kept: %d sources stay; want the heap", got)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("second Close of the heap: %v", err)
	}
	testutil.CollectAndCount(c)
	if got := registered(c); got != 0 {
		t.Errorf("the heap released: %d sources stay; want none", got)
	}
}
