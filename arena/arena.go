// Package arena claims big regions of one kind of memory from a Provider and hands them out as
// chunks and runs of chunks. Package heap builds on it; use it directly for big buffers of
// whole chunks, or to build an allocator of your own.
//
// # Use
//
// Create an arena with New, naming the provider and how much it may reserve:
//
//	a, err := arena.New(arena.Options{Provider: arena.LockedHost(arena.HostOptions{}),
//		Capacity: 1 << 30})
//
// LockedHost and PageableHost give host memory, External a region the caller owns, package
// cudamem CUDA memory. Alloc(size, alignment) returns a Span: [Base, Base+Size), committed,
// and whether it reads as zero; Bytes views it as a []byte when the CPU can touch it. Free
// gives the span back; its memory stays committed for Options.PurgeDelay in case it is asked
// for again, then a timer decommits it, and Trim decommits it at once. A heap reserves a span
// instead (Reserve, ReserveNext), commits the pages it uses (Commit) and gives them up
// (Decommit). Lookup maps any address to its chunk, without a lock. Stats, Usage and Snapshot
// report what the arena holds. Close releases every region once every span is free.
//
// Every error wraps one of the package's sentinels (ErrCapacity, ErrMemlock, ErrInvalid, ...)
// for errors.Is; Exhausted tells a request that found no room, which giving memory back may
// cure, from one refused for another reason. An Arena is safe for use from several
// goroutines.
//
// The regions of the host providers (LockedHost, PageableHost, PinnableHost) are not passed
// to a child forked without exec (MADV_DONTFORK): in such a child (C code's fork, through cgo)
// nothing is mapped at their addresses, so the parent's locked and registered pages never
// become copy-on-write and are not counted twice. A child that execs is unaffected. An
// External region is the caller's: the arena leaves how it forks alone.
//
// # Design
//
// An Arena owns up to 64 regions, reserved from its provider on demand until their sizes
// add up to the arena's capacity. Each region is cut into chunks (2 MiB by default: the huge page,
// the GPU large page and the CUDA VMM granule) on a grid that starts at the region's base, or at
// the first address after it that meets Options.Align. Because the grid is base-relative, a
// region needs no alignment of its own: a provider that can align (mmap over-reserves and trims)
// gets chunk-aligned chunks for nothing, and one that cannot (cuMemAlloc, an external region)
// loses at most Align-1 bytes, counted in Stats.AlignWaste. Nothing is written into a region:
// every piece of bookkeeping is Go memory, so the same code serves memory the CPU cannot touch.
//
// Chunks are handed out singly (heap segments, reserved and committed page by page) or as runs
// (huge objects, committed at once) by first fit over a per-region bitmap. Memory is committed
// at the provider's granule (a host page, a VMM granule) and tracked per granule, so a run whose
// last chunk is mostly empty commits only what it uses. Each committed granule is either wanted
// (by an Alloc or a Commit) or not: the memory of freed chunks, of pages a heap gave up
// (Decommit) and what a new span left unclaimed in reused chunks. Unwanted memory stays
// committed, in case it is claimed again, until its chunk has gone Options.PurgeDelay without
// memory in it being given back (up to half as long again), and is then decommitted by a
// timer; Trim decommits it at once. The timer ticks every half delay while unwanted memory
// waits and counts purge generations; a chunk is stamped with the generation in which memory
// in it last became unwanted and purged three ticks later. So a free reads no clock (a clock
// read cost a quarter of a 1 MiB alloc+free pair on a VM). The stamp is per chunk: a chunk
// whose memory keeps being claimed and given back keeps all of its unwanted memory until it
// settles. A heap's freed pages that it keeps for reuse are tracked ranges: they
// stay wanted, with no arena call, while reused within the delay, and the same timer gives up
// those left idle.
//
// # Lookup
//
// Lookup maps any address to a dense ChunkID in O(1) without a lock: it scans an immutable,
// atomically published slice of regions (a handful at most) and shifts the address's offset
// from the region's grid. ChunkIDs are below MaxChunks for the arena's lifetime, so the layers
// above can keep flat tables indexed by them.
//
// # Locking
//
// One mutex serialises Alloc, Free, Trim, Stats and Close. They are the slow path: the heap
// calls them when it needs a new segment or a huge object. Lookup takes no lock.
package arena

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/align"
	"github.com/pinmalloc/pinmalloc/internal/bitset"
	"github.com/pinmalloc/pinmalloc/internal/keep"
)

