package device

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// What a device heap shows of itself beyond Stats: Usage for frequent sampling (no allocation,
// no driver call), Map and Blocks for debugging (the heap's lock, which makes it the owner of
// every stream heap, is held while the stream heaps and the arena are read: for the whole of
// Map, a consistent picture; for a batch of blockBatch blocks at a time in Blocks, whose walk
// grows with the live blocks, so that an Alloc waits for a batch, not for the whole walk), and
// a readable Stats.String.

// Usage is what a device heap holds, read without allocating.
type Usage struct {
	// Reserved is the address space held; Committed the device memory backed.
	Reserved, Committed uint64
	// InUse is the bytes asked for by live blocks and Live their number; a deferred free
	// counts until it is done.
	InUse, Live uint64
}

// Usage returns the heap's figures without allocating and without a driver call (deferred
// frees whose stream has passed them are done by the next Alloc or Stats, not here).
func (h *Heap) Usage() Usage {
	h.mu.Lock()
	var u Usage
	for _, sh := range h.streams {
		hu := sh.Usage()
		u.InUse += hu.InUse
		u.Live += hu.Live
	}
	for _, ps := range h.parked { // streams destroyed before their ForgetStream (park.go)
		if ps.sh != nil {
			hu := ps.sh.Usage()
			u.InUse += hu.InUse
			u.Live += hu.Live
		}
	}
	h.mu.Unlock()
	au := h.a.Usage()
	u.Reserved, u.Committed = au.Reserved, au.Committed
	return u
}

// Map returns a consistent picture of the heap's arena and of what its stream heaps hold in
// each chunk (the debug page draws it), under the heap's lock.
func (h *Heap) Map() heap.Map {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return heap.Map{Arena: h.a.Snapshot()}
	}
	return h.g.Map()
}

// blockBatch is how many blocks Blocks reads per hold of the heap's lock (it stops at the end
// of the page that reaches it).
const blockBatch = 1024

// Blocks lists the live blocks (deferred frees included) in address order within each
// region. It holds the heap's lock while it reads a batch of blocks, and lets it go between
// batches: each page's blocks are read at one instant, the list as a whole is not one picture.
func (h *Heap) Blocks() []heap.Block {
	var out []heap.Block
	var c heap.BlockCursor
	batch := make([]heap.Block, 0, 2*blockBatch) // a batch and the page that ends it
	for done := false; !done; {
		batch = batch[:0]
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return out
		}
		done = h.g.BlocksFrom(&c, blockBatch, func(b heap.Block) { batch = append(batch, b) })
		h.mu.Unlock()
		runtime.Gosched() // an Alloc the batch held up runs before the next batch locks again
		out = append(out, batch...)
	}
	return out
}

// String formats the figures for people.
func (s Stats) String() string {
	var b strings.Builder
	a := s.Arena
	fmt.Fprintf(&b, "device heap: %s memory from %s\n", a.Kind, a.Provider)
	fmt.Fprintf(&b, "  memory:   %s committed (peak %s), %s reserved of %s capacity, alignment waste %s\n",
		units.Bytes(a.Committed), units.Bytes(a.PeakCommitted), units.Bytes(a.Reserved), units.Bytes(a.Capacity), units.Bytes(a.AlignWaste))
	fmt.Fprintf(&b, "  blocks:   %d live, %s in use (peak %s); %d allocs, %d frees (%d deferred, %d waiting); %d streams\n",
		s.Live, units.Bytes(s.InUse), units.Bytes(s.PeakInUse), s.Allocs, s.Frees, s.DeferredFrees, s.Deferred, s.Streams)
	fmt.Fprintf(&b, "  arena:    %d regions, %d of %d chunks in use; %d commits, %d decommits, %s purged, %d forced purges\n",
		a.Regions, a.ChunksInUse, a.Chunks, a.Commits, a.Decommits, units.Bytes(a.Purged), a.ForcedPurges)
	fmt.Fprintf(&b, "  driver:   %d calls, %d objects, %d events; %d reclaims; committing took %v for %s\n",
		a.Counters.DriverCalls, a.Counters.DriverObjects, s.Events, s.Reclaims, a.CommitTime.Round(time.Microsecond), units.Bytes(a.CommitBytes))
	return b.String()
}
