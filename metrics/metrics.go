// Package metrics exports the figures of pinmalloc's pools, device heaps and UVM tiers to
// Prometheus (a prometheus.Collector) and to expvar. It is the only package of pinmalloc that
// imports github.com/prometheus/client_golang: programs that do not import it do not link it.
//
//	c := metrics.New()
//	err := c.AddPool("staging", pool) // ErrInvalidName for a name that is not UTF-8
//	prometheus.MustRegister(c)        // and/or: expvar.Publish("pinmalloc", c.Var())
//
// A registry takes one Collector: every Collector describes the same families, so a second
// one's Register fails (prometheus.AlreadyRegisteredError). A program registers all its
// sources with one Collector, under distinct names. A pool, device heap or tier closed while
// registered drops out of the scrape once its memory is given back (AddPool, AddDevice,
// AddTier); Remove ends a source's series sooner.
//
// # Families
//
// Host memory (pinned pools) and device memory (device heaps) are separate families,
// pinmalloc_host_... and pinmalloc_device_..., so that sum(pinmalloc_host_committed_bytes) is
// the host memory committed and never adds VRAM to it; families that cannot apply to a kind of
// memory do not exist for it (device memory has no locked_bytes or syscalls_total). UVM tiers
// are pinmalloc_uvm_..., their moves counted by direction and cause. Every series has the
// label name, what the source was registered as. Sizes are _bytes, counters _total, following
// Prometheus' naming practice:
//
//	pinmalloc_info{version}                           always 1
//	pinmalloc_host_pool_info{name,backend,provider}   always 1, per pool
//	pinmalloc_host_{capacity,quota,reserved,committed,committed_peak,in_use,in_use_peak,
//	  alignment_waste,locked,deferred}_bytes, _live_blocks, _deferred_blocks,
//	  _{allocs,frees,decommits,decommits_refused,purged_bytes,forced_purges,driver_calls,syscalls,
//	    commit_seconds}_total
//	pinmalloc_device_heap_info{name,device,provider}  always 1, per device heap
//	pinmalloc_device_...                              as host, without locked_bytes,
//	                                                  deferred_bytes and syscalls_total
//	pinmalloc_uvm_tier_info{name,policy,mover}        always 1, per tier
//	pinmalloc_uvm_{budget,device,host,fresh,host_held,spare,acquired,held_back_device,
//	  held_back_host}_bytes, _blocks,
//	  _pending_batches, _{hits,misses,allocs,frees,thrash_events,heap_pressure,failures,
//	  clean_evictions,policy_errors}_total
//	pinmalloc_uvm_moved_{blocks,bytes}_total{name,direction,cause}
//	pinmalloc_uvm_acquire_seconds{name,outcome}       histogram of Acquire, outcome hit or miss
//	pinmalloc_uvm_acquire_host_seconds{name}          histogram of AcquireHost
//
// quota_bytes is absent for a source without a quota. No ratio is exported: the fragmentation
// of a pool is pinmalloc_host_committed_bytes / pinmalloc_host_in_use_bytes in PromQL, which
// is undefined, not zero, when nothing is in use. The latency histograms count successful
// calls only, from the call to the tier's lock let go (a restore's copy is queued, not
// waited for), in uvm's fixed buckets from 100 ns to 1 s (uvm.LatencyBounds).
//
// # Cost
//
// A scrape calls each source's Stats once, which takes the pool's or heap's locks briefly (it
// collects frees other goroutines made, as Stats does); nothing is measured between scrapes.
//
// # Errors
//
// A scrape never panics: the label values (a source's name) must be valid UTF-8, and the Add
// methods refuse others with ErrInvalidName, and a nil source with ErrNilSource; the labels a
// source describes itself with (a Provider's or Policy's name) are made valid, U+FFFD in place
// of the bytes that are not; a metric that still cannot be made is reported to the registry as
// an invalid metric (an error of Gather), not with a Must call.
package metrics