// ChunkID identifies a chunk of an arena. IDs are dense: every ID is below Arena.MaxChunks.
type ChunkID uint32

// Span is a run of chunks handed out by Alloc.
type Span struct {
	// Base is the first usable address: it meets the alignment asked of Alloc.
	Base uintptr
	// Size is the size asked of Alloc; [Base, Base+Size) is committed.
	Size uintptr
	// ID is the first chunk of the run and N the number of chunks.
	ID ChunkID
	N  int
	// Zeroed reports that [Base, Base+Size) reads as zero.
	Zeroed bool
}

// Arena hands out chunks of one kind of memory. It is safe for use from several goroutines.
type Arena struct {
	prov     Provider
	caps     Caps
	chunk    uintptr
	shift    uint
	align    uintptr
	capac    uintptr
	regSize  uintptr
	delay    time.Duration
	maxIDs   int
	zeroer   Zeroer
	joiner   Joiner
	reporter Reporter
	log      *slog.Logger
	lend     *lending // the provider's Lender (lend.go), or nil
	// fixedBase and fixedEnd: over a region fixed in place (External), where it starts and
	// ends, known before it is reserved (MaxSpan); both 0 otherwise.
	fixedBase, fixedEnd uintptr

	workers    int           // Options.CommitWorkers (workers.go)
	threaded   Threaded      // the provider's thread setup, or nil
	prefaulter Prefaulter    // the provider's prefault, or nil
	spans      []gspan       // scratch for commitOnce and the purge, under mu
	decs       []gspan       // scratch for the purge's decommits, under mu
	given      []*keep.Range // scratch for giveUp, under mu

	pcMu   sync.Mutex // held by Precommit for each batch it commits, and by Close: lock order pcMu, mu
	pcHeld int        // chunks Precommit holds (marked in use) while it commits them, under mu
	pcDone *sync.Cond // on mu: broadcast when Precommit gives its chunks back

	regions atomic.Pointer[[]*region] // immutable snapshots, for Lookup

	mu       sync.Mutex
	closed   bool
	provKept bool // the provider (a KeptReleaser) refused to give back what it kept at the last Close
	nextID   ChunkID
	reserved uintptr
	st       Stats
	timer    *time.Timer
	clock    keep.Clock      // the timer's state (Armed, Gen, Timed), read by holders without mu
	kept     []*keep.Range   // tracked ranges (kept.go)
	refused  []refusedRegion // regions the provider refused to release (refused.go)
	// retryArmed: the timer is armed, not at the purge's pace (a.clock.Armed is false), only to
	// release the refused regions again after retryWait (refused_retry.go).
	retryArmed bool
	retryWait  time.Duration
	retries    bool // the timer retries refused regions: a purge delay, any provider
	// committedRegions: the provider returned a region committed at Reserve; Precommit takes
	// its regions to come so always (a provider's option decides it) and reserves none.
	committedRegions bool

	observers []RegionObserver // told of each region mapped and unmapped (observe.go), under mu
}

type region struct {
	r       *Region
	grid    uintptr // first chunk start
	end     uintptr // first address past the last chunk's usable bytes
	nchunks int
	firstID ChunkID
	used    bitset.Set // chunk handed out
	stamp   []int64    // per chunk: purge generation in which memory in it last became unwanted
	stale   bitset.Set // per chunk: stamped and not purged since, so the purge looks at no other
	commit  bitset.Set // per granule, relative to r.Base: committed
	want    bitset.Set // per granule: committed on a span's behalf (Alloc, Commit); the rest is purgeable
	dirty   bitset.Set // per granule: not known to read as zero
	gshift  uint
	emptied int64 // purge generation in which its last chunk in use was freed; -1 while one is (lend.go)
}

