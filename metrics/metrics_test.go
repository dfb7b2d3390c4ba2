package metrics

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

func newPool(t *testing.T) *pinned.Pool {
	t.Helper()
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 64 << 20, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestCollector(t *testing.T) {
	p := newPool(t)
	var bufs [][]byte
	for i := 0; i < 3; i++ {
		b, err := p.Alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	big, _ := p.Alloc(4 << 20)
	if err := p.Free(big); err != nil {
		t.Fatal(err)
	}
	p.Trim()
	c := New()
	c.AddPool("staging", p)
	want := `
# HELP pinmalloc_allocs_total Allocations.
# TYPE pinmalloc_allocs_total counter
pinmalloc_allocs_total{name="staging",type="pinned"} 4
# HELP pinmalloc_frees_total Frees.
# TYPE pinmalloc_frees_total counter
pinmalloc_frees_total{name="staging",type="pinned"} 1
# HELP pinmalloc_in_use_bytes Bytes asked for by live blocks.
# TYPE pinmalloc_in_use_bytes gauge
pinmalloc_in_use_bytes{name="staging",type="pinned"} 12288
# HELP pinmalloc_live_blocks Live blocks.
# TYPE pinmalloc_live_blocks gauge
pinmalloc_live_blocks{name="staging",type="pinned"} 3
# HELP pinmalloc_locked_bytes Committed memory that is page-locked.
# TYPE pinmalloc_locked_bytes gauge
pinmalloc_locked_bytes{name="staging",type="pinned"} 0
# HELP pinmalloc_purged_bytes_total Bytes decommitted by purges and Trim.
# TYPE pinmalloc_purged_bytes_total counter
pinmalloc_purged_bytes_total{name="staging",type="pinned"} 4.194304e+06
# HELP pinmalloc_reserved_bytes Address space held in regions.
# TYPE pinmalloc_reserved_bytes gauge
pinmalloc_reserved_bytes{name="staging",type="pinned"} 6.7108864e+07
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "pinmalloc_allocs_total", "pinmalloc_frees_total",
		"pinmalloc_in_use_bytes", "pinmalloc_live_blocks", "pinmalloc_locked_bytes", "pinmalloc_purged_bytes_total",
		"pinmalloc_reserved_bytes"); err != nil {
		t.Error(err)
	}
	st := p.Stats()
	if got := testutil.ToFloat64(only(c, "pinmalloc_committed_bytes")); got != float64(st.Committed) || got == 0 {
		t.Errorf("committed %v, Stats says %d", got, st.Committed)
	}
	if n := testutil.CollectAndCount(c); n != 19 {
		t.Errorf("%d metrics for one pool, want 19", n)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gather: %v", err)
	}

	var js map[string]struct {
		Type        string
		Live, InUse uint64
	}
	if err := json.Unmarshal([]byte(c.Var().String()), &js); err != nil {
		t.Fatalf("expvar: %v: %s", err, c.Var().String())
	}
	if s := js["staging"]; s.Type != "pinned" || s.Live != 3 || s.InUse != 12288 {
		t.Errorf("expvar: %+v", js)
	}
	c.Remove("staging")
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("%d metrics after Remove", n)
	}
	for _, b := range bufs {
		_ = p.Free(b)
	}
}

// only is a collector of c's metric called name alone.
func only(c *Collector, name string) prometheus.Collector {
	return prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		all := make(chan prometheus.Metric)
		go func() { c.Collect(all); close(all) }()
		for m := range all {
			if strings.Contains(m.Desc().String(), `"`+name+`"`) {
				ch <- m
			}
		}
	})
}

func TestFromDeviceAndTier(t *testing.T) {
	f := FromDevice(device.Stats{Live: 2, InUse: 1000, PeakInUse: 3000, Allocs: 5, Frees: 3, Arena: arena.Stats{
		Committed: 4000, Reserved: 1 << 30, Purged: 7, Decommits: 1, ForcedPurges: 2, CommitTime: time.Second,
		Counters: arena.ProviderStats{DriverCalls: 9}}})
	if f.Fragmentation != 4 || f.Committed != 4000 || f.DriverCalls != 9 || f.CommitSeconds != 1 || f.Purged != 7 || f.ForcedPurges != 2 || f.Live != 2 || f.PeakInUse != 3000 {
		t.Errorf("FromDevice: %+v", f)
	}
	s := uvm.Stats{Budget: 10, DeviceBytes: 4, HostBytes: 6, Blocks: 3, Hits: 5, Misses: 1, ThrashEvents: 2}
	s.In[uvm.CauseAcquire] = uvm.Traffic{Blocks: 1, Bytes: 256}
	s.Out[uvm.CausePressure] = uvm.Traffic{Blocks: 2, Bytes: 512}
	tf := FromTier(s)
	if tf.InBytes != 256 || tf.OutBytes != 512 || tf.Hits != 5 || tf.Blocks != 3 || tf.Budget != 10 {
		t.Errorf("FromTier: %+v", tf)
	}
	c := New()
	c.AddFunc("custom", "device", func() Figures { return f })
	if got := testutil.ToFloat64(only(c, "pinmalloc_fragmentation_ratio")); got != 4 {
		t.Errorf("fragmentation %v", got)
	}
}

// TestInvalidNames: a name or type that is not valid UTF-8 is refused by every Add method
// (a Prometheus label value must be UTF-8: MustNewConstMetric panicked in the registry's
// goroutine at the next scrape, ending the process); one that reaches a scrape anyway makes
// Gather fail, without a panic, and the other sources are still gathered.
func TestInvalidNames(t *testing.T) {
	p := newPool(t)
	c := New()
	const bad = "staging\xff"
	for what, err := range map[string]error{
		"AddPool":         c.AddPool(bad, p),
		"AddDevice":       c.AddDevice(bad, nil),
		"AddTier":         c.AddTier(bad, nil),
		"AddFunc name":    c.AddFunc(bad, "custom", func() Figures { return Figures{} }),
		"AddFunc type":    c.AddFunc("custom", "type\xfe", func() Figures { return Figures{} }),
		"AddPool (valid)": c.AddPool("staging", p),
	} {
		if want := what != "AddPool (valid)"; errors.Is(err, ErrInvalidName) != want {
			t.Errorf("%s: %v (want ErrInvalidName: %v)", what, err, want)
		}
	}
	if n := len(c.list()); n != 1 {
		t.Fatalf("%d sources registered, want 1 (the valid one)", n)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("Gather with valid names: %v", err)
	}
	// Past the Add methods (as a source added by a future path might be): the scrape reports it.
	c.mu.Lock()
	c.sources[bad] = source{typ: "pinned", heap: func() Figures { return Figures{Live: 1} }}
	c.mu.Unlock()
	families, err := reg.Gather()
	if err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("Gather with an invalid name: %v", err)
	}
	found := false
	for _, f := range families {
		for _, m := range f.GetMetric() {
			found = found || m.GetLabel()[0].GetValue() == "staging"
		}
	}
	if !found {
		t.Error("the valid source was not gathered beside the invalid one")
	}
}
