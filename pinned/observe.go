package pinned

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// What a pool shows of itself beyond Stats: Usage for frequent sampling (no allocation), Map
// and Blocks for debugging (every shard's lock is held, in shard order, while the heaps and the
// arena are read; lock order shard locks → arena), and a readable Stats.String. Map takes one
// consistent picture under the locks; Blocks, whose walk grows with the live buffers, takes
// them for a batch of blockBatch buffers at a time, so that an Alloc waits for one batch, not
// for the whole walk (63 ms for 100 000 buffers on a loaded 2-core machine), and formats the
// buffers outside them.

// Usage is what a pool holds, read without allocating.
type Usage struct {
	// Reserved is the address space held; Committed the memory backed; Locked the committed
	// memory that is page-locked.
	Reserved, Committed, Locked uint64
	// InUse is the bytes asked for by live buffers and Live their number.
	InUse, Live uint64
	// Deferred and DeferredBytes are Stats': the live buffers freed that wait for a stream.
	Deferred, DeferredBytes uint64
	// Precommitted is the memory committed ahead of need so far (Options.Precommit): the
	// background commit's progress.
	Precommitted uint64
}

// Usage returns the pool's figures without allocating: it holds every shard (collecting the
// frees other goroutines made, as Stats does; one membarrier for them all when the pool has
// fast sections) while it reads the heaps, the deferred buffers and the arena, so that its
// figures are those of one instant, with Stats' guarantees: InUse at most Committed, Live 0
// exactly when InUse is, Deferred at most Live and DeferredBytes at most InUse.
func (p *Pool) Usage() Usage {
	var u Usage
	var au arena.Usage
	if p.released.Load() {
		au = p.a.Usage()
		u.Deferred, u.DeferredBytes = p.deferred()
	} else {
		ss := p.lockAll()
		for _, s := range ss {
			hu := s.h.Usage()
			u.InUse += hu.InUse
			u.Live += hu.Live
		}
		u.Deferred, u.DeferredBytes = p.deferred() // after the collects, as Stats reads them
		au = p.a.Usage()
		p.unlockAll(ss)
	}
	if statsLetGo != nil {
		statsLetGo()
	}
	u.Reserved, u.Committed, u.Locked, u.Precommitted = au.Reserved, au.Committed, au.Locked, au.Precommitted
	return u
}

// lockAll holds every shard, in shard order, and returns them.
func (p *Pool) lockAll() []*shard {
	p.growMu.Lock() // no shard is added while the picture is taken
	ss := *p.shards.Load()
	p.hold(ss)
	return ss
}

func (p *Pool) unlockAll(ss []*shard) {
	for _, s := range ss {
		letGo(s)
	}
	p.growMu.Unlock()
}

// Map returns a consistent picture of the pool's arena and of what its heaps hold in each
// chunk (the debug page draws it). It holds every shard's lock while it reads, so allocation
// waits for it (about 5 ms for 1 GiB holding 100 000 buffers: BenchmarkMap): it is for
// debugging, not for sampling (see Usage).
func (p *Pool) Map() heap.Map {
	if p.released.Load() {
		return heap.Map{Arena: p.a.Snapshot()}
	}
	ss := p.lockAll()
	defer p.unlockAll(ss)
	for _, s := range ss {
		s.h.Collect()
	}
	return p.g.Map()
}

// Block is a live buffer.
type Block struct {
	// Addr is the buffer's address, Size its length and BlockSize the memory it occupies (its
	// size class); Kind says what holds it ("small", "medium", "large", "object", "huge").
	Addr      uintptr
	Size      int
	BlockSize int
	Kind      string
	// Age is the time since the buffer was allocated, and Site where (the caller of Alloc and
	// its callers, innermost first), when Options.RecordSites is on; zero and nil otherwise.
	Age  time.Duration
	Site []string
}

// blockBatch is how many buffers Blocks reads per hold of the shards (it stops at the end of
// the page that reaches it): about 0.2 ms of walking, or 0.5 ms with sites to look up.
const blockBatch = 1024