// New creates an arena. It reserves nothing until the first Alloc.
func New(o Options) (*Arena, error) {
	o, caps, err := o.resolve()
	if err != nil {
		return nil, err
	}
	shift, _ := align.Log2(o.ChunkSize)
	a := &Arena{
		prov: o.Provider, caps: caps, chunk: o.ChunkSize, shift: shift, align: o.Align,
		capac: o.Capacity, regSize: o.RegionSize, delay: o.PurgeDelay,
		maxIDs: int(o.Capacity>>shift) + 2*maxRegions, log: o.Logger,
	}
	if l, ok := o.Provider.(Lender); ok {
		if a.lend, err = newLending(l, o, caps); err != nil {
			return nil, err
		}
		a.capac = min(a.capac, a.lend.size)
		a.maxIDs = int(a.lend.size >> shift)
	}
	if f, ok := o.Provider.(fixedPlace); ok {
		base, size := f.fixedRegion()
		a.fixedBase, a.fixedEnd = base, base+min(size, a.capac) // grow uses no more
	}
	a.clock.Timed = o.PurgeDelay >= 0 && (caps.Decommits || caps.Releases && a.lend != nil)
	a.retries = o.PurgeDelay >= 0
	a.zeroer, _ = o.Provider.(Zeroer)
	a.joiner, _ = o.Provider.(Joiner)
	a.reporter, _ = o.Provider.(Reporter)
	a.threaded, _ = o.Provider.(Threaded)
	a.prefaulter, _ = o.Provider.(Prefaulter)
	a.workers = o.CommitWorkers
	a.st.CommitWorkers = o.CommitWorkers
	a.pcDone = sync.NewCond(&a.mu)
	a.st.Provider, a.st.Kind, a.st.Capacity = o.Provider.Name(), o.Provider.Kind(), uint64(o.Capacity)
	a.regions.Store(new([]*region))
	return a, nil
}

// Provider returns the arena's provider.
func (a *Arena) Provider() Provider { return a.prov }

// Kind returns the kind of memory the arena holds.
func (a *Arena) Kind() Kind { return a.prov.Kind() }

// ChunkSize returns the chunk size.
func (a *Arena) ChunkSize() uintptr { return a.chunk }

// Capacity returns the cap on reserved bytes.
func (a *Arena) Capacity() uintptr { return a.capac }

// MaxChunks bounds every ChunkID the arena will ever hand out.
func (a *Arena) MaxChunks() int { return a.maxIDs }

// Lookup returns the chunk holding address p, without a lock. ok is false for an address
// outside every region.
func (a *Arena) Lookup(p uintptr) (id ChunkID, ok bool) {
	if r := a.regionAt(p); r != nil {
		return r.firstID + ChunkID((p-r.grid)>>a.shift), true
	}
	return 0, false
}

// regionAt returns the region whose chunks hold address p, or nil.
func (a *Arena) regionAt(p uintptr) *region {
	for _, r := range *a.regions.Load() {
		if p-r.grid < r.end-r.grid {
			return r
		}
	}
	return nil
}

// ChunkBase returns the start address of a chunk.
func (a *Arena) ChunkBase(id ChunkID) (uintptr, bool) {
	if r := a.regionOf(id); r != nil {
		return r.grid + uintptr(id-r.firstID)<<a.shift, true
	}
	return 0, false
}

// MaxSpan returns the most bytes one Alloc or Reserve aligned to alignment (a power of two)
// can ever get from the arena, however much of it is free: its capacity, or less over an
// External region, which lies where its owner placed it: what of the region lies past its
// first address so aligned (and aligned to Options.Align). It is 0 for an alignment beyond the
// capacity. A request above it fails with ErrCapacity at once; a heap refuses it as too large
// where one that finds no room now is out of memory.
func (a *Arena) MaxSpan(alignment uintptr) uintptr {
	if alignment > a.capac {
		return 0
	}
	if a.fixedEnd == 0 {
		return a.capac
	}
	base, err := align.Up(a.fixedBase, max(alignment, a.align)) // the grid's first address so aligned
	if err != nil || base >= a.fixedEnd {
		return 0
	}
	return min(a.capac, a.fixedEnd-base)
}

// Alloc hands out a run of chunks holding at least size bytes from an address aligned to
// alignment (any power of two, beyond the chunk size too), commits exactly the granules those
// bytes touch and reports whether they read as zero. It reserves a new region when no region
// has room, up to the capacity; when none is left, or the provider has no memory left, it first
// releases again the regions whose release the provider refused.
func (a *Arena) Alloc(size, alignment uintptr) (Span, error) {
	return a.alloc(size, alignment, true)
}

