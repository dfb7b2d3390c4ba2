// Package uvm is a user-space memory tier: blocks of GPU memory that do not all fit in a VRAM
// budget are evicted to pinned host memory and brought back when used, the way NVIDIA's UVM
// driver pages managed memory, but explicitly, in stream order, and in batches moved at copy
// bandwidth.
//
// # Use
//
//	tier, err := uvm.New(dev, uvm.Options{DeviceBudget: 1 << 30}) // dev from cuda.Open
//	...
//	defer tier.Close()
//	h, err := tier.Alloc(1 << 20)           // a block of 1 MiB, no storage yet
//	p, err := tier.Acquire(h, s, uvm.Write) // on the device, for the work queued on s next
//	...                                     // kernels and copies queued on s use p
//	err = tier.Release(h, s)                // evictable again once s has passed this point
//	err = tier.Free(h)
//
// TestPackageUse runs this on the fake driver (package cuda/cudatest), where no GPU is needed.
//
// # Blocks and handles
//
// Alloc(n) returns a Handle: a slot index and a generation, so a handle used after Free is
// detected (ErrInvalidHandle), never mistaken for the block that reuses its slot, and so is a
// handle of another tier (each tier numbers its generations from a base of its own). A block's
// bytes live on the device (VRAM from a device.Heap, within Options.DeviceBudget), on the host
// (a buffer of a pinned.Pool of CUDA pinned host memory: VMM host granules, or registered
// memory on older drivers), or both. Its states:
//
//	fresh     no storage yet; contents undefined (Alloc)
//	host      host copy only (after an eviction)
//	clean     on the device, and the host copy is equal (restored, or acquired for reading)
//	dirty     on the device only, or the host copy is stale (acquired for writing)
//
// and, orthogonally, acquired (pinned) or not. Acquire(h, s, mode) makes the block resident and
// returns its device address for work queued on stream s; Release(h, s) ends that use.
// Acquisitions count, per stream; an acquired block is never moved or evicted. Mode Write
// marks the host copy stale (dirty); Read keeps it valid (clean). AcquireHost gives Go a
// []byte of the host copy (bringing it up to date first, which waits for the copy), and
// ReleaseHost ends that; a block acquired on the host for writing loses its device copy.
//
// # Stream order, not CPU waits
//
// The tier owns two streams, one per direction. A restore for Acquire on s is copied on the H2D
// stream behind an event, and s waits on that event (cuStreamWaitEvent): Acquire returns without
// waiting for the copy. Release(h, s) records an event on s (one per block and stream, re-recorded
// by later releases); evicting or freeing the block first makes the D2H stream wait on those
// events, so the copy out reads what the user's kernels wrote (PyTorch's record_stream). The VRAM
// of an evicted or freed block is reused only once an event recorded on the D2H stream after its
// copy has completed; then the tier keeps it as spare VRAM for its next restores, within twice the
// budget with the blocks on the device, and gives it back to the heap when the heap runs short (a
// spare block costs a restore a few nanoseconds, where a heap Free and Alloc per block cost more
// than a batch's copy of a small block). A host buffer being written by an eviction is read by a
// restore only after the H2D stream waited on that eviction's event. Completions are found by
// polling (cuEventQuery, internal/streamq), oldest first per stream, on every migration and in
// Stats; Sync and Close wait for them.
//
// A block handed from one stream to another is ordered by the tier: Acquire(h, s2) makes s2
// wait (cuStreamWaitEvent) for the release event of each other stream whose use of the block
// ended since it last moved, so work on s2 sees what the work released on s1 wrote, whether the
// block stayed on the device or was evicted and brought back between the two (then through the
// tier's copies). Acquiring again on the stream that waited last makes no driver call. Uses on
// two streams at once (both acquired, neither released) are the program's to order, as for
// any device memory.
//
// The []byte AcquireHost returns is a buffer of the tier's pinned.Pool. A device.Heap copy
// queued from or into it (HtoDAsync, DtoHAsync) records its stream on the buffer, so freeing,
// evicting or dropping the block while such a copy is still queued never hands the buffer to
// another block before the stream has passed the copy; and once the block is acquired for
// writing on the device, its new bytes are copied to the host into another buffer, never into
// one such a copy may still read. A copy queued into it must have run before the block is
// acquired on the device or prefetched, whose restore reads the buffer on the tier's stream.
// Other asynchronous work on it (a kernel, a copy of another binding) must be waited for before
// ReleaseHost.
//
// The user's streams are raw handles: Acquire and Prefetch check theirs with the driver the
// first time the tier sees it (ErrInvalidStream), and remember it, so that later calls make no
// driver call. Call ForgetStream before destroying a stream the tier has seen; a Release on a
// stream destroyed without it still ends the use, after a device wait, except while a CUDA
// graph capture holds another stream the tier knows, which that wait would end: the Release
// is then refused with ErrCapturing, the use going on until it is called again after the
// capture.
//
// # Eviction
//
// When a restore needs room (the budget, or the device heap refusing memory), or another user
// of a shared device heap finds it full (the heap's pressure hook), the tier walks
// the Policy's order, coldest first: among the 4 coldest blocks it takes clean
// ones first (no copy: the VRAM is dropped), then any in policy order. The window keeps the
// preference for clean blocks from overriding the policy: a hot clean block is not evicted
// before a cold dirty one just because dropping it is free (a scan of fresh blocks would
// otherwise flush a scan-resistant policy's hot set). Acquired blocks are never candidates;
// blocks under thrash protection only when nothing else will do. If the acquired blocks hold
// so much of the budget that the request cannot fit, Acquire fails with ErrAllPinned
// (AcquireContext waits for a release instead).
//
// The victims move in one batch: the dirty ones' bytes are copied to host buffers, handed to
// the Mover a launch at a time while the batch is built, so that the device copies
// the first blocks while the CPU prepares the rest. Restores are batched the same way.
//
// # Thrashing
//
// Like the driver's, per block: a block migrated (either way) 3 times in a row,
// each within Options.ThrashLapse of the one before, is thrashing; the tier then keeps it on
// the device for Options.ThrashPin instead of evicting it again, and counts the event. Its
// history resets after a quiet second.
//
// # A device fault
//
// After a kernel or copy faults (CUDA_ERROR_ILLEGAL_ADDRESS and its kind), the context's error
// is sticky: every wait fails, and the tier can no longer tell whether work queued before the
// fault still reads or writes a block's memory. Free then frees the block but keeps its VRAM and
// host buffer out of use, rather than hand them to another block or another user of the heap
// or pool (a silent corruption), and returns ErrHeldBack; Stats counts that memory
// (HeldBackDeviceBytes, HeldBackHostBytes). The VRAM of a restore that failed, and the host
// buffers a failed eviction's or AcquireHost's copies may still write, are held back the same
// way when the waits for their copies fail; so is, at its Free, the host buffer a failed
// restore's copies may still read. An Acquire for writing of a block whose host buffer Go had
// (AcquireHost) fails, changing nothing, when the tier cannot let go of that buffer. Sync gives
// the memory held back to where it goes once a synchronize of the device succeeds. Close frees
// every block and closes the tier all the same, but keeps the memory held back, with the
// streams, events, device heap and host pool that hold it, and returns ErrHeldBack naming how
// much; a later Close tries again and gives everything back once the device synchronizes
// (Stats.Released turns true). Under a sticky error it never does (NVIDIA's word is to end the
// process), so that memory stays allocated until the process ends; nothing is freed under work
// that may still run, and nothing panics.
//
// # Concurrency
//
// A Tier is safe for concurrent use. Its calls queue work on streams and return without
// waiting for the GPU, except Sync, Close, AcquireHost, an allocation while the device heap is
// out of memory, and a Release or Free whose event cannot be recorded.
package uvm

