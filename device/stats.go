package device

import (
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
)

// A Heap's figures.

// Stats describes a Heap.
type Stats struct {
	// Streams is the number of streams with a heap, those destroyed before a ForgetStream that a
	// CUDA graph capture refused included, until the heap synchronizes the context for them.
	Streams int
	// Live and InUse count the blocks not yet freed (a deferred free counts until it is done,
	// and a held block's free until its last Release) and the bytes asked for them. PeakInUse
	// is the sum of each stream's heap's peak of InUse: exact with one stream, an upper bound
	// on the true peak with several (as pinned.Stats.PeakInUse is over shards).
	Live, InUse, PeakInUse uint64
	// Deferred is the number of frees waiting for their stream to pass them.
	Deferred int
	// Events is the number of events the heap has created and not destroyed (idle in its pool
	// or recorded for the deferred frees of a busy stream). Zero after Close.
	Events int64
	// Allocs counts allocations; Frees frees done (immediate or deferred); DeferredFrees the
	// frees that had to wait for their stream; Reclaims the times an allocation ran out of memory
	// and reclaimed what other streams held.
	Allocs, Frees, DeferredFrees, Reclaims uint64
	// Purges counts the stream heaps the idle purge gave back (Options.PurgeDelay), and
	// PurgeTicks the purge's looks at them.
	Purges, PurgeTicks uint64
	// Arena is the arena's figures.
	Arena arena.Stats
	// Released is true once Close has closed the heap and given back its memory: its figures
	// change no more, and a collector of them (package metrics, package debugpage) drops the
	// heap. A Close that the driver refused to give memory back leaves it false, the memory
	// counted, until a later Close gives it back.
	Released bool
}

// Stats returns the heap's figures, after doing the deferred frees that have completed.
func (h *Heap) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		_ = h.poll()
		_ = h.settleParked(false, noneMine)
	}
	st := h.st
	st.Streams = len(h.streams) + h.parkedHeaps()
	st.Live, st.InUse, st.PeakInUse = h.live()
	st.Deferred = len(h.deferred)
	st.Events = h.events.Created() - h.events.Destroyed()
	st.Arena = h.a.Stats()
	st.Released = h.closed && !h.refused
	return st
}

// live counts the blocks of every stream heap, the parked ones' included (deferred frees
// included), their bytes and the sum of the heaps' peaks of bytes.
func (h *Heap) live() (n, bytes, peak uint64) {
	count := func(sh *heap.Heap) {
		hs := sh.Stats()
		n += hs.Live
		bytes += hs.InUse
		peak += hs.Peak
	}
	for _, sh := range h.streams {
		count(sh)
	}
	for _, ps := range h.parked {
		if ps.sh != nil {
			count(ps.sh)
		}
	}
	return n, bytes, peak
}