// Reserve is Alloc without the commit: the caller commits the parts it uses with Commit, as a
// heap does page by page. Zeroed is false; Commit reports zero-ness per range.
func (a *Arena) Reserve(size, alignment uintptr) (Span, error) {
	return a.alloc(size, alignment, false)
}

func (a *Arena) alloc(size, alignment uintptr, commit bool) (Span, error) {
	if size == 0 || !align.IsPow2(alignment) {
		return Span{}, fmt.Errorf("%w: alloc %d bytes aligned to %d", ErrInvalid, size, alignment)
	}
	if size > a.capac || alignment > a.capac {
		return Span{}, fmt.Errorf("%w: %d bytes aligned to %d asked of an arena of capacity %d",
			ErrCapacity, size, alignment, a.capac)
	}
	if a.fixedEnd != 0 {
		if m := a.MaxSpan(alignment); size > m {
			return Span{}, fmt.Errorf("%w: %d bytes aligned to %d asked of an arena over the external region at %#x, which holds at most %d bytes at that alignment",
				ErrCapacity, size, alignment, a.fixedBase, m)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return Span{}, ErrClosed
	}
	retried := false // the refused regions released again for this Alloc
	for {
		r, s, ok := a.placeAny(size, alignment)
		var err error
		if !ok {
			if r, err = a.grow(size, alignment); err == nil {
				if s, ok = a.place(r, size, alignment); !ok {
					a.emptied(r) // a lent region left empty goes back as any other (lend.go)
					return Span{}, fmt.Errorf("%w: %d bytes aligned to %d do not fit a fresh region of %d bytes",
						ErrCapacity, size, alignment, r.r.Size)
				}
			}
		}
		if err == nil {
			sp, err := a.take(r, s, commit)
			if err != nil {
				a.emptied(r) // a lent region reserved for the span and left empty goes back too
			}
			return sp, err
		}
		if !retried && len(a.refused) != 0 && Exhausted(err) {
			// Regions the provider refused to release hold capacity (and memory) until the
			// retry timer, backing off, releases them: release them again now, once.
			retried = true
			n := len(a.refused)
			_ = a.releaseRefused() // a refusal again is logged once, and kept
			if len(a.refused) < n {
				continue // one released at least: capacity, memory, to try again with
			}
		}
		if a.pcHeld == 0 || !errors.Is(err, ErrCapacity) {
			return Span{}, err
		}
		// Precommit holds chunks while it commits them: they are free again, committed, after
		// its batch (one batch, not the whole precommit).
		a.pcDone.Wait()
		if a.closed {
			return Span{}, ErrClosed
		}
	}
}

// place finds, first fit, a free run in r for size bytes at an aligned address.
func (a *Arena) place(r *region, size, alignment uintptr) (Span, bool) {
	for s := r.used.Next(0, r.nchunks, false); s < r.nchunks; {
		e := r.used.Next(s, r.nchunks, true) // the free run is [s, e)
		lo := r.grid + uintptr(s)<<a.shift
		hi := min(r.grid+uintptr(e)<<a.shift, r.end)
		if base, err := align.Up(lo, alignment); err == nil && base < hi && size <= hi-base {
			first := int((base - r.grid) >> a.shift)
			last := int((base + size - 1 - r.grid) >> a.shift)
			return Span{Base: base, Size: size, ID: r.firstID + ChunkID(first), N: last - first + 1}, true
		}
		s = r.used.Next(e, r.nchunks, false)
	}
	return Span{}, false
}

// take marks s in use and, when asked, commits what it needs.
func (a *Arena) take(r *region, s Span, commit bool) (Span, error) {
	first := int(s.ID - r.firstID)
	glo, ghi := r.granules(s.Base, s.Size)
	if commit {
		s.Zeroed = r.dirty.Count(glo, ghi) == 0
		if err := a.commit(r, glo, ghi); err != nil {
			return Span{}, err
		}
		if err := a.join(r, glo, ghi); err != nil {
			a.markUnwanted(r, first, first+s.N) // committed, claimed by no span: the purge's
			return Span{}, err
		}
		r.dirty.SetRange(glo, ghi, true)
	} else {
		glo, ghi = 0, 0
	}
	r.used.SetRange(first, first+s.N, true)
	r.emptied = -1
	r.want.SetRange(glo, ghi, true)
	// Memory an earlier span left committed in these chunks, outside what this one asked for,
	// is purged after the delay unless a Commit claims it first; memory Precommit committed
	// stays for the span's Commits (a heap's segments, reserved, commit page by page).
	a.markUnwantedKeep(r, first, first+s.N, !commit)
	a.st.ChunksInUse += s.N
	return s, nil
}

// granules returns the granule indexes, relative to the region base, that [p, p+n) touches.
func (r *region) granules(p, n uintptr) (lo, hi int) {
	off := p - r.r.Base
	return int(off >> r.gshift), int((off+n-1)>>r.gshift) + 1
}

// grow reserves a region big enough for size bytes at the given alignment.
func (a *Arena) grow(size, alignment uintptr) (*region, error) {
	regs := *a.regions.Load()
	if len(regs) >= maxRegions {
		return nil, fmt.Errorf("%w: %d regions already reserved", ErrCapacity, len(regs))
	}
	// A provider rounds the size it is asked up to its granule, so the arena asks for whole
	// granules within the capacity left (avail): the regions never add up to more than the
	// capacity. A provider of fixed size returns its one region, the capacity, whatever it is
	// asked, and a lender its loans: they round nothing past it. The min guards a reserved
	// past the capacity all the same (a provider that rounds past its granule): nothing is
	// left then.
	avail := a.capac - min(a.reserved, a.capac)
	if _, fixed := a.prov.(FixedCapacity); !fixed && a.lend == nil {
		avail &^= a.caps.Granule - 1
	}
	need, err := align.Up(size, a.chunk)
	if err != nil || size > avail {
		return nil, fmt.Errorf("%w: %d bytes asked, %d of %d reserved, %d left in whole granules of %d",
			ErrCapacity, size, a.reserved, a.capac, avail, a.caps.Granule)
	}
	// A capacity that is not a whole number of chunks (an external region's size) ends in a
	// part of a chunk, which holds what fits in it.
	need = min(need, avail)
	if !a.caps.Aligns || alignment > a.chunk {
		// Room to align inside the region, as far as the capacity allows: place decides.
		need += min(max(alignment, a.align), avail-need)
	}
	want := max(need, min(a.regSize, avail))
	if up, err := align.Up(want, a.caps.Granule); err == nil {
		want = min(up, avail) // whole granules (avail is, but for a provider of fixed size)
	}
	if a.lend != nil {
		want = a.lend.lentSize(need)
	}
	ra := a.chunk
	if a.caps.Aligns {
		ra = max(ra, alignment)
	}
	rr, err := a.prov.Reserve(want, ra)
	if err != nil {
		a.logReserve(want, 0, err)
		return nil, err
	}
	if _, fixed := a.prov.(FixedCapacity); fixed && a.lend == nil && rr.Size > avail {
		// A provider of fixed size returns its whole region: the arena uses no more of it
		// than its capacity, in whole granules where the region is not committed.
		rr.Size = avail
		if !rr.Committed {
			rr.Size &^= a.caps.Granule - 1
		}
	}
	if !rr.Committed && rr.Size&(a.caps.Granule-1) != 0 {
		return nil, a.unreserve(rr, fmt.Errorf(
			"%w: provider %s reserved a region of %d bytes, not a whole number of its granule %d",
			ErrInvalid, a.prov.Name(), rr.Size, a.caps.Granule))
	}
	grid, err := align.Up(rr.Base, a.align)
	if err != nil || grid >= rr.End() {
		return nil, a.unreserve(rr, fmt.Errorf("%w: region [%#x, +%d) has no room after aligning to %d",
			ErrInvalid, rr.Base, rr.Size, a.align))
	}
	n := int((rr.End() - grid + a.chunk - 1) >> a.shift)
	firstID := a.nextID
	if a.lend != nil {
		if firstID, err = a.lentID(rr, grid, n); err != nil {
			return nil, a.unreserve(rr, err)
		}
	} else if int(a.nextID)+n > a.maxIDs {
		return nil, a.unreserve(rr, fmt.Errorf("%w: chunk table full", ErrCapacity))
	}
	if err := a.mapped(rr); err != nil { // an observer refuses it (observe.go)
		return nil, a.unreserve(rr, err)
	}
	gshift, _ := align.Log2(a.caps.Granule)
	ng := int((rr.Size + a.caps.Granule - 1) >> gshift)
	r := &region{
		r: rr, grid: grid, end: rr.End(), nchunks: n, firstID: firstID, emptied: -1,
		used: bitset.New(n), stamp: make([]int64, n), stale: bitset.New(n), commit: bitset.New(ng), want: bitset.New(ng), dirty: bitset.New(ng), gshift: gshift,
	}
	if rr.Committed {
		a.committedRegions = true
		r.commit.SetRange(0, ng, true)
		a.st.Committed += uint64(rr.Size)
		a.st.PeakCommitted = max(a.st.PeakCommitted, a.st.Committed)
	}
	if !rr.Zeroed {
		r.dirty.SetRange(0, ng, true)
	}
	if a.lend == nil {
		a.nextID += ChunkID(n)
	}
	a.reserved += rr.Size
	a.st.AlignWaste += uint64(grid - rr.Base)
	a.st.Chunks += n
	next := append(append(make([]*region, 0, len(regs)+1), regs...), r)
	a.regions.Store(&next)
	a.logReserve(rr.Size, rr.Base, nil)
	return r, nil
}

// unreserve gives rr, a region grow reserved and cannot use for the reason err, back to the
// provider and returns err, joined with the provider's refusal when it refuses: the arena then
// keeps the region, out of use and counted, and releases it again later (refused.go).
func (a *Arena) unreserve(rr *Region, err error) error {
	if rerr := a.prov.Release(rr); rerr != nil {
		var committed uint64
		if rr.Committed {
			committed = uint64(rr.Size)
		}
		a.reserved += rr.Size
		a.st.Committed += committed
		a.st.PeakCommitted = max(a.st.PeakCommitted, a.st.Committed)
		return errors.Join(err, a.keepRefused(rr, committed, false, rerr))
	}
	return err
}

// ReserveNext is Reserve of the n chunks that follow span s (of this arena, in use) in its
// region, when they are all free: a heap grows a run of adjacent chunks with it. It fails with
// an error wrapping ErrCapacity, taking nothing, when one of them is in use or past the
// region's end, and with one wrapping ErrInvalid when s is not a span in use, as Free.
func (a *Arena) ReserveNext(s Span, n int) (Span, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return Span{}, ErrClosed
	}
	if n <= 0 {
		return Span{}, fmt.Errorf("%w: %d chunks after a span of %d chunks at chunk %d", ErrInvalid, n, s.N, s.ID)
	}
	r, err := a.spanRegion(s)
	if err != nil {
		return Span{}, err
	}
	if r.used.Count(int(s.ID-r.firstID), int(s.ID-r.firstID)+s.N) != s.N {
		return Span{}, fmt.Errorf("%w: %d chunks after a span of %d chunks at chunk %d, which is not in use",
			ErrInvalid, n, s.N, s.ID)
	}
	first := int(s.ID-r.firstID) + s.N
	if n > r.nchunks-first || r.used.Count(first, first+n) != 0 {
		return Span{}, fmt.Errorf("%w: the %d chunks after chunk %d are not all free", ErrCapacity, n, s.ID+ChunkID(s.N-1))
	}
	base := r.grid + uintptr(first)<<a.shift
	return a.take(r, Span{Base: base, Size: min(uintptr(n)<<a.shift, r.end-base), ID: r.firstID + ChunkID(first), N: n}, false)
}

