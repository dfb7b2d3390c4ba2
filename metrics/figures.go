package metrics

import (
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// Figures are the values a pool or device heap reports at one scrape, in bytes and counts.
// Their JSON keys (the expvar Var's) are snake_case, as in the debug page's stats.json.
type Figures struct {
	// Capacity is the address space the source may reserve; Quota its cap on live bytes (0:
	// none).
	Capacity uint64 `json:"capacity"`
	Quota    uint64 `json:"quota"`
	// Reserved is the address space held; Committed the memory backed by the provider;
	// Locked the committed host memory that is page-locked (host memory only).
	Reserved      uint64 `json:"reserved"`
	Committed     uint64 `json:"committed"`
	PeakCommitted uint64 `json:"peak_committed"`
	Locked        uint64 `json:"locked"`
	// InUse is the bytes asked for by live blocks; AlignWaste the memory lost to alignment.
	InUse      uint64 `json:"in_use"`
	PeakInUse  uint64 `json:"peak_in_use"`
	AlignWaste uint64 `json:"align_waste"`
	// Live is the number of live blocks.
	Live uint64 `json:"live"`
	// Deferred is the number of blocks freed whose reuse waits for a CUDA stream to pass the
	// free (pools: FreeAsync, or Free of a buffer a stream used; device heaps: FreeAsync on
	// another stream), part of Live; DeferredBytes their bytes (pools only).
	Deferred      uint64 `json:"deferred"`
	DeferredBytes uint64 `json:"deferred_bytes"`
	// Counters.
	Allocs    uint64 `json:"allocs"`
	Frees     uint64 `json:"frees"`
	Decommits uint64 `json:"decommits"`
	// DecommitsRefused counts the decommits the provider refused (the memory stays committed).
	DecommitsRefused uint64 `json:"decommits_refused"`
	Purged           uint64 `json:"purged"`
	ForcedPurges     uint64 `json:"forced_purges"`
	DriverCalls      uint64 `json:"driver_calls"`
	Syscalls         uint64 `json:"syscalls"`
	// CommitSeconds is the time spent committing (and pinning) memory.
	CommitSeconds float64 `json:"commit_seconds"`
}

// FromPool converts a pool's Stats. The quota is not part of Stats: AddPool reads it from the
// pool.
func FromPool(s pinned.Stats) Figures {
	return Figures{
		Capacity: s.Capacity, Reserved: s.Reserved, Committed: s.Committed, PeakCommitted: s.PeakCommitted, Locked: s.Locked,
		InUse: s.InUse, PeakInUse: s.PeakInUse, AlignWaste: s.AlignWaste,
		Live: s.Live, Deferred: s.Deferred, DeferredBytes: s.DeferredBytes,
		Allocs: s.Allocs, Frees: s.Frees, Decommits: s.Decommits, DecommitsRefused: s.DecommitsRefused, Purged: s.Purged,
		ForcedPurges: s.ForcedPurges, DriverCalls: s.DriverCalls, Syscalls: s.Syscalls,
		CommitSeconds: s.CommitTime.Seconds(),
	}
}

// FromDevice converts a device heap's Stats. The quota is not part of Stats: AddDevice reads it
// from the heap.
func FromDevice(s device.Stats) Figures {
	a := s.Arena
	return Figures{
		Capacity: a.Capacity, Reserved: a.Reserved, Committed: a.Committed, PeakCommitted: a.PeakCommitted,
		InUse: s.InUse, PeakInUse: s.PeakInUse, AlignWaste: a.AlignWaste, Live: s.Live, Deferred: uint64(s.Deferred),
		Allocs: s.Allocs, Frees: s.Frees, Decommits: a.Decommits, DecommitsRefused: a.DecommitsRefused, Purged: a.Purged, ForcedPurges: a.ForcedPurges,
		DriverCalls: a.Counters.DriverCalls, CommitSeconds: a.CommitTime.Seconds(),
	}
}

// TierFigures are the values of a UVM tier at one scrape.
type TierFigures struct {
	// Policy and Mover name the eviction policy and the copy engine.
	Policy string `json:"policy"`
	Mover  string `json:"mover"`
	// Budget is the device budget. DeviceBytes, HostBytes and FreshBytes are the bytes of
	// the live blocks on the device, only on the host, and never acquired; HostHeldBytes the
	// host buffers held (host-only blocks and host copies of clean ones); SpareBytes the VRAM
	// kept for the next restores; AcquiredBytes the bytes of blocks acquired on the device;
	// HeldBackDeviceBytes and HeldBackHostBytes the VRAM and host buffers kept out of use
	// because the driver refused the waits for the work that may still use them (not zero:
	// the context has a sticky error, after a kernel or copy faulted).
	Budget              uint64 `json:"budget"`
	DeviceBytes         uint64 `json:"device_bytes"`
	HostBytes           uint64 `json:"host_bytes"`
	FreshBytes          uint64 `json:"fresh_bytes"`
	HostHeldBytes       uint64 `json:"host_held_bytes"`
	SpareBytes          uint64 `json:"spare_bytes"`
	AcquiredBytes       uint64 `json:"acquired_bytes"`
	HeldBackDeviceBytes uint64 `json:"held_back_device_bytes"`
	HeldBackHostBytes   uint64 `json:"held_back_host_bytes"`
	// Blocks is the number of live blocks; Pending the batches of copies in flight.
	Blocks  uint64 `json:"blocks"`
	Pending uint64 `json:"pending"`
	// Hits and Misses count Acquire calls; ThrashEvents the blocks found thrashing;
	// HeapPressure the device heap refusals the tier answered; Failures the batches that
	// failed; CleanEvictions the evictions that copied nothing (the host copy was valid);
	// PolicyErrors the blocks a Policy yielded that could not be evicted (a Policy's bug).
	Hits           uint64 `json:"hits"`
	Misses         uint64 `json:"misses"`
	Allocs         uint64 `json:"allocs"`
	Frees          uint64 `json:"frees"`
	ThrashEvents   uint64 `json:"thrash_events"`
	HeapPressure   uint64 `json:"heap_pressure"`
	Failures       uint64 `json:"failures"`
	CleanEvictions uint64 `json:"clean_evictions"`
	PolicyErrors   uint64 `json:"policy_errors"`
	// Moves are the blocks and bytes moved, by direction and cause.
	Moves []Move `json:"moves"`
	// AcquireSeconds are the latency histograms of successful Acquire calls, by outcome
	// ("hit", "miss"), and of AcquireHost ("host"), in seconds.
	AcquireSeconds []Histogram `json:"acquire_seconds"`
}

// Move counts the blocks and bytes a tier moved in one direction for one cause.
type Move struct {
	// ToDevice is true for restores (host to device), false for evictions and copies to the
	// host; Cause is the uvm.Cause's name ("acquire", "pressure", ...).
	ToDevice bool   `json:"to_device"`
	Cause    string `json:"cause"`
	Blocks   uint64 `json:"blocks"`
	Bytes    uint64 `json:"bytes"`
}

// restores reports whether a uvm cause moves blocks to the device (the others move them off).
func restores(c uvm.Cause) bool { return c == uvm.CauseAcquire || c == uvm.CausePrefetch }

// FromTier converts a tier's Stats. Moves lists every cause in the direction it moves blocks
// (acquire and prefetch to the device, the others off it), and any other cause whose count is
// not zero.
func FromTier(s uvm.Stats) TierFigures {
	f := TierFigures{
		Policy: s.Policy, Mover: s.Mover,
		Budget: s.Budget, DeviceBytes: s.DeviceBytes, HostBytes: s.HostBytes, FreshBytes: s.FreshBytes,
		HostHeldBytes: s.HostHeldBytes, SpareBytes: s.SpareBytes, AcquiredBytes: s.AcquiredBytes,
		HeldBackDeviceBytes: s.HeldBackDeviceBytes, HeldBackHostBytes: s.HeldBackHostBytes,
		Blocks: uint64(max(s.Blocks, 0)), Pending: uint64(max(s.Pending, 0)),
		Hits: s.Hits, Misses: s.Misses, Allocs: s.Allocs, Frees: s.Frees, ThrashEvents: s.ThrashEvents,
		HeapPressure: s.HeapPressure, Failures: s.Failures, CleanEvictions: s.CleanEvictions,
		PolicyErrors: s.PolicyErrors, AcquireSeconds: acquireHistograms(s.AcquireLatency),
	}
	for _, toDevice := range []bool{true, false} {
		for c, tr := range s.Traffic(toDevice) {
			if restores(c) == toDevice || tr != (uvm.Traffic{}) {
				f.Moves = append(f.Moves, Move{ToDevice: toDevice, Cause: c.String(), Blocks: tr.Blocks, Bytes: tr.Bytes})
			}
		}
	}
	return f
}