import (
	"errors"
	"fmt"
	"sync"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/copyengine"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Implementation notes.
//
// Invariants.
//
// With Tier.mu held, between calls:
//   - an acquired block is on the device, out of the policy's order, and does not move;
//   - the policy holds exactly the live blocks on the device that are not acquired;
//   - device + host-only + fresh bytes are the live bytes; device bytes stay within the budget,
//     and with the spare VRAM within twice the budget;
//   - memory a queued copy or the user's queued work may still touch (VRAM, a host buffer) is
//     reused only after the event of the batch that retires it has completed (or, when the
//     waits cannot be queued, after the CPU waited for the release events and the D2H
//     stream: retire); it then becomes spare VRAM or goes back to the heap (Free, the heap's
//     synchronous free: nothing uses it any more) or the pool. The spare VRAM, the
//     evictions' VRAM, the completions' lists (internal/streamq) and the host buffers the
//     pressure hook or Close give back all pass through a completion first;
//   - every host buffer is one range the device can copy by DMA, so a block moves as one copy;
//   - a batch that fails moves no block: its blocks stay where they were, intact.
//
// Concurrency and lock order.
//
// A Tier is safe for concurrent use: one mutex guards it, held across driver calls (they are
// enqueues, never waits, except in Sync, Close, AcquireHost, a device heap that is out of
// memory, and a Release or Free whose event cannot be recorded: streams.go).
//
// Lock order: Tier.mu → device.Heap's lock → pinned.Pool's shard locks. The heap's pressure
// hook takes Tier.mu on another user's goroutine, which holds no heap lock then; for the tier's
// own allocations (made holding Tier.mu, on its H2D stream) it only tries the locks of the
// other tiers of a shared heap, never waits for one (peers.go).
//
// Source files.
//
//	tier.go        this documentation; the Tier, its parts, New and Close
//	closekept.go   what a Close keeps when the driver refuses it back, for a later Close
//	options.go     Options, their defaults and checks
//	block.go       the block table: handles, states, Alloc, Free
//	access.go      Acquire, AcquireContext, Release: device access in stream order
//	host.go        AcquireHost, ReleaseHost; host buffers
//	release.go     release events and the waits built from them
//	heldback.go    memory kept out of use when the driver refuses the waits for it
//	restore.go     restores: Acquire's miss, Prefetch; VRAM for a block (devAlloc)
//	evict.go       evictions: for room, for the heap, Evict
//	victims.go     choosing what to evict (makeRoom, pickVictims)
//	launch.go      a batch's copies, queued a launch at a time
//	completion.go  batches on the two streams, and what each frees when done; Sync
//	spare.go       spare VRAM kept for the next restores, and why
//	pressure.go    the tier as the device heap's pressure hook
//	peers.go       tiers sharing a device heap ask each other for VRAM
//	streams.go     the user's streams: checking, forgetting, a destroyed stream
//	mover.go       the copy engine: Mover, the default Batcher, PerJobMover
//	policy.go      Policy and LRU; twoq.go: 2Q; list.go: their intrusive list
//	thrash.go      thrash detection
//	stats.go       Stats and the counting of migrations
//	errors.go      the sentinel errors

// Tier keeps blocks in VRAM within a budget and the rest in pinned host memory: Alloc a block,
// Acquire it on a stream for its device address, Release it when the stream's work is queued,
// Free it when done. Blocks beyond the budget are evicted to the host and restored when
// acquired, in stream order (see the package documentation). A Tier is safe for concurrent use;
// Close it before the device heap it was given and before the cuda.Device. A tier must be
// closed: only Close gives its VRAM, host buffers and streams back. One dropped without Close
// on a device heap it was given stays reachable through the heap's pressure hook as long as
// the heap is, and goes on evicting its blocks when the heap's other users run short (the
// VRAM its blocks hold is that heap's).
type Tier struct {
	// Its state comes in parts, each a small type declared with the code that uses it. The
	// first are fixed by New (Close takes their memory and streams back); the rest change under
	// mu.

	dev    *icuda.Device
	pub    *cuda.Device // dev, as given
	mem    stores       // the device heap and the host pool, and the tier's share of each
	engine engine       // the mover, the tier's two streams and its events (mover.go)
	hook   pressureHook // the tier as the device heap's pressure hook (pressure.go)
	opts   settings     // the Options the tier consults as it runs (options.go)

	mu          sync.Mutex
	closed      bool
	heldAtClose bool          // Close kept memory held back (heldback.go): a later Close tries again
	held        heldBack      // memory kept out of use after a failed wait (heldback.go)
	wake        chan struct{} // closed by signal, to wake AcquireContext's waiters (access.go)
	blocks      []block       // the block table, indexed by BlockID (block.go)
	free        []uint32      // free slots of blocks
	policy      Policy        // the eviction order of the evictable blocks (policy.go, victims.go)
	acct        accounts      // byte counts
	st          Stats         // counters; Stats adds the rest
	batches     batches       // the batches queued on the tier's streams (completion.go)
	streams     *userStreams  // the user's streams the driver accepted (streams.go)
	rel         releases      // release events, and the waits of a batch being built (release.go)
	spare       spares        // VRAM kept for the next restores (spare.go)
	scratch     scratch       // slices every batch reuses
	checks      uint32        // calls of checkInvariants (verify.go)
	genBase     uint32        // the generation of a new slot (block.go), fixed by New
	lat         acquireClock  // which acquisitions are timed (latency.go)
}

// stores are where the blocks' bytes live: VRAM from a device heap, within the budget, and
// buffers of a pinned host pool, within the host capacity. Fixed by New.
type stores struct {
	heap    *device.Heap
	ownHeap bool    // New made heap: Close closes it
	budget  uintptr // Options.DeviceBudget, rounded to hostAlign
	pool    *pinned.Pool
	ownPool bool    // New made pool: Close closes it
	hostCap uintptr // Options.HostCapacity
	unified bool    // host addresses are device addresses (unified addressing)
}

// accounts are the byte counts the invariants speak of.
type accounts struct {
	live, device, hostOnly, fresh uintptr // device + hostOnly + fresh == live
	hostHeld                      uintptr // host buffers held (host-only blocks and host copies)
	pinned                        uintptr // bytes of acquired blocks
	pinnedBlocks                  int
}

// scratch holds the slices every batch reuses, so that moving blocks allocates nothing. t.mu
// is held while they are used.
type scratch struct {
	jobs    []CopyJob // an eviction's copies
	rjobs   []CopyJob // a restore's (it may evict for room while it builds its jobs)
	victims []BlockID // the blocks pickVictims chose
	one     []BlockID // the blocks of an Acquire, Prefetch or Evict
	kept    []BlockID // the blocks of a Prefetch already on the device (restoring.kept)
}

// New creates a tier on dev, which must stay open until Close. When it fails part-way, it gives
// back what it made; where the driver refuses to give back the memory of the device heap or
// host pool it made for the tier, its error matches ErrLeaked and says how many bytes stay
// allocated (until the process ends: there is no tier to close them again).
func New(pub *cuda.Device, o Options) (*Tier, error) {
	dev, err := icuda.Of(pub)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if o, err = o.withDefaults(); err != nil {
		return nil, err
	}
	if err := o.checkGiven(pub.Ordinal()); err != nil {
		return nil, err
	}
	t := &Tier{
		dev: dev, pub: pub, policy: o.Policy,
		mem:     stores{budget: roundUp(uintptr(o.DeviceBudget)), hostCap: uintptr(o.HostCapacity)},
		engine:  engine{events: icuda.NewEventPool(dev)},
		opts:    settings{clock: o.Clock, onMigrate: o.OnMigrate, thrashLapse: int64(o.ThrashLapse), thrashPin: int64(o.ThrashPin)},
		lat:     acquireClock{every: hitEvery},
		genBase: genBase(),
	}
	t.batches = newBatches(dev, t.engine.events)
	t.streams = streamq.NewLists[struct{}](t.batches.lists.Points(), nil, 1)
	t.batches.lists.SetOthers(t.userStreams) // Recover's capture check asks them (streams.go)
	if err := t.open(o); err != nil {
		// Under the lock and closed: the heap's hook may already be installed and called.
		t.mu.Lock()
		t.closed = true
		rerr := t.release(true)
		t.mu.Unlock()
		return nil, errors.Join(err, rerr)
	}
	t.st.Policy = t.policy.Name()
	t.st.Mover = "custom"
	if b, ok := t.engine.ownMover.(*copyengine.Batcher); ok {
		t.st.Mover = b.Method().String()
	}
	t.st.Budget = uint64(t.mem.budget)
	return t, nil
}

// open makes what New needs from the driver; release undoes what it made.
func (t *Tier) open(o Options) error {
	ua, err := t.dev.Attribute(icuda.AttrUnifiedAddressing)
	if err != nil {
		return fmt.Errorf("uvm: the device's unified addressing query: %w", err)
	}
	t.mem.unified = ua == 1
	sh2d, err := t.dev.StreamCreate(true)
	if err != nil {
		return fmt.Errorf("uvm: H2D stream: %w", err)
	}
	t.engine.h2d = cuda.Stream(sh2d)
	sd2h, err := t.dev.StreamCreate(true)
	if err != nil {
		return fmt.Errorf("uvm: D2H stream: %w", err)
	}
	t.engine.d2h = cuda.Stream(sd2h)
	if err := t.openHeap(o.Heap); err != nil {
		return err
	}
	if err := t.openPool(o.HostPool, uintptr(o.HostPrecommit)); err != nil {
		return err
	}
	t.installPressure()
	if err := t.openMover(o.Mover); err != nil {
		return err
	}
	if openFault != nil {
		return openFault(t)
	}
	return nil
}

// openFault, set by tests only, makes open fail once it has made everything.
var openFault func(*Tier) error

// openHeap takes the device heap given, or makes the tier's own.
func (t *Tier) openHeap(shared *device.Heap) error {
	if shared != nil {
		t.mem.heap = shared
		return nil
	}
	// Room for the budget, the size classes' rounding (at most 1/8) and memory whose free
	// waits for its copy out (heapCapacity). Never purged: the VRAM an eviction frees is what
	// the next restore takes, and committing VMM device memory again costs 0.4-0.77 ms per
	// 2 MiB (measured on an H100), where copying 2 MiB takes 40 µs.
	capacity := heapCapacity(t.mem.budget)
	h, err := device.New(t.pub, device.Options{Capacity: int(capacity), Align: hostAlign, PurgeDelay: -1})
	if err != nil {
		return fmt.Errorf("uvm: device heap: %w", err)
	}
	t.mem.heap, t.mem.ownHeap = h, true
	return nil
}

// openPool takes the host pool given, or makes the tier's own, committing precommit bytes of
// it in the background.
//
// Invariant: every host buffer, whatever its size, is ONE range the device can copy by DMA
// (one copy's host range must lie inside one registration, measured on an H100), so a block of
// any size moves as one job. The CUDAHost backend keeps it on both of its providers: VMM host
// granules are mapped into one reserved range, so any buffer is one DMA range; the registration
// fallback (drivers without VMM host memory) registers each heap segment whole and joins the
// chunks of a huge buffer into exactly one registration when it is handed out
// (cudamem/hostregister.go). TestBlockSizes checks 4 KiB to 8 MiB on both.
//
// Memory is committed (pinned) as evictions need it, or ahead of need in the background
// (HostPrecommit), and never purged: pinning again costs about 0.5 ms per 2 MiB, where an
// eviction's copy of 2 MiB takes 40 µs. The capacity has room for the size classes' rounding
// and a partly used segment of each kind (small, medium, large and object pages do not share
// segments), of one shard: the tier calls its pool under its lock, one call at a time, so a
// shard per P would only spread its buffers over more segments (one of each kind per P that
// ever evicted: with two, the second P's evictions found the pool full).
func (t *Tier) openPool(shared *pinned.Pool, precommit uintptr) error {
	if shared != nil {
		t.mem.pool = shared
		return nil
	}
	capacity := poolCapacity(t.mem.hostCap)
	p, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: int(int64(capacity)),
		Align: hostAlign, Device: t.dev.Ordinal(), PurgeDelay: -1, Precommit: int(int64(precommit)), Shards: 1})
	if err != nil {
		return fmt.Errorf("uvm: host pool: %w", err)
	}
	t.mem.pool, t.mem.ownPool = p, true
	return nil
}