// Free gives a span back. Its chunks stay committed for the purge delay. A span that is not
// one Alloc or Reserve returned (from another arena, freed already, its Base or Size changed)
// is refused with an error wrapping ErrInvalid, and nothing is freed.
func (a *Arena) Free(s Span) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	r, err := a.spanRegion(s)
	if err != nil {
		return err
	}
	first := int(s.ID - r.firstID)
	if n := r.used.Count(first, first+s.N); n != s.N {
		return notInUse(r, s, first, n)
	}
	r.used.SetRange(first, first+s.N, false)
	glo, ghi := a.ownGranules(r, first, first+s.N, true)
	r.want.SetRange(glo, ghi, false)
	a.markUnwanted(r, first, first+s.N)
	a.st.ChunksInUse -= s.N
	a.emptied(r)
	return nil
}

// spanRegion returns the region of span s, which must be as Alloc or Reserve made it: its N
// chunks lie in one region of this arena from chunk ID on, and [Base, Base+Size) starts in
// chunk ID and ends in its last chunk (a span whose Base or Size was changed, or a made-up
// one, names other chunks than its own). Called under a.mu.
func (a *Arena) spanRegion(s Span) (*region, error) {
	r := a.regionOf(s.ID)
	if r == nil || s.N <= 0 || s.N > r.nchunks-int(s.ID-r.firstID) {
		return nil, fmt.Errorf("%w: span of %d chunks at chunk %d is not from this arena", ErrInvalid, s.N, s.ID)
	}
	first, last := int(s.ID-r.firstID), int(s.ID-r.firstID)+s.N-1
	if s.Base < r.grid || s.Base > r.end || s.Size == 0 || s.Size > r.end-s.Base ||
		int((s.Base-r.grid)>>a.shift) != first || int((s.Base+s.Size-1-r.grid)>>a.shift) != last {
		return nil, fmt.Errorf("%w: span [%#x, +%d) does not lie in its %d chunks from chunk %d: not a span Alloc returned",
			ErrInvalid, s.Base, s.Size, s.N, s.ID)
	}
	return r, nil
}

