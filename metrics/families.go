package metrics

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// The metric families. Host memory (pinned pools) and device memory (device heaps) are
// separate families, pinmalloc_host_... and pinmalloc_device_..., so that a sum over a family
// never adds VRAM to RAM; a family exists only where it applies (no locked bytes or system
// calls for device memory). UVM tiers are pinmalloc_uvm_.... Every series has the label name
// (what the source was registered as); info families carry what describes the source.

// family is one metric family of pools or device heaps.
type family struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(Figures) float64
	omit  func(Figures) bool // nil: always exported
}

// tierFamily is one metric family of tiers.
type tierFamily struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(TierFigures) float64
}

var nameLabel = []string{"name"}

// heapFamilies returns the families of a memory kind: prefix is pinmalloc_host_ or
// pinmalloc_device_.
func heapFamilies(prefix string, host bool) []family {
	g := func(name, help string, v func(Figures) float64) family {
		return family{desc: prometheus.NewDesc(prefix+name, help, nameLabel, nil), kind: prometheus.GaugeValue, value: v}
	}
	c := func(name, help string, v func(Figures) float64) family {
		return family{desc: prometheus.NewDesc(prefix+name, help, nameLabel, nil), kind: prometheus.CounterValue, value: v}
	}
	what := "device heap"
	if host {
		what = "pool"
	}
	quota := g("quota_bytes", "Cap on the bytes of the "+what+"'s live blocks (Options.Quota); absent when it has none.",
		func(f Figures) float64 { return float64(f.Quota) })
	quota.omit = func(f Figures) bool { return f.Quota == 0 }
	commitSeconds := c("commit_seconds_total",
		"Time spent committing (and pinning) memory, in seconds.",
		func(f Figures) float64 { return f.CommitSeconds })
	commitSeconds.omit = func(f Figures) bool { return !countable(f.CommitSeconds) }
	fs := []family{
		g("capacity_bytes", "Address space the "+what+" may reserve, in bytes.", func(f Figures) float64 { return float64(f.Capacity) }),
		quota,
		g("reserved_bytes", "Address space held in regions, in bytes.", func(f Figures) float64 { return float64(f.Reserved) }),
		g("committed_bytes", "Memory backed by the provider, in bytes.", func(f Figures) float64 { return float64(f.Committed) }),
		g("committed_peak_bytes", "Highest committed memory so far, in bytes.", func(f Figures) float64 { return float64(f.PeakCommitted) }),
		g("in_use_bytes", "Bytes asked for by live blocks.", func(f Figures) float64 { return float64(f.InUse) }),
		g("in_use_peak_bytes", "Highest bytes in use so far (the sum of each shard's or stream's peak).", func(f Figures) float64 { return float64(f.PeakInUse) }),
		g("alignment_waste_bytes", "Memory made unusable to meet alignment, in bytes.", func(f Figures) float64 { return float64(f.AlignWaste) }),
		g("live_blocks", "Number of live blocks, deferred ones included.", func(f Figures) float64 { return float64(f.Live) }),
		g("deferred_blocks", "Number of blocks freed whose reuse waits for a CUDA stream to pass the free.", func(f Figures) float64 { return float64(f.Deferred) }),
		c("allocs_total", "Number of allocations made.", func(f Figures) float64 { return float64(f.Allocs) }),
		c("frees_total", "Number of frees made.", func(f Figures) float64 { return float64(f.Frees) }),
		c("decommits_total", "Decommit calls made by purges and Trim.", func(f Figures) float64 { return float64(f.Decommits) }),
		c("decommits_refused_total", "Decommits the provider refused: that memory stays committed, and the next purge tries again.", func(f Figures) float64 { return float64(f.DecommitsRefused) }),
		c("purged_bytes_total", "Bytes decommitted by purges and Trim.", func(f Figures) float64 { return float64(f.Purged) }),
		c("forced_purges_total", "Commits refused for want of memory, after which the free memory kept was given back at once.", func(f Figures) float64 { return float64(f.ForcedPurges) }),
		c("driver_calls_total", "CUDA driver calls that allocated, registered, mapped or freed memory.", func(f Figures) float64 { return float64(f.DriverCalls) }),
		commitSeconds,
	}
	if host {
		fs = append(fs,
			g("locked_bytes", "Committed memory that is page-locked, in bytes.", func(f Figures) float64 { return float64(f.Locked) }),
			g("deferred_bytes", "Bytes of the blocks freed whose reuse waits for a CUDA stream.", func(f Figures) float64 { return float64(f.DeferredBytes) }),
			c("syscalls_total", "System calls of the host provider (mmap, mlock, madvise and the like).", func(f Figures) float64 { return float64(f.Syscalls) }),
		)
	}
	return fs
}