// openMover takes the Mover given, or makes the tier's own (newDefaultMover).
func (t *Tier) openMover(given Mover) error {
	if given != nil {
		t.engine.mover = given
		return nil
	}
	m, err := newDefaultMover(t.pub)
	if err != nil {
		return fmt.Errorf("uvm: copy engine: %w", err)
	}
	t.engine.mover, t.engine.ownMover = m, m
	return nil
}

// release gives back what open made; used by New on failure (lost: no tier outlives the call,
// to close again what fails to close) and by Close, and again by a later Close while something
// it made is kept (kept).
func (t *Tier) release(lost bool) error {
	var ferr error
	if t.mem.heap != nil {
		t.uninstallPressure()
		if !t.mem.ownHeap && t.engine.h2d != 0 && !t.hook.forgot {
			// A shared heap outlives the tier's stream: have it give back what it holds for
			// that stream and forget it before the stream is destroyed. One parked during a
			// capture is the heap's no more.
			ferr = t.mem.heap.ForgetStream(t.engine.h2d)
			t.hook.forgot = ferr == nil || errors.Is(ferr, pinmalloc.ErrCapturing)
		}
	}
	return t.closeOwn(lost, ferr)
}

// closeOwn closes what the tier made for itself (its mover, host pool and device heap), then
// destroys its streams and events. What fails to close is kept for a later Close, which calls
// this again; until then the streams and events stay too: what is kept has seen the streams
// and may wait for them when it is closed (a destroyed stream's handle could by then be a
// user's new stream). So they stay while a shared heap has not forgotten the tier's stream
// (ferr, its ForgetStream's refusal). When lost (New failing), nothing is tried again: they
// go all the same.
func (t *Tier) closeOwn(lost bool, ferr error) error {
	errs := []error{t.closeMover(), t.closePool(lost), t.closeHeap(lost)}
	if !lost && (t.keptOwn() || !t.hook.forgot && ferr != nil) {
		if ferr != nil {
			errs = append(errs, keptError("uvm: the device heap it was given did not forget its stream, "+
				"so the tier keeps its streams and events", ferr))
		}
		return errors.Join(errs...)
	}
	return errors.Join(append(errs, ferr, t.destroyStreams(lost))...)
}

