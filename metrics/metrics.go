// Package metrics exports the figures of pinmalloc's pools, device heaps and UVM tiers to
// Prometheus (a prometheus.Collector) and to expvar. It is the only package of pinmalloc that
// imports github.com/prometheus/client_golang: programs that do not import it do not link it.
//
//	c := metrics.New()
//	err := c.AddPool("staging", pool) // ErrInvalidName for a name that is not UTF-8
//	prometheus.MustRegister(c)        // and/or: expvar.Publish("pinmalloc", c.Var())
//
// Every metric is named pinmalloc_..., with the labels name (what the source was registered
// as) and type ("pinned", "device" or "uvm"); sizes are _bytes, counts of events _total,
// following Prometheus' conventions. A scrape calls each source's Stats once, which takes the
// pool's or heap's locks briefly (it collects frees other goroutines made, as Stats does);
// nothing is measured between scrapes.
//
// A scrape never panics: the label values (a source's name and type) must be valid UTF-8, and
// the Add methods refuse others with ErrInvalidName; a metric that still cannot be made is
// reported to the registry as an invalid metric (an error of Gather), not with a Must call.
package metrics

import (
	"errors"
	"expvar"
	"fmt"
	"sort"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// Figures are the values a source reports at one scrape. A field that does not apply to the
// source (locked memory of a device heap) is zero.
type Figures struct {
	// Memory, in bytes.
	Reserved, Committed, PeakCommitted, Locked, InUse, PeakInUse, AlignWaste uint64
	// Fragmentation is committed memory over the bytes in use (1 is perfect; 0 when nothing
	// is in use).
	Fragmentation float64
	// Live is the number of live blocks.
	Live uint64
	// Deferred is the number of blocks freed whose reuse waits for a CUDA stream to pass the
	// free (pools: FreeAsync, or Free of a buffer a stream used; device heaps: FreeAsync on
	// another stream), part of Live; DeferredBytes their bytes (pools only).
	Deferred, DeferredBytes uint64
	// Counters.
	Allocs, Frees, Decommits, Purged, ForcedPurges, DriverCalls, Syscalls uint64
	// CommitSeconds is the time spent committing (and pinning) memory.
	CommitSeconds float64
}

// FromPool converts a pool's Stats.
func FromPool(s pinned.Stats) Figures {
	return Figures{
		Reserved: s.Reserved, Committed: s.Committed, PeakCommitted: s.PeakCommitted, Locked: s.Locked,
		InUse: s.InUse, PeakInUse: s.PeakInUse, AlignWaste: s.AlignWaste, Fragmentation: s.Fragmentation,
		Live: s.Live, Deferred: s.Deferred, DeferredBytes: s.DeferredBytes,
		Allocs: s.Allocs, Frees: s.Frees, Decommits: s.Decommits, Purged: s.Purged,
		ForcedPurges: s.ForcedPurges, DriverCalls: s.DriverCalls, Syscalls: s.Syscalls,
		CommitSeconds: s.CommitTime.Seconds(),
	}
}

// FromDevice converts a device heap's Stats.
func FromDevice(s device.Stats) Figures {
	a := s.Arena
	f := Figures{
		Reserved: a.Reserved, Committed: a.Committed, PeakCommitted: a.PeakCommitted, Locked: a.Locked,
		InUse: s.InUse, PeakInUse: s.PeakInUse, AlignWaste: a.AlignWaste, Live: s.Live, Deferred: uint64(s.Deferred), Allocs: s.Allocs, Frees: s.Frees,
		Decommits: a.Decommits, Purged: a.Purged, ForcedPurges: a.ForcedPurges,
		DriverCalls: a.Counters.DriverCalls, Syscalls: a.Counters.Syscalls, CommitSeconds: a.CommitTime.Seconds(),
	}
	if s.InUse > 0 {
		f.Fragmentation = float64(a.Committed) / float64(s.InUse)
	}
	return f
}

// TierFigures are the values of a UVM tier.
type TierFigures struct {
	// Budget is the device budget; DeviceBytes, HostBytes the bytes of blocks on the device
	// and only on the host; Blocks the live blocks.
	Budget, DeviceBytes, HostBytes uint64
	Blocks                         int
	// Hits, Misses count Acquire calls; InBytes and OutBytes the bytes moved to and from the
	// device; ThrashEvents the blocks found thrashing; Failures the batches that failed.
	Hits, Misses, InBytes, OutBytes, ThrashEvents, Failures uint64
}

// FromTier converts a tier's Stats.
func FromTier(s uvm.Stats) TierFigures {
	return TierFigures{
		Budget: s.Budget, DeviceBytes: s.DeviceBytes, HostBytes: s.HostBytes, Blocks: s.Blocks,
		Hits: s.Hits, Misses: s.Misses, InBytes: s.Moved(true).Bytes, OutBytes: s.Moved(false).Bytes,
		ThrashEvents: s.ThrashEvents, Failures: s.Failures,
	}
}

// Collector collects the figures of the sources registered with it. It implements
// prometheus.Collector and is safe for concurrent use; use New.
type Collector struct {
	mu      sync.Mutex
	sources map[string]source
}

type source struct {
	typ  string
	heap func() Figures     // pools and device heaps
	tier func() TierFigures // tiers
}

// ErrInvalidName means a source name or type that cannot be a Prometheus label value (it is
// not valid UTF-8); nothing was registered.
var ErrInvalidName = errors.New("metrics: invalid source name")

// New returns a collector with nothing registered.
func New() *Collector { return &Collector{sources: map[string]source{}} }

// AddPool registers a pinned pool under name (replacing any source of that name). It fails
// with ErrInvalidName for a name that is not valid UTF-8.
func (c *Collector) AddPool(name string, p *pinned.Pool) error {
	return c.add(name, source{typ: "pinned", heap: func() Figures { return FromPool(p.Stats()) }})
}

// AddDevice registers a device heap under name. Errors as for AddPool.
func (c *Collector) AddDevice(name string, h *device.Heap) error {
	return c.add(name, source{typ: "device", heap: func() Figures { return FromDevice(h.Stats()) }})
}

// AddTier registers a UVM tier under name. Errors as for AddPool.
func (c *Collector) AddTier(name string, t *uvm.Tier) error {
	return c.add(name, source{typ: "uvm", tier: func() TierFigures { return FromTier(t.Stats()) }})
}

// AddFunc registers any source of Figures under name, with type as its type label. It fails
// with ErrInvalidName when name or type is not valid UTF-8.
func (c *Collector) AddFunc(name, typ string, f func() Figures) error {
	return c.add(name, source{typ: typ, heap: f})
}

// Remove unregisters name (before its pool or heap is closed).
func (c *Collector) Remove(name string) {
	c.mu.Lock()
	delete(c.sources, name)
	c.mu.Unlock()
}

func (c *Collector) add(name string, s source) error {
	for _, v := range []string{name, s.typ} {
		if !utf8.ValidString(v) {
			return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidName, v)
		}
	}
	c.mu.Lock()
	c.sources[name] = s
	c.mu.Unlock()
	return nil
}

