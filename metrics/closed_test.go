package metrics

import (
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pinmalloc/pinmalloc/pinned"
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