// closeMover closes the tier's own mover (a given one is the caller's) and drops it. When its
// Close fails (the driver refusing to free a staging buffer, which the copyengine.Batcher keeps
// for its next Close), the tier keeps the mover, and a later Close calls this again, as
// closePool does for the host pool. New makes the mover last: a New that fails has none to
// close. Used by release.
func (t *Tier) closeMover() error {
	if t.engine.ownMover == nil {
		return nil
	}
	if err := t.engine.ownMover.Close(); err != nil {
		return fmt.Errorf("uvm: closing the tier's copy engine: %w; "+
			"it is kept with what it did not free: a later Close tries again", err)
	}
	t.engine.ownMover = nil
	return nil
}

// closePool closes the tier's own host pool (a shared one is its owner's) and drops it. When the
// pool's Close fails (a buffer's stream still busy past the pool's wait, a driver refusing to
// give memory back), the tier keeps the pool, whose memory is then still allocated, and a later
// Close calls this again: dropped, the pool could no longer be closed, and its memory stayed
// until the process ended. A pool that finished closing by itself meanwhile (the last of its
// deferred frees released it) answers ErrClosed, and is done with too. Used by release. When
// lost (New failing), no Close comes later: the error says so with ErrLeaked (lostError).
func (t *Tier) closePool(lost bool) error {
	if t.mem.pool == nil || !t.mem.ownPool {
		t.mem.pool = nil
		return nil
	}
	closeFn := (*pinned.Pool).Close
	if poolCloseFault != nil {
		closeFn = poolCloseFault
	}
	// The bare sentinel, not errors.Is: a refusal the pool wraps with ErrClosed leaves memory.
	if err := closeFn(t.mem.pool); err != nil && err != pinned.ErrClosed {
		if lost {
			return lostError("host pool", "pinned host memory", t.mem.pool.Usage().Committed, err)
		}
		return fmt.Errorf("uvm: closing the tier's host pool: %w; the pool and its memory are kept: a later Close tries again", err)
	}
	t.mem.pool = nil
	return nil
}