// Blocks lists the live buffers in address order within each region. With
// Options.RecordSites it adds each buffer's age and allocation site (a buffer whose Alloc or
// Free is under way during the call may show none). It holds every shard's lock while it reads
// a batch of buffers, and lets them go between batches: each page's buffers are read at one
// instant, the list as a whole is not one picture (a buffer allocated or freed during the call
// may be listed or not).
func (p *Pool) Blocks() []Block {
	var out []Block
	var c heap.BlockCursor
	// Room for a batch and the page that ends it, so that nothing grows under the locks.
	batch := make([]heap.Block, 0, 2*blockBatch)
	var recs []siteRecord
	var sites map[[siteDepth]uintptr][]string // each site formatted once
	if p.sites != nil {
		recs = make([]siteRecord, 0, 2*blockBatch)
		sites = map[[siteDepth]uintptr][]string{}
	}
	for done := false; !done; {
		if p.released.Load() {
			return out
		}
		batch, recs = batch[:0], recs[:0]
		ss := p.lockAll()
		done = p.g.BlocksFrom(&c, blockBatch, func(b heap.Block) { batch = append(batch, b) })
		if p.sites != nil {
			// Still under the shard locks, so that no buffer is handed out again meanwhile. A
			// buffer freed since the walk (frees take no shard lock) has lost its record and is
			// no longer live: it is dropped. One whose Alloc has not yet recorded it stays.
			kept := batch[:0]
			for _, b := range batch {
				r, ok := p.sites.get(b.Addr)
				if !ok {
					if n, err := p.g.Size(b.Addr); err != nil || uint64(n) != b.Size {
						continue
					}
				}
				kept = append(kept, b)
				recs = append(recs, r)
			}
			batch = kept
		}
		p.unlockAll(ss)
		// An Alloc the batch held up was woken onto this P by the unlock: let it run before
		// the next batch takes the locks again (sync.Mutex hands over only after 1 ms).
		runtime.Gosched()
		now := time.Now()
		for i, b := range batch {
			o := Block{Addr: b.Addr, Size: int(b.Size), BlockSize: int(b.BlockSize), Kind: b.Kind.String()}
			if i < len(recs) && recs[i].n > 0 {
				r := &recs[i]
				site, ok := sites[r.pcs]
				if !ok {
					site = r.frames()
					sites[r.pcs] = site
				}
				o.Age = now.Sub(r.when)
				o.Site = slices.Clone(site) // the caller's own, as before
			}
			out = append(out, o)
		}
	}
	return out
}

// String formats the figures for people: sizes in binary units, one line per group of figures,
// and the size classes in use.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pinned pool: backend %s, %s memory from %s\n", s.Backend, s.Kind, s.Provider)
	fmt.Fprintf(&b, "  memory:     %s committed (peak %s), %s locked, %s reserved of %s capacity\n",
		units.Bytes(s.Committed), units.Bytes(s.PeakCommitted), units.Bytes(s.Locked), units.Bytes(s.Reserved), units.Bytes(s.Capacity))
	fmt.Fprintf(&b, "  buffers:    %d live, %s in use (peak %s); %d allocs, %d frees; %d shards\n",
		s.Live, units.Bytes(s.InUse), units.Bytes(s.PeakInUse), s.Allocs, s.Frees, s.Shards)
	frag := "-"
	if s.Fragmentation > 0 {
		frag = fmt.Sprintf("%.2f", s.Fragmentation)
	}
	fmt.Fprintf(&b, "  overhead:   committed/in use %s, alignment waste %s, %d forced purges\n", frag, units.Bytes(s.AlignWaste), s.ForcedPurges)
	fmt.Fprintf(&b, "  system:     %d syscalls, %d driver calls, %d driver objects; committing took %v for %s (%v per GiB)\n",
		s.Syscalls, s.DriverCalls, s.DriverObjects, s.CommitTime.Round(time.Microsecond), units.Bytes(s.CommitBytes), s.CommitPerGiB.Round(time.Microsecond))
	if s.Node >= 0 {
		fmt.Fprintf(&b, "  placement:  NUMA node %d, %d commit workers\n", s.Node, s.CommitWorkers)
	}
	if s.Precommitted > 0 || s.Precommitting || s.PrecommitErr != nil {
		fmt.Fprintf(&b, "  precommit:  %s committed ahead", units.Bytes(s.Precommitted))
		if s.Precommitting {
			b.WriteString(", running")
		}
		if s.PrecommitErr != nil {
			fmt.Fprintf(&b, ", stopped: %v", s.PrecommitErr)
		}
		b.WriteByte('\n')
	}
	for _, c := range s.Classes {
		fmt.Fprintf(&b, "  class %9s: %d live, %d allocs, %d frees, %s\n", units.Bytes(c.Size), c.Live, c.Allocs, c.Frees, units.Count(uint64(c.Pages), "page"))
	}
	return b.String()
}
