package pinned

import (
	"sort"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
)

// Stats describes a pool.
type Stats struct {
	// Backend is where the memory comes from: Options.Backend, or what Auto chose (Locked or
	// CUDAHost). It prints, and encodes in JSON, as its name ("locked", "cuda-host"...).
	Backend Backend
	// Kind is the memory's kind ("host-locked", "host-pinned", ...); Provider names the arena
	// provider behind it ("cuda-host-vmm" for VMM host memory, "cuda-host-register" for
	// registered memory, ...).
	Kind, Provider string
	// Granule is the provider's commit unit: a page of host memory, 2 MiB for VMM host
	// granules and registrations. Memory commits and goes back in whole granules, so a granule
	// holding one live buffer stays committed whole.
	Granule uint64
	// Capacity caps Reserved, the address space held.
	Capacity, Reserved uint64
	// Committed is the memory backed (and, for locked memory, locked); PeakCommitted its peak.
	Committed, PeakCommitted uint64
	// Locked is the committed memory that is page-locked.
	Locked uint64
	// Kept is the committed memory of freed large buffers (above heap.MaxClassSize) that the pool
	// keeps for the next buffer of about their size. It is part of Committed; it is decommitted
	// (and unlocked) when it stays unused for the purge delay, or at Trim.
	Kept uint64
	// InUse is the bytes asked for by live buffers. PeakInUse is the sum of each shard's peak:
	// exact with one shard, an upper bound on the true peak with several.
	InUse, PeakInUse uint64
	// Live counts live buffers; Allocs and Frees count operations.
	Live, Allocs, Frees uint64
	// Deferred counts the buffers freed while a CUDA stream may still use them (FreeAsync, or
	// Free of a buffer a stream was recorded on) that wait for their streams, and DeferredBytes
	// their bytes. They are part of Live and InUse until the pool takes them back.
	Deferred, DeferredBytes uint64
	// AlignWaste is memory made unusable to meet alignment (0 for every region the pool maps).
	AlignWaste uint64
	// Fragmentation is Committed / InUse (0 when nothing is in use): 1.0 is perfect.
	Fragmentation float64
	// Shards is the number of heaps.
	Shards int
	// Released says the pool has given its memory back: closed, and its last buffer freed
	// (Close with none live, or the Free of the last after it). A device heap's and a tier's
	// Stats say the same of them.
	Released bool
	// ForcedPurges counts commits the system refused for want of memory (the memlock limit,
	// for locked memory) after which the pool gave back at once the free memory it kept
	// committed, and tried again.
	ForcedPurges uint64
	// Purged counts the bytes decommitted (and unlocked) by purges, Trim included; Decommits
	// the decommit calls that did it, and DecommitsRefused those the system or the driver
	// refused (that memory stays committed and is tried again at the next purge).
	Purged, Decommits, DecommitsRefused uint64
	// Syscalls counts the system calls the host provider has made (mmap, mlock, madvise...);
	// HugeTLBFallbacks counts regions that asked for hugetlb pages and got ordinary ones.
	Syscalls, HugeTLBFallbacks uint64
	// DriverCalls counts the CUDA driver calls that allocated, registered, mapped or freed the
	// pool's memory; DriverObjects the driver resources it holds now.
	DriverCalls   uint64
	DriverObjects int64
	// CommitTime is the time spent committing (and pinning) memory, CommitBytes the bytes
	// committed in it, and CommitPerGiB their ratio: what a GiB of the pool costs to pin.
	CommitTime   time.Duration
	CommitBytes  uint64
	CommitPerGiB time.Duration
	// Precommitted is the memory committed ahead of need (Options.Precommit) so far;
	// Precommitting reports that the background commit still runs, and PrecommitErr the
	// error that stopped it, if any.
	Precommitted  uint64
	Precommitting bool
	PrecommitErr  error
	// CommitWorkers is the most goroutines one commit runs on (Options.CommitWorkers).
	CommitWorkers int
	// Node is the host NUMA node of the pool's memory, or arena.NodeUnknown; PerRegion
	// describes each region of it (address, size, committed memory, node).
	Node      int
	PerRegion []arena.RegionStats
	// Classes describes each size class in use, merged over the shards.
	Classes []heap.ClassStats
}

// statsLetGo, when not nil, is run by Stats and Usage once they have let the shards go (a
// test's hook: it frees and purges there, as any goroutine may), before they add up what they
// read.
var statsLetGo func()