// closeHeap closes the tier's own device heap (a shared one is its owner's) and drops it. When
// the heap's Close fails (the driver refusing to give its memory back), the tier keeps the heap,
// whose memory is then still allocated, and a later Close calls this again, as closePool does
// for the host pool. A heap that answers ErrClosed has given its memory back. Used by release;
// lost as for closePool.
func (t *Tier) closeHeap(lost bool) error {
	if t.mem.heap == nil || !t.mem.ownHeap {
		return nil
	}
	// The bare sentinel, not errors.Is: a refusal the heap wraps with ErrClosed leaves memory.
	if err := t.mem.heap.Close(); err != nil && err != device.ErrClosed {
		if lost {
			return lostError("device heap", "VRAM", t.mem.heap.Stats().Arena.Committed, err)
		}
		return fmt.Errorf("uvm: closing the tier's device heap: %w; the heap and its memory are kept: a later Close tries again", err)
	}
	t.mem.heap = nil
	return nil
}

// lostError is the error of a New that failed and could not close the tier's own what (its
// host pool, its device heap), which keeps bytes of memory (of kind) allocated: New returns no
// tier to close it again, so it stays until the process ends.
func lostError(what, kind string, bytes uint64, err error) error {
	return fmt.Errorf("%w: New failed, and the tier's %s it made did not close: "+
		"it keeps %d bytes of %s until the process ends: %w", ErrLeaked, what, bytes, kind, err)
}