// notInUse is Free's error for span s, n of whose s.N chunks (from first on in region r) are
// in use: a double free when none is, a span that is not one Alloc returned when some are.
func notInUse(r *region, s Span, first, n int) error {
	if n == 0 {
		return fmt.Errorf("%w: span of %d chunks at chunk %d is not in use (double free)", ErrInvalid, s.N, s.ID)
	}
	free := first
	for r.used.Get(free) {
		free++
	}
	return fmt.Errorf("%w: span of %d chunks at chunk %d is only partly in use (%d of its chunks free, chunk %d first): not a span Alloc returned",
		ErrInvalid, s.N, s.ID, s.N-n, r.firstID+ChunkID(free))
}

func (a *Arena) regionOf(id ChunkID) *region {
	for _, r := range *a.regions.Load() {
		if id >= r.firstID && int(id-r.firstID) < r.nchunks {
			return r
		}
	}
	return nil
}

// chunkGranules returns the granules, relative to the region base, that chunk i touches.
func (a *Arena) chunkGranules(r *region, i int) (glo, ghi int) {
	lo := r.grid - r.r.Base + uintptr(i)<<a.shift
	hi := min(lo+a.chunk, r.r.Size)
	return int(lo >> r.gshift), int((hi + a.caps.Granule - 1) >> r.gshift)
}