// countable reports whether v can be a counter's value: a finite number, not below zero. A
// function given to AddFunc may report CommitSeconds as anything.
func countable(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

var (
	hostFamilies   = heapFamilies("pinmalloc_host_", true)
	deviceFamilies = heapFamilies("pinmalloc_device_", false)
)

func tierMetric(name, help string, kind prometheus.ValueType, v func(TierFigures) float64) tierFamily {
	return tierFamily{desc: prometheus.NewDesc("pinmalloc_uvm_"+name, help, nameLabel, nil), kind: kind, value: v}
}

var tierFamilies = []tierFamily{
	tierMetric("budget_bytes", "VRAM budget of the tier, in bytes.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.Budget) }),
	tierMetric("device_bytes", "Bytes of live blocks on the device.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.DeviceBytes) }),
	tierMetric("host_bytes", "Bytes of live blocks only in pinned host memory.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.HostBytes) }),
	tierMetric("fresh_bytes", "Bytes of live blocks never acquired, which hold no memory yet.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.FreshBytes) }),
	tierMetric("host_held_bytes", "Pinned host memory held for host-only blocks and host copies of clean ones, in bytes.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.HostHeldBytes) }),
	tierMetric("spare_bytes", "VRAM the tier keeps for its next restores, in bytes.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.SpareBytes) }),
	tierMetric("acquired_bytes", "Bytes of the blocks acquired on the device now.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.AcquiredBytes) }),
	tierMetric("held_back_device_bytes", "VRAM kept out of use because the driver refused the waits for the work that may still use it (a device fault), in bytes.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.HeldBackDeviceBytes) }),
	tierMetric("held_back_host_bytes", "Pinned host buffers kept out of use because the driver refused the waits for the work that may still use them (a device fault), in bytes.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.HeldBackHostBytes) }),
	tierMetric("blocks", "Number of live blocks.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.Blocks) }),
	tierMetric("pending_batches", "Number of batches of copies in flight.", prometheus.GaugeValue, func(f TierFigures) float64 { return float64(f.Pending) }),
	tierMetric("hits_total", "Acquire calls that found the block on the device.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.Hits) }),
	tierMetric("misses_total", "Acquire calls that had to bring the block to the device.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.Misses) }),
	tierMetric("allocs_total", "Number of blocks allocated.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.Allocs) }),
	tierMetric("frees_total", "Number of blocks freed.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.Frees) }),
	tierMetric("thrash_events_total", "Blocks found thrashing and kept on the device for a while.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.ThrashEvents) }),
	tierMetric("heap_pressure_total", "Device heap refusals the tier answered by waiting for its frees or evicting.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.HeapPressure) }),
	tierMetric("failures_total", "Batches of copies that failed, leaving their blocks where they were.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.Failures) }),
	tierMetric("clean_evictions_total", "Evictions that copied nothing because the host copy was valid.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.CleanEvictions) }),
	tierMetric("policy_errors_total", "Blocks the eviction Policy yielded that could not be evicted (acquired, off the device, freed): a Policy's bug.", prometheus.CounterValue, func(f TierFigures) float64 { return float64(f.PolicyErrors) }),
}

// The families of moves, by direction and cause.
var (
	moveLabels     = []string{"name", "direction", "cause"}
	movedBlocksDsc = prometheus.NewDesc("pinmalloc_uvm_moved_blocks_total",
		"Blocks moved between the device and pinned host memory, by direction and cause.", moveLabels, nil)
	movedBytesDsc = prometheus.NewDesc("pinmalloc_uvm_moved_bytes_total",
		"Bytes of the blocks moved between the device and pinned host memory, by direction and cause (clean evictions count, though they copy nothing).", moveLabels, nil)
)

// The info families: always 1, their labels describe pinmalloc and each source.
var (
	infoDesc = prometheus.NewDesc("pinmalloc_info",
		"Always 1; the label version is pinmalloc's module version.", []string{"version"}, nil)
	poolInfoDesc = prometheus.NewDesc("pinmalloc_host_pool_info",
		"Always 1, for each pinned pool; the labels are its backend and provider.", []string{"name", "backend", "provider"}, nil)
	heapInfoDesc = prometheus.NewDesc("pinmalloc_device_heap_info",
		"Always 1, for each device heap; the labels are its device ordinal and provider.", []string{"name", "device", "provider"}, nil)
	tierInfoDesc = prometheus.NewDesc("pinmalloc_uvm_tier_info",
		"Always 1, for each tier; the labels are its eviction policy and copy engine.", []string{"name", "policy", "mover"}, nil)
)