import (
	"expvar"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// Memory says what memory a source given to AddFunc holds, which decides its families.
type Memory uint8

const (
	// Host memory: the pinmalloc_host_ families.
	Host Memory = iota
	// Device memory: the pinmalloc_device_ families.
	Device
)

// String returns "host" or "device".
func (m Memory) String() string {
	if m == Device {
		return "device"
	}
	return "host"
}

// Collector collects the figures of the sources registered with it. It implements
// prometheus.Collector and is safe for concurrent use; use New.
type Collector struct {
	mu      sync.Mutex
	sources map[string]*source
}

// source is one registered pool, heap or tier.
type source struct {
	mem Memory
	// heap reads a pool or device heap: its figures and info labels (nil: no info), and
	// whether it is still there to report (false: a pool or heap whose memory is released).
	heap func() (Figures, []string, bool)
	// tier reads a tier: its figures, and whether it is still there (false: closed, released).
	tier func() (TierFigures, bool)
	// carry keeps the counters of a function's figures from going down (AddFunc; nil for a
	// pool's or heap's, whose counters only grow).
	carry *carry
}

// ErrInvalidName means a source name that cannot be a Prometheus label value (it is not valid
// UTF-8); nothing was registered.
var ErrInvalidName = errkind.New(pinmalloc.ErrInvalid, "metrics: invalid source name")

// ErrNilSource means a nil pool, heap, tier or function given to an Add method (the next scrape
// would have dereferenced it, in the registry's goroutine); nothing was registered.
var ErrNilSource = errkind.New(pinmalloc.ErrInvalid, "metrics: nil source")

// New returns a collector with nothing registered.
func New() *Collector { return &Collector{sources: map[string]*source{}} }

// AddPool registers a pinned pool under name (replacing any source of that name). It fails
// with ErrInvalidName for a name that is not valid UTF-8, and with ErrNilSource for a nil pool.
//
// A pool closed while registered is reported until its memory is released (at Close, or at
// the Free of its last live buffer after Close), and then no more: the scrape or Var read that
// finds it released leaves it out and unregisters it, as Remove does, so its series end,
// rather than its counters going back to zero.
func (c *Collector) AddPool(name string, p *pinned.Pool) error {
	return c.add(name, p == nil, &source{mem: Host, heap: func() (Figures, []string, bool) {
		st := p.Stats()
		if st.Released {
			return Figures{}, nil, false
		}
		f := FromPool(st)
		f.Quota = uint64(max(p.Quota(), 0))
		return f, []string{st.Backend.String(), st.Provider}, true
	}})
}

// AddDevice registers a device heap under name. Errors as for AddPool.
//
// A heap closed while registered is reported until its memory is given back (Close, or a later
// Close where the driver refused it), and then no more, as a released pool.
func (c *Collector) AddDevice(name string, h *device.Heap) error {
	return c.add(name, h == nil, &source{mem: Device, heap: func() (Figures, []string, bool) {
		st := h.Stats()
		if st.Released {
			return Figures{}, nil, false
		}
		f := FromDevice(st)
		f.Quota = uint64(h.Quota())
		return f, []string{strconv.Itoa(h.Device().Ordinal()), st.Arena.Provider}, true
	}})
}

// AddTier registers a UVM tier under name. Errors as for AddPool.
//
// A tier closed while registered is reported until it has given back all it held (Close, or a
// later Close where the first kept memory), and then no more, as a released pool.
func (c *Collector) AddTier(name string, t *uvm.Tier) error {
	return c.add(name, t == nil, &source{tier: func() (TierFigures, bool) {
		st := t.Stats()
		if st.Released {
			return TierFigures{}, false
		}
		return FromTier(st), true
	}})
}

// AddFunc registers any source of Figures under name, in the families of mem. Errors as for
// AddPool. A CommitSeconds f reports negative, NaN or infinite, which no counter can be,
// leaves commit_seconds_total out of that scrape, and is 0 in Var.
//
// A counter (Allocs, Frees, ..., CommitSeconds) that f reports below its figure at the last
// scrape is not exported lower, as Prometheus counters do not go down: the scrape counts on
// from the highest figure, adding what f counts after the drop. Of two scrapes at once, a read
// of f older than the one the other scrape already exported is not taken for a drop: the
// counter stays at the later figure. Var reports f's figures as they are. A source added again
// under its name starts afresh.
func (c *Collector) AddFunc(name string, mem Memory, f func() Figures) error {
	return c.add(name, f == nil, &source{mem: mem, carry: &carry{},
		heap: func() (Figures, []string, bool) { return f(), nil, true }})
}

// Remove unregisters name. A pool, device heap or tier closed while registered need not be
// removed: it drops out of the scrape, and is unregistered, once its memory is released (see
// AddPool, AddDevice and AddTier). Remove stops reporting a source before that, or one added
// with AddFunc.
func (c *Collector) Remove(name string) {
	c.mu.Lock()
	delete(c.sources, name)
	c.mu.Unlock()
}

// add registers s under name; isNil says the pool, heap, tier or function s reads is nil.
func (c *Collector) add(name string, isNil bool, s *source) error {
	switch {
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidName, name)
	case isNil:
		return fmt.Errorf("%w: %q not added", ErrNilSource, name)
	}
	c.mu.Lock()
	c.sources[name] = s
	c.mu.Unlock()
	return nil
}

