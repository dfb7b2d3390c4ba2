package pinned

import (
	"sort"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
)

// Stats describes a pool.
type Stats struct {
	// Backend is where the memory comes from ("locked", "pageable", "external", "cuda-host":
	// what Auto chose); Kind is the memory's kind ("host-locked", "host-pinned", ...).
	Backend, Kind string
	// Capacity caps Reserved, the address space held.
	Capacity, Reserved uint64
	// Committed is the memory backed (and, for locked memory, locked); PeakCommitted its peak.
	Committed, PeakCommitted uint64
	// Locked is the committed memory that is page-locked.
	Locked uint64
	// InUse is the bytes asked for by live buffers. PeakInUse is the sum of each shard's peak:
	// exact with one shard, an upper bound on the true peak with several.
	InUse, PeakInUse uint64
	// Live counts live buffers; Allocs and Frees count operations.
	Live, Allocs, Frees uint64
	// AlignWaste is memory made unusable to meet alignment (0 for every region the pool maps).
	AlignWaste uint64
	// Fragmentation is Committed / InUse (0 when nothing is in use): 1.0 is perfect.
	Fragmentation float64
	// Shards is the number of heaps.
	Shards int
	// ForcedPurges counts commits the system refused for want of memory (the memlock limit,
	// for locked memory) after which the pool gave back at once the free memory it kept
	// committed, and tried again.
	ForcedPurges uint64
	// Syscalls counts the system calls the host provider has made (mmap, mlock, madvise...);
	// HugeTLBFallbacks counts regions that asked for hugetlb pages and got ordinary ones.
	Syscalls, HugeTLBFallbacks uint64
	// Classes describes each size class in use, merged over the shards.
	Classes []heap.ClassStats
}

// Stats collects every shard's pending frees and returns the pool's figures.
func (p *Pool) Stats() Stats {
	st := Stats{Backend: p.backend.String()}
	classes := map[uint64]*heap.ClassStats{}
	if !p.released.Load() {
		p.each(func(h *heap.Heap) {
			hs := h.Stats()
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
		})
	}
	as := p.a.Stats()
	st.Kind = as.Kind.String()
	st.Capacity, st.Reserved = as.Capacity, as.Reserved
	st.Committed, st.PeakCommitted, st.Locked = as.Committed, as.PeakCommitted, as.Locked
	st.AlignWaste, st.ForcedPurges = as.AlignWaste, as.ForcedPurges
	if st.InUse > 0 {
		st.Fragmentation = float64(st.Committed) / float64(st.InUse)
	}
	if p.host != nil {
		c := p.host.Counters()
		st.Syscalls, st.HugeTLBFallbacks = c.Total(), c.HugeTLBFallbacks
	}
	if c, ok := p.a.Provider().(*arena.CUDAHostProvider); ok {
		hc := c.HostCounters()
		st.Syscalls, st.HugeTLBFallbacks = hc.Total(), hc.HugeTLBFallbacks
	}
	for _, c := range classes {
		st.Classes = append(st.Classes, *c)
	}
	sort.Slice(st.Classes, func(i, j int) bool { return st.Classes[i].Size < st.Classes[j].Size })
	return st
}