// poolCloseFault, set by tests only, closes the host pool in place of pinned.Pool.Close.
var poolCloseFault func(*pinned.Pool) error

// Close waits for the tier's transfers, frees every block and gives back the tier's memory,
// streams and events (and the device heap and mover it made). It fails with ErrAcquired, and
// changes nothing, while a block is acquired on the device or the host.
//
// When the driver refuses the waits that order the reuse of the blocks' memory after the work
// that may still use it (a context with a sticky error), Close frees the blocks and closes the
// tier all the same, but keeps that memory out of use, with the streams, events, device heap and
// host pool that hold it, and returns ErrHeldBack saying how much: a later Close tries again
// (a synchronize of the device), and gives everything back once one succeeds. Under a sticky
// error none does, and what Close kept stays until the process ends. So does Close keep spare
// VRAM the device heap refuses back (device.Options.ZeroOnFree while a blocking stream captures
// a CUDA graph, or after a fault: the blocks stay live in the heap), saying so with ErrHeldBack
// and the heap's refusal: a later Close, once the capture has ended, gives it back.
//
// When the tier's own host pool fails to close (a buffer's copy still queued on a stream that
// does not pass it within the pool's wait, or the driver refusing to give memory back), Close
// returns that error and keeps the pool, with its memory: a later Close tries again. So does it
// keep the tier's own device heap when the heap fails to close, and its own mover when the
// mover does (the driver refusing to free a staging buffer). So does it keep the tier's
// streams and events while such a part is kept, while the device heap it was given has not
// forgotten the tier's stream, and when the driver refuses to destroy them (a sticky error,
// said with ErrDeviceFault): a later Close destroys what is left, each once. Stats.Released
// says when a Close has given everything back; a Close after that returns ErrClosed.
func (t *Tier) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return faulted(t.closeTier())
}

