package arena

// Read-only views of an arena for observers (sampling, the debug page, metrics). Stats gathers
// every figure (stats.go says what each means); Usage costs no allocation and no provider call,
// so it can be sampled often; Snapshot copies the per-chunk
// state of every region under the arena's lock, so what it shows is one consistent instant.

import "github.com/pinmalloc/pinmalloc/internal/keep"

// Stats returns the arena's figures.
func (a *Arena) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.st
	if a.reporter != nil {
		st.Counters = a.reporter.Report()
	}
	st.Reserved = uint64(a.reserved)
	st.Granule = uint64(a.caps.Granule)
	st.Regions = len(*a.regions.Load())
	st.RegionsRefused = len(a.refused)
	if k := a.prov.Kind(); k == HostLocked || k == HostPinned {
		st.Locked = st.Committed
	}
	st.Kept = a.keptIdleBytes()
	st.Node = placement(a.prov)
	for _, r := range *a.regions.Load() {
		ng := int((r.r.Size + a.caps.Granule - 1) >> r.gshift)
		st.PerRegion = append(st.PerRegion, RegionStats{Base: r.r.Base, Size: r.r.Size,
			Committed: uint64(r.commit.Count(0, ng)) << r.gshift, Node: st.Node})
		_ = r.used.Runs(0, r.nchunks, true, func(s, e int) error {
			lo := r.grid - r.r.Base + uintptr(s)<<a.shift
			hi := min(r.grid-r.r.Base+uintptr(e)<<a.shift, r.r.Size)
			st.InUse += uint64(r.commit.Count(int(lo>>r.gshift), int((hi+a.caps.Granule-1)>>r.gshift))) << r.gshift
			return nil
		})

	}
	return st
}

// Usage is the part of Stats that costs nothing to read.
type Usage struct {
	// Reserved is the address space held in regions; Committed the memory backed by the
	// provider; Locked the committed memory that is page-locked.
	Reserved, Committed, Locked uint64
	// InUseChunks counts the chunks handed out.
	InUseChunks int
	// Precommitted is the memory Precommit has committed so far (Stats.Precommitted): a
	// background precommit's progress.
	Precommitted uint64
}

// Usage returns the arena's memory figures without allocating (one lock, no provider call).
func (a *Arena) Usage() Usage {
	a.mu.Lock()
	u := Usage{Reserved: uint64(a.reserved), Committed: a.st.Committed, InUseChunks: a.st.ChunksInUse, Precommitted: a.st.Precommitted}
	a.mu.Unlock()
	if k := a.prov.Kind(); k == HostLocked || k == HostPinned {
		u.Locked = u.Committed
	}
	return u
}

// ChunkState is the state of one chunk in a Snapshot.
type ChunkState struct {
	// InUse reports that the chunk is handed out (to a heap segment or a huge object).
	InUse bool
	// Committed is the chunk's committed memory, in bytes (granules the chunk touches).
	Committed uint64
	// Unwanted is the part of Committed no span wants: memory waiting for the purge (or for
	// Trim when PurgePending is false).
	Unwanted uint64
	// PurgePending reports that the purge timer will decommit the unwanted memory; it is false
	// for memory Precommit keeps, and when the arena's purge delay is negative.
	PurgePending bool
	// Kept is the part of Committed in idle kept ranges (pages and huge objects a
	// heap freed and keeps for reuse); the purge timer gives it up if it stays idle.
	Kept uint64
}

// RegionSnapshot describes one region and its chunks.
type RegionSnapshot struct {
	// Base and Size are the region's address range; Grid is the first chunk's start.
	Base, Size, Grid uintptr
	// FirstID is the ChunkID of Chunks[0].
	FirstID ChunkID
	// Node is the host NUMA node of the region's memory, or NodeUnknown.
	Node int
	// Chunks has one entry per chunk, in address order.
	Chunks []ChunkState
}

// Snapshot describes every region of an arena at one instant.
type Snapshot struct {
	// Provider and Kind name the memory; ChunkSize is the chunk size and Capacity the cap on
	// reserved bytes.
	Provider  string
	Kind      Kind
	ChunkSize uintptr
	Capacity  uint64
	// Regions are in the order they were reserved.
	Regions []RegionSnapshot
}

// LargestFreeRun returns the bytes of the longest run of chunks not handed out in one region
// (the largest huge object the arena can place without reserving a region) and the bytes of
// capacity not yet reserved (where a new region may go).
func (s Snapshot) LargestFreeRun() (run uint64, unreserved uint64) {
	var reserved uint64
	for _, r := range s.Regions {
		reserved += uint64(r.Size)
		n := 0
		for _, c := range r.Chunks {
			if c.InUse {
				n = 0
				continue
			}
			n++
			run = max(run, uint64(n)*uint64(s.ChunkSize))
		}
	}
	if s.Capacity > reserved {
		unreserved = s.Capacity - reserved
	}
	return run, unreserved
}

// Snapshot copies the state of every chunk of every region under the arena's lock. It
// allocates (a slice per region): it is meant for debugging pages, not for frequent sampling
// (see Usage).
func (a *Arena) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Snapshot{Provider: a.st.Provider, Kind: a.st.Kind, ChunkSize: a.chunk, Capacity: a.st.Capacity}
	purges := a.delay >= 0 && a.caps.Decommits
	for _, r := range *a.regions.Load() {
		rs := RegionSnapshot{Base: r.r.Base, Size: r.r.Size, Grid: r.grid, FirstID: r.firstID, Node: placement(a.prov), Chunks: make([]ChunkState, r.nchunks)}
		for i := range rs.Chunks {
			glo, ghi := a.chunkGranules(r, i)
			c := &rs.Chunks[i]
			c.InUse = r.used.Get(i)
			c.Committed = uint64(r.commit.Count(glo, ghi)) << r.gshift
			if !r.r.Committed && r.unwanted(glo, ghi) {
				wanted := 0
				_ = r.commit.Runs(glo, ghi, true, func(s, e int) error {
					wanted += r.want.Count(s, e)
					return nil
				})

				c.Unwanted = c.Committed - uint64(wanted)<<r.gshift
				c.PurgePending = purges && r.stale.Get(i) && r.stamp[i] != keepStamp
			}
		}
		s.Regions = append(s.Regions, rs)
	}
	for _, k := range a.kept {
		if k.Word.Load()&keep.State != uint64(keep.Idle) {
			continue
		}
		for _, rs := range s.Regions {
			if k.Addr < rs.Grid || k.Addr >= rs.Base+rs.Size {
				continue
			}
			for lo, end := k.Addr, k.Addr+k.Size; lo < end; {
				i := int((lo - rs.Grid) / a.chunk)
				hi := min(end, rs.Grid+uintptr(i+1)*a.chunk)
				if i < len(rs.Chunks) {
					rs.Chunks[i].Kept += uint64(hi - lo)
				}
				lo = hi
			}
		}
	}
	return s
}
