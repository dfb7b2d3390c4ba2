package metrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pinmalloc/pinmalloc"
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
	// Trim gives back the freed 4 MiB and the free tail of the small buffers' page.
	purged := p.Stats().Purged
	if purged < 4<<20 {
		t.Fatalf("Trim purged %d bytes, want the freed 4 MiB at least", purged)
	}
	c := New()
	c.AddPool("staging", p)
	want := fmt.Sprintf(`
# HELP pinmalloc_host_allocs_total Number of allocations made.
# TYPE pinmalloc_host_allocs_total counter
pinmalloc_host_allocs_total{name="staging"} 4
# HELP pinmalloc_host_capacity_bytes Address space the pool may reserve, in bytes.
# TYPE pinmalloc_host_capacity_bytes gauge
pinmalloc_host_capacity_bytes{name="staging"} 6.7108864e+07
# HELP pinmalloc_host_frees_total Number of frees made.
# TYPE pinmalloc_host_frees_total counter
pinmalloc_host_frees_total{name="staging"} 1
# HELP pinmalloc_host_in_use_bytes Bytes asked for by live blocks.
# TYPE pinmalloc_host_in_use_bytes gauge
pinmalloc_host_in_use_bytes{name="staging"} 12288
# HELP pinmalloc_host_live_blocks Number of live blocks, deferred ones included.
# TYPE pinmalloc_host_live_blocks gauge
pinmalloc_host_live_blocks{name="staging"} 3
# HELP pinmalloc_host_locked_bytes Committed memory that is page-locked, in bytes.
# TYPE pinmalloc_host_locked_bytes gauge
pinmalloc_host_locked_bytes{name="staging"} 0
# HELP pinmalloc_host_pool_info Always 1, for each pinned pool; the labels are its backend and provider.
# TYPE pinmalloc_host_pool_info gauge
pinmalloc_host_pool_info{backend="pageable",name="staging",provider="pageable"} 1
# HELP pinmalloc_host_purged_bytes_total Bytes decommitted by purges and Trim.
# TYPE pinmalloc_host_purged_bytes_total counter
pinmalloc_host_purged_bytes_total{name="staging"} %v
# HELP pinmalloc_host_reserved_bytes Address space held in regions, in bytes.
# TYPE pinmalloc_host_reserved_bytes gauge
pinmalloc_host_reserved_bytes{name="staging"} 6.7108864e+07
`, strconv.FormatFloat(float64(purged), 'g', -1, 64))
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "pinmalloc_host_allocs_total", "pinmalloc_host_capacity_bytes",
		"pinmalloc_host_frees_total", "pinmalloc_host_in_use_bytes", "pinmalloc_host_live_blocks", "pinmalloc_host_locked_bytes",
		"pinmalloc_host_pool_info", "pinmalloc_host_purged_bytes_total", "pinmalloc_host_reserved_bytes"); err != nil {
		t.Error(err)
	}
	st := p.Stats()
	if got := testutil.ToFloat64(only(c, "pinmalloc_host_committed_bytes")); got != float64(st.Committed) || got == 0 {
		t.Errorf("committed %v, Stats says %d", got, st.Committed)
	}
	// pinmalloc_info, the pool's info, 20 families of host memory but quota_bytes (no quota).
	if n := testutil.CollectAndCount(c); n != 1+1+20 {
		t.Errorf("%d metrics for one pool without a quota, want 22", n)
	}
	if n := testutil.CollectAndCount(only(c, "pinmalloc_host_quota_bytes")); n != 0 {
		t.Errorf("%d quota series for a pool without a quota, want none", n)
	}
	lint(t, c)

	var js map[string]struct {
		Memory     string  `json:"memory"`
		Live       uint64  `json:"live"`
		InUse      uint64  `json:"in_use"`
		PeakInUse  uint64  `json:"peak_in_use"`
		CommitSecs float64 `json:"commit_seconds"`
	}
	if err := json.Unmarshal([]byte(c.Var().String()), &js); err != nil {
		t.Fatalf("expvar: %v: %s", err, c.Var().String())
	}
	if s := js["staging"]; s.Memory != "host" || s.Live != 3 || s.InUse != 12288 || s.PeakInUse == 0 {
		t.Errorf("expvar: %+v", js)
	}
	if v := c.Var().String(); strings.ContainsAny(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
		t.Errorf("expvar keys are not all snake_case: %s", v)
	}
	c.Remove("staging")
	if n := testutil.CollectAndCount(c); n != 1 {
		t.Errorf("%d metrics after Remove; want pinmalloc_info alone", n)
	}
	for _, b := range bufs {
		_ = p.Free(b)
	}
}