// named is a source with its name, in name order.
type named struct {
	name string
	*source
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

// forget unregisters s, found released, unless a source added since has replaced it: a
// collector that kept released sources grew with every pool, heap or tier a program made and
// closed, and kept them reachable.
func (c *Collector) forget(s named) {
	c.mu.Lock()
	if c.sources[s.name] == s.source {
		delete(c.sources, s.name)
	}
	c.mu.Unlock()
}

// Describe sends the descriptions of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{infoDesc, poolInfoDesc, heapInfoDesc, tierInfoDesc, movedBlocksDsc, movedBytesDsc, acquireSecondsDesc, acquireHostSecondsDesc} {
		ch <- d
	}
	for _, fs := range [][]family{hostFamilies, deviceFamilies} {
		for _, f := range fs {
			ch <- f.desc
		}
	}
	for _, f := range tierFamilies {
		ch <- f.desc
	}
}

// Collect reads every source once and sends its metrics, after pinmalloc_info. A metric that
// cannot be made is sent as an invalid metric, which the registry's Gather reports as an error.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ch <- constMetric(infoDesc, prometheus.GaugeValue, 1, version())
	for _, s := range c.list() {
		if s.tier != nil {
			if f, ok := s.tier(); ok {
				collectTier(ch, s.name, f)
			} else {
				c.forget(s)
			}
			continue
		}
		var read uint64
		if s.carry != nil {
			read = s.carry.begin()
		}
		f, info, ok := s.heap()
		if !ok {
			c.forget(s)
			continue
		}
		fams, infoDsc := hostFamilies, poolInfoDesc
		if s.mem == Device {
			fams, infoDsc = deviceFamilies, heapInfoDesc
		}
		if info != nil {
			labels := []string{s.name}
			for _, v := range info {
				labels = append(labels, validLabel(v))
			}
			ch <- constMetric(infoDsc, prometheus.GaugeValue, 1, labels...)
		}
		for i, m := range fams {
			if m.omit != nil && m.omit(f) {
				continue
			}
			v := m.value(f)
			if m.kind == prometheus.CounterValue && s.carry != nil {
				v = s.carry.counter(read, i, v)
			}
			ch <- constMetric(m.desc, m.kind, v, s.name)
		}
	}
}

// collectTier sends the metrics of the tier called name.
func collectTier(ch chan<- prometheus.Metric, name string, f TierFigures) {
	ch <- constMetric(tierInfoDesc, prometheus.GaugeValue, 1,
		name, validLabel(f.Policy), validLabel(f.Mover))
	for _, m := range tierFamilies {
		ch <- constMetric(m.desc, m.kind, m.value(f), name)
	}
	for _, mv := range f.Moves {
		dir := "to_host"
		if mv.ToDevice {
			dir = "to_device"
		}
		cause := validLabel(mv.Cause)
		ch <- constMetric(movedBlocksDsc, prometheus.CounterValue, float64(mv.Blocks), name, dir, cause)
		ch <- constMetric(movedBytesDsc, prometheus.CounterValue, float64(mv.Bytes), name, dir, cause)
	}
	collectLatency(ch, name, f.AcquireSeconds)
}

// validLabel returns a label value a source describes itself with (its backend, provider,
// policy, mover, a cause), the program's own text that no Add method saw, as valid UTF-8: the
// bytes that are not become U+FFFD. An invalid value made the metric invalid, and Gather's
// error failed the whole scrape of the registry (promhttp's default), for a Policy's name.
func validLabel(v string) string { return strings.ToValidUTF8(v, "\uFFFD") }

// constMetric is the metric of desc with value v and the label values, or an invalid metric
// saying why it cannot be made (a scrape runs in the registry's goroutines: a panic there ends
// the process).
func constMetric(desc *prometheus.Desc, kind prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	cm, err := prometheus.NewConstMetric(desc, kind, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, fmt.Errorf("%w: labels %q: %w", ErrInvalidName, labels, err))
	}
	return cm
}

// Var returns an expvar.Var whose value is every source's figures, by name, as JSON: an object
// with the key memory ("host", "device" or "uvm") and the keys of Figures or TierFigures, all
// snake_case as in the debug page's stats.json. Publish it with expvar.Publish.
func (c *Collector) Var() expvar.Var {
	return expvar.Func(func() any {
		out := map[string]any{}
		for _, s := range c.list() {
			if s.tier != nil {
				if f, ok := s.tier(); ok {
					out[s.name] = struct {
						Memory string `json:"memory"`
						TierFigures
					}{"uvm", f}
				} else {
					c.forget(s)
				}
				continue
			}
			f, _, ok := s.heap()
			if !ok {
				c.forget(s)
				continue
			}
			if !countable(f.CommitSeconds) { // NaN or an infinity: encoding/json refuses them
				f.CommitSeconds = 0
			}
			out[s.name] = struct {
				Memory string `json:"memory"`
				Figures
			}{s.mem.String(), f}
		}
		return out
	})
}