// ownGranules returns the granules, relative to the region base, that chunks [first, last)
// touch, less the granule at either end that the chunk beyond that end touches too, when that
// chunk is in use (any chunk when inUse is false). Chunks share a granule only when the chunk
// grid is off the granule grid, in a region whose base is not aligned (an external region off a
// page boundary): that granule may hold a live block of the neighbour's span, so Free must not
// give it up, and Precommit, which commits without a.mu, must not commit it while an Alloc of
// the neighbour may.
func (a *Arena) ownGranules(r *region, first, last int, inUse bool) (glo, ghi int) {
	glo, _ = a.chunkGranules(r, first)
	_, ghi = a.chunkGranules(r, last-1)
	if first > 0 && (!inUse || r.used.Get(first-1)) {
		_, h := a.chunkGranules(r, first-1)
		glo = max(glo, h)
	}
	if last < r.nchunks && (!inUse || r.used.Get(last)) {
		l, _ := a.chunkGranules(r, last)
		ghi = min(ghi, l)
	}
	return glo, max(glo, ghi)
}

// ChunkAlign returns the alignment every chunk start meets: the chunk size when the provider
// aligns its regions, Options.Align otherwise.
func (a *Arena) ChunkAlign() uintptr {
	if a.caps.Aligns {
		return a.chunk
	}
	return a.align
}
