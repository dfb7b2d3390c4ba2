// Stats: the figures an Arena reports of its memory (Arena.Stats, snapshot.go gathers them).

package arena

import "time"

// Stats describes an arena's memory.
type Stats struct {
	// Provider and Kind name the memory; Granule is the provider's commit unit (Caps), the
	// least memory a committed byte holds committed.
	Provider string
	Kind     Kind
	Granule  uint64
	// Capacity is the cap on reserved bytes.
	Capacity uint64
	// Reserved is the address space held in regions.
	Reserved uint64
	// Committed is the memory backed by the provider (locked, for locked memory); PeakCommitted
	// its highest value.
	Committed, PeakCommitted uint64
	// Locked is the committed memory that is page-locked (host-locked and host-pinned kinds).
	Locked uint64
	// InUse is the committed memory inside chunks that are handed out.
	InUse uint64
	// AlignWaste is memory made unusable to meet alignment: the bytes between an unaligned
	// region base and the first chunk. Zero for every region the arena maps itself.
	AlignWaste uint64
	// Regions, Chunks and ChunksInUse count the regions and chunks.
	Regions, Chunks, ChunksInUse int
	// RegionsReleased counts the regions given back empty (a provider with Caps.Releases).
	RegionsReleased uint64
	// RegionsRefused counts the regions whose release the provider refused (Provider.Release)
	// and that it has not taken back since. Such a region is out of use: no chunk of it is
	// handed out again, and it is not in Regions, Chunks nor PerRegion; its bytes stay in
	// Reserved (and count against the capacity) and what is committed of it in Committed. The
	// arena releases it again at each purge tick (the timer stays armed for it, ever less
	// often, up to a minute apart), at Trim and at Close.
	RegionsRefused int
	// Commits and Decommits count provider calls; Purged counts bytes decommitted.
	Commits, Decommits, Purged uint64
	// DecommitsRefused counts the purges' and Trims' decommits the provider refused: that
	// memory stays committed (it is still usable) and is tried again at the next purge, so a
	// count that keeps growing is a provider that will not give memory back.
	DecommitsRefused uint64
	// CommitCalls and DecommitCalls count calls of Arena.Commit and Arena.Decommit (a heap
	// claiming or giving up part of a span), whatever the provider had to do for them.
	CommitCalls, DecommitCalls uint64
	// ForcedPurges counts commits refused for want of memory (the memlock limit, device
	// memory) after which the arena gave back at once the memory waiting for the purge, and
	// tried again.
	ForcedPurges uint64
	// CommitTime is the time spent in the provider committing memory (and, for providers that
	// join registrations, joining them); CommitBytes the bytes committed in that time. Their
	// ratio is the cost of pinning memory: see CommitPerGiB.
	CommitTime  time.Duration
	CommitBytes uint64
	// Precommitted counts the bytes Precommit committed ahead of need.
	Precommitted uint64
	// CommitWorkers is the most goroutines one commit or decommit runs on (Options).
	CommitWorkers int
	// Node is the host NUMA node of the arena's memory (Placer), or NodeUnknown.
	Node int
	// PerRegion describes each region, in the order reserved: where it is, what of it is
	// committed, and its node.
	PerRegion []RegionStats
	// Kept is the committed memory of tracked ranges now idle: freed pages and
	// objects a heap keeps for reuse, in whole granules. It is part of Committed and InUse,
	// not of what waits for the purge; where the provider decommits, it is given up, and
	// decommitted at once, when it stays idle for the purge delay, or at Trim.
	Kept uint64
	// Counters is what the provider counts of its own work, when it does (Reporter).
	Counters ProviderStats
}

// RegionStats describes one region of an arena.
type RegionStats struct {
	// Base and Size are the region's address range.
	Base, Size uintptr
	// Committed is the region's committed memory.
	Committed uint64
	// Node is the host NUMA node of its memory, or NodeUnknown.
	Node int
}

// CommitPerGiB is the average time committing one GiB took (zero before any commit).
func (s Stats) CommitPerGiB() time.Duration {
	if s.CommitBytes == 0 {
		return 0
	}
	return time.Duration(float64(s.CommitTime) * float64(1<<30) / float64(s.CommitBytes))
}