// named is a source with its name, in name order.
type named struct {
	name string
	source
}

func (c *Collector) list() []named {
	c.mu.Lock()
	out := make([]named, 0, len(c.sources))
	for n, s := range c.sources {
		out = append(out, named{n, s})
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// metric describes one exported value.
type metric struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	heap func(Figures) float64
	tier func(TierFigures) float64
}

var labels = []string{"name", "type"}

func gauge(name, help string, f func(Figures) float64) metric {
	return metric{desc: prometheus.NewDesc("pinmalloc_"+name, help, labels, nil), kind: prometheus.GaugeValue, heap: f}
}

func counter(name, help string, f func(Figures) float64) metric {
	return metric{desc: prometheus.NewDesc("pinmalloc_"+name, help, labels, nil), kind: prometheus.CounterValue, heap: f}
}

func tierMetric(name, help string, kind prometheus.ValueType, f func(TierFigures) float64) metric {
	return metric{desc: prometheus.NewDesc("pinmalloc_uvm_"+name, help, labels, nil), kind: kind, tier: f}
}

var all = []metric{
	gauge("reserved_bytes", "Address space held in regions.", func(f Figures) float64 { return float64(f.Reserved) }),
	gauge("committed_bytes", "Memory backed by the provider (locked, for locked memory).", func(f Figures) float64 { return float64(f.Committed) }),
	gauge("committed_peak_bytes", "Highest committed memory.", func(f Figures) float64 { return float64(f.PeakCommitted) }),
	gauge("locked_bytes", "Committed memory that is page-locked.", func(f Figures) float64 { return float64(f.Locked) }),
	gauge("in_use_bytes", "Bytes asked for by live blocks.", func(f Figures) float64 { return float64(f.InUse) }),
	gauge("in_use_peak_bytes", "Highest bytes in use (the sum of each shard's or stream's peak).", func(f Figures) float64 { return float64(f.PeakInUse) }),
	gauge("alignment_waste_bytes", "Memory made unusable to meet alignment.", func(f Figures) float64 { return float64(f.AlignWaste) }),
	gauge("fragmentation_ratio", "Committed memory over bytes in use (1 is perfect, 0 when nothing is in use).", func(f Figures) float64 { return f.Fragmentation }),
	gauge("live_blocks", "Live blocks.", func(f Figures) float64 { return float64(f.Live) }),
	gauge("deferred_blocks", "Blocks freed whose reuse waits for a CUDA stream (part of live_blocks).", func(f Figures) float64 { return float64(f.Deferred) }),
	gauge("deferred_bytes", "Bytes of the deferred blocks (pools).", func(f Figures) float64 { return float64(f.DeferredBytes) }),
	counter("allocs_total", "Allocations.", func(f Figures) float64 { return float64(f.Allocs) }),
	counter("frees_total", "Frees.", func(f Figures) float64 { return float64(f.Frees) }),
	counter("decommits_total", "Decommit calls made by purges and Trim.", func(f Figures) float64 { return float64(f.Decommits) }),
	counter("purged_bytes_total", "Bytes decommitted by purges and Trim.", func(f Figures) float64 { return float64(f.Purged) }),
	counter("forced_purges_total", "Commits refused for want of memory after which the free memory kept was given back at once.", func(f Figures) float64 { return float64(f.ForcedPurges) }),
	counter("driver_calls_total", "CUDA driver calls that allocated, registered, mapped or freed memory.", func(f Figures) float64 { return float64(f.DriverCalls) }),
	counter("syscalls_total", "System calls of the host provider (mmap, mlock, madvise...).", func(f Figures) float64 { return float64(f.Syscalls) }),
	counter("commit_seconds_total", "Time spent committing (and pinning) memory.", func(f Figures) float64 { return f.CommitSeconds }),

	tierMetric("budget_bytes", "Device budget of the tier.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.Budget) }),
	tierMetric("device_bytes", "Bytes of blocks on the device.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.DeviceBytes) }),
	tierMetric("host_bytes", "Bytes of blocks only on the host.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.HostBytes) }),
	tierMetric("blocks", "Live blocks of the tier.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.Blocks) }),
	tierMetric("hits_total", "Acquire calls that found the block on the device.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.Hits) }),
	tierMetric("misses_total", "Acquire calls that did not.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.Misses) }),
	tierMetric("moved_in_bytes_total", "Bytes moved to the device.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.InBytes) }),
	tierMetric("moved_out_bytes_total", "Bytes moved from the device.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.OutBytes) }),
	tierMetric("thrash_events_total", "Blocks found thrashing.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.ThrashEvents) }),
	tierMetric("failures_total", "Batches of copies that failed.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.Failures) }),
}

// Describe sends the descriptions of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range all {
		ch <- m.desc
	}
}

// Collect reads every source once and sends its metrics. A metric that cannot be made is
// sent as an invalid metric, which the registry's Gather reports as an error.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.list() {
		if s.heap != nil {
			f := s.heap()
			for _, m := range all {
				if m.heap != nil {
					ch <- constMetric(m, m.heap(f), s)
				}
			}
			continue
		}
		f := s.tier()
		for _, m := range all {
			if m.tier != nil {
				ch <- constMetric(m, m.tier(f), s)
			}
		}
	}
}

// constMetric is m's value v for source s, or an invalid metric saying why it cannot be made
// (a scrape runs in the registry's goroutines: a panic there ends the process).
func constMetric(m metric, v float64, s named) prometheus.Metric {
	cm, err := prometheus.NewConstMetric(m.desc, m.kind, v, s.name, s.typ)
	if err != nil {
		return prometheus.NewInvalidMetric(m.desc, fmt.Errorf("%w: source %q: %w", ErrInvalidName, s.name, err))
	}
	return cm
}

// Var returns an expvar.Var whose value is every source's figures, by name, as JSON (an
// object with the source's type and its Figures or TierFigures). Publish it with
// expvar.Publish.
func (c *Collector) Var() expvar.Var {
	return expvar.Func(func() any {
		out := map[string]any{}
		for _, s := range c.list() {
			if s.heap != nil {
				out[s.name] = struct {
					Type string
					Figures
				}{s.typ, s.heap()}
			} else {
				out[s.name] = struct {
					Type string
					TierFigures
				}{s.typ, s.tier()}
			}
		}
		return out
	})
}
