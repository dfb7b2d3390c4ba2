package uvm

import (
	"fmt"
	"iter"
	"time"
)

// Statistics: Stats, what it counts by (Cause, Traffic), the Migration reported to
// Options.OnMigrate, and the counting of each block moved.

// Cause says why a block moved.
type Cause uint8

const (
	// CauseAcquire is a restore for Acquire (a miss).
	CauseAcquire Cause = iota
	// CausePrefetch is a restore for Prefetch.
	CausePrefetch
	// CausePressure is an eviction to make room in the budget for a restore.
	CausePressure
	// CauseHeapPressure is an eviction because the device heap refused memory (the tier's
	// own allocation, or another user's through the heap's pressure hook).
	CauseHeapPressure
	// CauseExplicit is an eviction asked for with Evict.
	CauseExplicit
	// CauseHost is a copy to the host for AcquireHost.
	CauseHost
	numCauses
)

// String names the cause.
func (c Cause) String() string {
	switch c {
	case CauseAcquire:
		return "acquire"
	case CausePrefetch:
		return "prefetch"
	case CausePressure:
		return "pressure"
	case CauseHeapPressure:
		return "heap-pressure"
	case CauseExplicit:
		return "explicit"
	case CauseHost:
		return "host"
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// Migration describes one block moved, for Options.OnMigrate.
type Migration struct {
	// Handle is the block.
	Handle Handle
	// Bytes is the block's size (rounded to 256 bytes).
	Bytes int
	// ToDevice is true for a restore, false for an eviction.
	ToDevice bool
	// Cause says why.
	Cause Cause
	// Clean is true for an eviction that copied nothing (the host copy was valid).
	Clean bool
}

// Traffic counts blocks and bytes.
type Traffic struct {
	Blocks, Bytes uint64
}

// Stats describes a Tier.
type Stats struct {
	// Policy names the eviction policy.
	Policy string
	// Mover names the copy engine: the copyengine.Method of the tier's own copyengine.Batcher
	// ("kernel", "batch-api" or "per-copy", or "auto" when its calibration picks the method
	// per batch), or "custom" for Options.Mover.
	Mover string
	// Budget is the device budget in bytes.
	Budget uint64
	// Blocks is the number of live blocks; LiveBytes their bytes (each rounded to 256), which
	// is always DeviceBytes + HostBytes + FreshBytes.
	Blocks    int
	LiveBytes uint64
	// DeviceBytes are the bytes of blocks on the device; HostBytes of blocks only on the
	// host; FreshBytes of blocks never acquired (no storage yet).
	DeviceBytes, HostBytes, FreshBytes uint64
	// HostHeldBytes are the host buffers held: host-only blocks and the host copies of clean
	// blocks on the device.
	HostHeldBytes uint64
	// SpareBytes is the VRAM the tier keeps for its next restores: the blocks of the device
	// heap that evictions and frees gave up (see the package documentation). With DeviceBytes
	// it stays within twice the budget; the heap's Stats count it as live.
	SpareBytes uint64
	// HeldBackDeviceBytes and HeldBackHostBytes are the VRAM and host buffers that the tier
	// keeps out of use because the driver refused the waits for the work that may still use
	// them (a Free that returned ErrHeldBack; a restore, eviction or AcquireHost whose copies
	// failed after a fault); they are reused once a synchronize of the device succeeds (Sync
	// tries one). Not zero, they say the context has a sticky error.
	HeldBackDeviceBytes, HeldBackHostBytes uint64
	// AcquiredBytes and AcquiredBlocks count the blocks acquired on the device now (between an
	// Acquire and its Release): they cannot be evicted.
	AcquiredBytes  uint64
	AcquiredBlocks int
	// Hits and Misses count Acquire calls that found the block on the device, or not.
	Hits, Misses uint64
	// In and Out count blocks moved to and from the device, by cause (indexed by Cause). Out
	// includes clean evictions, which copy nothing.
	In, Out [numCauses]Traffic
	// CleanEvictions counts evictions that skipped the copy; CleanBytes their bytes.
	CleanEvictions, CleanBytes uint64
	// ThrashEvents counts blocks found thrashing (and protected for ThrashPin);
	// ThrashOverrides counts evictions of protected blocks because nothing else would do.
	ThrashEvents, ThrashOverrides uint64
	// HeapPressure counts device heap refusals the tier answered by waiting for its frees or
	// evicting beyond the budget: its own allocations', and those of other users of a shared
	// heap, through the heap's pressure hook.
	HeapPressure uint64
	// HostCopiesDropped counts host copies of clean blocks freed to make room in the pool.
	HostCopiesDropped uint64
	// Failures counts batches that failed (the blocks stayed where they were).
	Failures uint64
	// PolicyErrors counts blocks the Policy's Walk yielded that could not be evicted (acquired,
	// off the device, freed, or not the tier's): passed over. Non-zero only for a Policy that
	// breaks its contract.
	PolicyErrors uint64
	// Pending is the number of batches in flight (copies, and frees waiting for them).
	Pending int
	// Allocs and Frees count blocks.
	Allocs, Frees uint64
	// AcquireLatency holds the latency histograms of Acquire and AcquireHost.
	AcquireLatency AcquireLatency
	// Released is true once Close has closed the tier and given back all it held (a further
	// Close answers ErrClosed): its figures change no more, and a collector of them (package
	// metrics, package debugpage) drops the tier. A Close that kept memory held back
	// (ErrHeldBack, counted above), its host pool, its device heap or its mover leaves it
	// false, until a later Close gives that memory back.
	Released bool
}

// HitRate is Hits / (Hits + Misses), or 0 before any Acquire.
func (s Stats) HitRate() float64 {
	if n := s.Hits + s.Misses; n > 0 {
		return float64(s.Hits) / float64(n)
	}
	return 0
}

// Traffic yields every cause with the blocks it moved to the device (In: toDevice) or off it
// (Out), in the order of the causes.
func (s Stats) Traffic(toDevice bool) iter.Seq2[Cause, Traffic] {
	src := &s.Out
	if toDevice {
		src = &s.In
	}
	return func(yield func(Cause, Traffic) bool) {
		for i, t := range src {
			if !yield(Cause(i), t) {
				return
			}
		}
	}
}

// Moved sums In (toDevice) or Out over every cause.
func (s Stats) Moved(toDevice bool) Traffic {
	var t Traffic
	src := &s.Out
	if toDevice {
		src = &s.In
	}
	for _, c := range src {
		t.Blocks += c.Blocks
		t.Bytes += c.Bytes
	}
	return t
}

// Stats returns the tier's figures, after finishing the batches that have completed.
func (t *Tier) Stats() Stats {
	t.mu.Lock()
	defer t.unlock("Stats")
	if !t.closed {
		_ = t.poll()
	}
	st := t.st
	st.Blocks = len(t.blocks) - len(t.free)
	if t.closed {
		st.Blocks = 0
	}
	st.LiveBytes, st.DeviceBytes = uint64(t.acct.live), uint64(t.acct.device)
	st.HostBytes, st.FreshBytes = uint64(t.acct.hostOnly), uint64(t.acct.fresh)
	st.HostHeldBytes = uint64(t.acct.hostHeld)
	st.SpareBytes = uint64(t.spare.bytes)
	st.HeldBackDeviceBytes, st.HeldBackHostBytes = uint64(t.held.dev), uint64(t.held.host)
	st.AcquiredBytes, st.AcquiredBlocks = uint64(t.acct.pinned), t.acct.pinnedBlocks
	st.Pending = int(t.batches.lists.Weight())
	st.AcquireLatency.withBounds()
	st.Released = t.closed && !t.heldAtClose && !t.kept()
	return st
}

// moved counts a migration of block id and reports it. t.mu is held.
func (t *Tier) moved(id BlockID, b *block, toDevice bool, cause Cause, clean bool, now time.Time) {
	tr := &t.st.Out[cause]
	if toDevice {
		tr = &t.st.In[cause]
	}
	tr.Blocks++
	tr.Bytes += uint64(b.size)
	if clean {
		t.st.CleanEvictions++
		t.st.CleanBytes += uint64(b.size)
	}
	t.thrashed(b, now)
	if t.opts.onMigrate != nil {
		t.opts.onMigrate(Migration{Handle: t.handle(id), Bytes: int(b.size), ToDevice: toDevice, Cause: cause, Clean: clean})
	}
}
