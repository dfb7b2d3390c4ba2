package debugpage

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
)

// TestFakeClosedHeapAndTier: a UVM tier and a device heap closed while registered drop off the
// page, stats.json and map.svg once they have given their memory back (Stats.Released), as
// they drop out of package metrics' scrape; a heap whose Close the driver refused to give its
// memory back stays until a later Close does. Before, closed heaps and tiers were shown for
// ever, their figures standing, as if live.
func TestFakeClosedHeapAndTier(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	ts := newTierScene(t, dev, 2)
	dp := New()
	for _, err := range []error{dp.AddTier("kv", ts.tier), dp.AddDevice("vram", ts.heap)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	url := serve(t, dp)
	shown := func(when string, kv, vram bool) {
		t.Helper()
		page, _ := get(t, url)
		js, _ := get(t, url+"stats.json")
		svg, _ := get(t, url+"map.svg")
		for _, c := range []struct {
			what      string
			got, want bool
		}{
			{"the page shows kv", strings.Contains(page, "<h2>kv (uvm)</h2>"), kv},
			{"stats.json has kv", strings.Contains(js, `"name": "kv"`), kv},
			{"the page shows vram", strings.Contains(page, "<h2>vram (device)</h2>"), vram},
			{"stats.json has vram", strings.Contains(js, `"name": "vram"`), vram},
			{"map.svg draws vram", strings.Contains(svg, ">vram: "), vram},
		} {
			if c.got != c.want {
				t.Errorf("%s: %s is %v, want %v", when, c.what, c.got, c.want)
			}
		}
	}
	shown("open", true, true)
	for _, b := range ts.blocks {
		if err := ts.tier.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(ts.tier.ForgetStream(ts.s), ts.tier.Close()); err != nil {
		t.Fatal(err)
	}
	shown("the tier closed", false, true)
	if err := errors.Join(ts.heap.ForgetStream(ts.s), dev.StreamDestroy(ts.s)); err != nil {
		t.Fatal(err)
	}
	// The unmap refused at the heap's purge, the handle's release at the arena's give-back.
	fake.FailNext(cudatest.MemUnmap, cudatest.InvalidValue)
	fake.FailNext(cudatest.MemRelease, cudatest.InvalidValue)
	if err := ts.heap.Close(); err == nil {
		t.Fatal("the heap's Close with the unmap refused succeeded")
	}
	shown("the heap closed, its memory kept", false, true)
	if err := ts.heap.Close(); err != nil {
		t.Fatalf("second Close of the heap: %v", err)
	}
	shown("the heap closed, its memory given back", false, false)
	if err := dp.AddTier("kv", ts.tier); err != nil { // a closed tier added again: not shown
		t.Fatal(err)
	}
	shown("the closed tier added again", false, false)
}