// counts are the counters of a pool's heaps that outlive them (Pool.counted).
type counts struct{ allocs, frees, peak uint64 }

// Stats takes back the deferred buffers whose streams have passed them, collects every shard's
// pending frees and returns the pool's figures. Once the pool's memory is released (Close, or
// the Free of the last buffer after it), Released is set, Shards is 0 and the pool keeps no
// buffer, but Allocs, Frees and PeakInUse keep their last values, as a device heap's counters
// do after its Close.
//
// Its figures are those of one instant: it holds every shard (as Map does; an Alloc or Free
// that needs a shard's lock waits for it) while it reads the heaps, the deferred buffers and
// the arena, so no buffer is allocated or freed between two of its reads, and a purge meanwhile
// takes only memory no live buffer uses. So InUse is at most Committed (Fragmentation 0 or at
// least 1); Locked is at most Committed; Live is Allocs - Frees, and 0 exactly when InUse is;
// Deferred is at most Live and DeferredBytes at most InUse; PeakInUse is at least InUse and
// PeakCommitted at least Committed. Precommitting and PrecommitErr are read after the others.
func (p *Pool) Stats() Stats {
	st := Stats{Backend: p.backend}
	var as arena.Stats
	var hss []heap.Stats
	if p.released.Load() {
		st.Released = true
		st.Allocs, st.Frees, st.PeakInUse = p.counted.allocs, p.counted.frees, p.counted.peak
		as = p.a.Stats()
	} else {
		// Stats says no error: a refusal leaves its buffers deferred (counted below), for the
		// next Trim or Close to say.
		_ = p.reclaim(true)
		ss := p.lockAll()
		hss = make([]heap.Stats, len(ss))
		for i, s := range ss {
			hss[i] = s.h.Stats() // each collects its pending frees: none can land until unlockAll
		}
		// After the collects: a buffer leaves the lists before its free, so one on them now is
		// live in its heap still.
		st.Deferred, st.DeferredBytes = p.deferred()
		as = p.a.Stats() // lock order: shards, then the arena
		p.unlockAll(ss)
	}
	if statsLetGo != nil {
		statsLetGo()
	}
	classes := map[uint64]*heap.ClassStats{}
	for _, hs := range hss {
		st.InUse += hs.InUse
		st.PeakInUse += hs.Peak
		st.Live += hs.Live
		st.Allocs += hs.Allocs
		st.Frees += hs.Frees
		st.Shards++
		for _, c := range hs.Classes {
			m := classes[c.Size]
			if m == nil {
				m = &heap.ClassStats{Size: c.Size}
				classes[c.Size] = m
			}
			m.Allocs += c.Allocs
			m.Frees += c.Frees
			m.Live += c.Live
			m.Pages += c.Pages
		}
	}
	st.Kind, st.Provider, st.Granule = as.Kind.String(), as.Provider, as.Granule
	st.Capacity, st.Reserved = as.Capacity, as.Reserved
	st.Committed, st.PeakCommitted, st.Locked, st.Kept = as.Committed, as.PeakCommitted, as.Locked, as.Kept
	st.AlignWaste, st.ForcedPurges = as.AlignWaste, as.ForcedPurges
	st.Purged, st.Decommits, st.DecommitsRefused = as.Purged, as.Decommits, as.DecommitsRefused
	if st.InUse > 0 {
		st.Fragmentation = float64(st.Committed) / float64(st.InUse)
	}
	c := as.Counters
	st.Syscalls, st.HugeTLBFallbacks = c.Syscalls, c.HugeTLBFallbacks
	st.DriverCalls, st.DriverObjects = c.DriverCalls, c.DriverObjects
	st.CommitTime, st.CommitBytes, st.CommitPerGiB = as.CommitTime, as.CommitBytes, as.CommitPerGiB()
	st.Precommitted = as.Precommitted
	st.CommitWorkers, st.Node, st.PerRegion = as.CommitWorkers, as.Node, as.PerRegion
	st.Precommitting, st.PrecommitErr = p.precommitState()
	for _, c := range classes {
		st.Classes = append(st.Classes, *c)
	}
	sort.Slice(st.Classes, func(i, j int) bool { return st.Classes[i].Size < st.Classes[j].Size })
	return st
}