// closeTier is Close's work, its error not yet made to match ErrDeviceFault. t.mu is held.
func (t *Tier) closeTier() error {
	var errs []error
	switch {
	case t.closed && !t.heldAtClose && t.kept(): // kept by an earlier Close
		return t.release(false)
	case t.closed && !t.heldAtClose:
		return ErrClosed
	case t.closed: // an earlier Close kept memory held back: try again
		errs = append(errs, t.settle())
	default:
		for i := range t.blocks {
			if b := &t.blocks[i]; b.live && (b.pins > 0 || b.hostPins > 0) {
				return fmt.Errorf("%w: Close with block %#x acquired", ErrAcquired, uint64(t.handle(BlockID(i))))
			}
		}
		errs = append(errs, t.drain())
		for i := range t.blocks {
			if b := &t.blocks[i]; b.live {
				if err := t.freeBlock(BlockID(i)); !errors.Is(err, ErrHeldBack) { // said once, below
					errs = append(errs, err)
				}
			}
		}
		errs = append(errs, t.settle())
		t.closed = true
		if t.wake != nil {
			close(t.wake)
			t.wake = nil
		}
	}
	if t.holding() {
		t.heldAtClose = true
		return t.heldBackError(errs)
	}
	t.heldAtClose = false
	errs = append(errs, t.release(false))
	return errkind.Once(errs...)
}

// settle waits for the tier's transfers and streams, tries again the memory held back, and
// gives the spare VRAM back to the heap. t.mu is held.
func (t *Tier) settle() error {
	errs := []error{t.drain(), t.dev.StreamSynchronize(uintptr(t.engine.h2d)), t.dev.StreamSynchronize(uintptr(t.engine.d2h))}
	_, ferr := t.flushSpares()
	errs = append(errs, ferr)
	if t.mem.ownHeap {
		errs = append(errs, t.mem.heap.Sync())
	}
	return errors.Join(errs...)
}

// roundChunk rounds n up to a 2 MiB chunk.
func roundChunk(n uintptr) uintptr { return (n + 2<<20 - 1) &^ (2<<20 - 1) }