// lint checks c's metrics with client_golang's linter (promtool's rules) and a pedantic
// registry, and that every HELP is a sentence: a capital first letter and a full stop.
func lint(t *testing.T, c prometheus.Collector) {
	t.Helper()
	problems, err := testutil.CollectAndLint(c)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Errorf("gather: %v", err)
	}
	for _, f := range families {
		h := f.GetHelp()
		if h == "" || h[0] < 'A' || h[0] > 'Z' || !strings.HasSuffix(h, ".") || len(strings.Fields(h)) < 3 {
			t.Errorf("%s: HELP %q is not a sentence", f.GetName(), h)
		}
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
		Capacity: 1 << 30, Committed: 4000, Locked: 4000, Reserved: 1 << 30, Purged: 7, Decommits: 1, ForcedPurges: 2, CommitTime: time.Second,
		Counters: arena.ProviderStats{DriverCalls: 9, Syscalls: 4}}})
	if f.Committed != 4000 || f.Capacity != 1<<30 || f.DriverCalls != 9 || f.CommitSeconds != 1 || f.Purged != 7 || f.ForcedPurges != 2 || f.Live != 2 || f.PeakInUse != 3000 {
		t.Errorf("FromDevice: %+v", f)
	}
	if f.Locked != 0 || f.Syscalls != 0 {
		t.Errorf("FromDevice carries host figures: locked %d, syscalls %d", f.Locked, f.Syscalls)
	}
	s := uvm.Stats{Budget: 10, DeviceBytes: 4, HostBytes: 6, Blocks: 3, Hits: 5, Misses: 1, ThrashEvents: 2,
		HeldBackDeviceBytes: 7, HeldBackHostBytes: 8, PolicyErrors: 9}
	s.In[uvm.CauseAcquire] = uvm.Traffic{Blocks: 1, Bytes: 256}
	s.Out[uvm.CausePressure] = uvm.Traffic{Blocks: 2, Bytes: 512}
	tf := FromTier(s)
	if tf.Hits != 5 || tf.Blocks != 3 || tf.Budget != 10 || tf.HeldBackDeviceBytes != 7 || tf.HeldBackHostBytes != 8 || tf.PolicyErrors != 9 {
		t.Errorf("FromTier: %+v", tf)
	}
	moves := map[string]Move{}
	for _, m := range tf.Moves {
		moves[fmt.Sprintf("%v %s", m.ToDevice, m.Cause)] = m
	}
	if moves["true acquire"].Bytes != 256 || moves["false pressure"].Blocks != 2 || len(moves) != 6 {
		t.Errorf("FromTier moves: %+v; want acquire and prefetch to the device, pressure, heap-pressure, explicit and host off it", tf.Moves)
	}
	if _, ok := moves["true pressure"]; ok {
		t.Error("FromTier lists evictions for pressure toward the device")
	}
	s.AcquireLatency.Miss.Counts[0], s.AcquireLatency.Miss.Counts[2], s.AcquireLatency.Miss.Counts[uvm.LatencyBuckets-1] = 1, 2, 3
	s.AcquireLatency.Miss.Count, s.AcquireLatency.Miss.Sum = 6, 3*time.Second
	tf = FromTier(s)
	if len(tf.AcquireSeconds) != 3 || tf.AcquireSeconds[1].Outcome != "miss" {
		t.Fatalf("FromTier latency: %+v", tf.AcquireSeconds)
	}
	miss := tf.AcquireSeconds[1]
	if b := miss.Buckets; len(b) != uvm.LatencyBuckets-1 || b[0] != 1 || b[1] != 1 || b[2] != 3 || b[len(b)-1] != 3 ||
		miss.Count != 6 || miss.Sum != 3 || miss.UpperBounds[0] != 1e-7 || miss.UpperBounds[len(b)-1] != 1 {
		t.Errorf("FromTier miss latency (cumulative, in seconds): %+v", miss)
	}

	c := New()
	c.AddFunc("custom", Device, func() Figures { return f })
	if n := testutil.CollectAndCount(only(c, "pinmalloc_device_committed_bytes")); n != 1 {
		t.Errorf("%d device committed series; want 1", n)
	}
	for _, name := range []string{"pinmalloc_device_locked_bytes", "pinmalloc_device_syscalls_total", "pinmalloc_device_deferred_bytes", "pinmalloc_host_committed_bytes"} {
		if n := testutil.CollectAndCount(only(c, name)); n != 0 {
			t.Errorf("%d series of %s for a device source; want none", n, name)
		}
	}
	lint(t, c)
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
		"AddFunc name":    c.AddFunc(bad, Host, func() Figures { return Figures{} }),
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
	c.sources[bad] = &source{mem: Host,
		heap: func() (Figures, []string, bool) { return Figures{Live: 1}, nil, true }}
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

// TestNilSources: a nil pool, heap, tier or function is refused by its Add method with
// ErrNilSource, and the scrapes go on. It was registered, and the next scrape dereferenced it
// in the registry's goroutine: a panic that ended the process.
func TestNilSources(t *testing.T) {
	c := New()
	for what, err := range map[string]error{
		"AddPool":   c.AddPool("p", nil),
		"AddDevice": c.AddDevice("d", nil),
		"AddTier":   c.AddTier("t", nil),
		"AddFunc":   c.AddFunc("f", Device, nil),
	} {
		if !errors.Is(err, ErrNilSource) || !errors.Is(err, pinmalloc.ErrInvalid) {
			t.Errorf("%s(nil) = %v; want ErrNilSource", what, err)
		}
	}
	if n := len(c.list()); n != 0 {
		t.Fatalf("%d nil sources registered", n)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	_ = c.Var().String()
}
