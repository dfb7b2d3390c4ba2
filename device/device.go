// Package device allocates GPU memory from a heap whose frees are ordered on CUDA streams, the
// way PyTorch's caching allocator and cudaFreeAsync order them: allocation and free cost
// nanoseconds and no driver call in the steady state, and a block freed on a stream is reused
// at once by later work on that stream, and by other streams only once the device has passed
// the free.
//
// # Use
//
//	dev, err := cuda.Open(0)
//	...
//	defer dev.Close()
//	s, err := dev.StreamCreate(cuda.StreamNonBlocking)
//	...
//	h, err := device.New(dev, device.Options{Capacity: 64 << 20})
//	...
//	defer h.Close()
//	p, err := h.Alloc(1<<20, s)  // a block for work on s
//	err = h.HtoDAsync(p, src, s) // a copy queued on s (src in Go memory is read before it returns)
//	err = h.FreeAsync(p, s)      // s may reuse p at once, other streams once s has passed the free
//	err = dev.StreamSynchronize(s)
//
// TestPackageUse runs this on the fake driver (package cuda/cudatest), where no GPU is needed.
//
// # Design
//
// A Heap keeps one heap.Heap per stream it has seen, all in one heap.Group over one arena of
// device memory (the VMM provider where the device has the VMM API, cuMemAlloc regions
// otherwise; see cudamem.NewDevice). Every stream heap keeps its empty segments
// (heap.RetainSegments), so memory freed on a stream never reaches another stream's heap
// behind the device's back. Then:
//
//   - Alloc(n, s) allocates from s's heap.
//   - FreeAsync(p, s) on the stream p was allocated on is an immediate heap free: work queued
//     on s later runs after the work that used p, so s may reuse p at once.
//   - FreeAsync(p, s) on another stream defers the heap free until s has passed the call: p
//     waits on s's list of deferred frees (no driver call) and then goes back to the stream it
//     was allocated on. Huge blocks (above heap.HugeThreshold, 1 MiB) go back to the arena
//     itself, where any stream can take them, so their frees are always deferred, on either
//     stream.
//   - Deferred frees wait in streamq.Lists, one list per freeing stream, polled on every Alloc (the
//     one call that needs their memory back) and in Stats: a stream's new frees are done at once
//     when the poll finds the stream idle (and the legacy stream too, for a blocking stream), else
//     they get one event, and no other until that one has completed; a later poll that finds it
//     complete does them. Sync and Trim wait for them (a synchronize of each stream with frees);
//     Close polls them.
//   - Free(p) is synchronous: the caller promises no work in flight uses p.
//   - Trim waits for deferred frees, synchronizes each stream whose heap holds memory, and gives
//     the held segments back to the arena (and decommits free chunks).
//   - The idle purge does what Trim does without a wait, off the allocating goroutines: a timer
//     looks at the stream heaps every purge delay (Options.PurgeDelay), and one that made no
//     allocation and no free since the previous look is trimmed once its stream has passed a point
//     placed after the look (internal/streamq); a busy one gives back, the same way, the segments
//     it has kept empty since the previous look; the arena decommits what it gets a purge delay
//     later. Alloc and FreeAsync arm nothing: the timer runs while the heap has streams, slower (up
//     to a second) while they are quiet. The heap of the legacy default stream is left to Trim: a
//     point there, which no query can replace, would tie every blocking stream to the others at
//     each look, and leave the stream busy to Close.
//
// Running out of memory, Alloc waits for every deferred free and gives back every stream's
// held segments, its own stream's included (synchronizing each stream first), before it
// retries once; then, if
// the heap has a pressure hook (Options.Pressure, SetPressure), it asks that hook to give
// memory back (a uvm.Tier evicts blocks) and retries while the hook says it freed some. The
// hook is never re-entered by its own call chain: an Alloc made inside it is served without
// it, or fails with ErrInPressureHook.
//
// # Stream order: when memory changes owner
//
// The rule: memory moves from one owner to another (a stream's heap, the arena, another
// stream's heap, the provider through a decommit) only after every stream that may use it has
// passed the point where it was freed (an event completed, or the stream synchronized), or it
// does not move. Every path that moves memory, and why it keeps the rule:
//
//   - FreeAsync(p, s) on p's own stream: p goes back to s's heap and only work queued on s later
//     can reuse it, which runs after the work that used p (during a capture on s, work captured
//     later, which the graph runs after it; FreeAsync says what that asks of the graph's launch
//     and of memory the graph uses). It stays in that heap: the stream heaps
//     keep their memory (heap.RetainSegments), never trim themselves (not even when the arena is
//     full: that would hand segments with copies still queued to the arena, where another stream
//     could take them), and give nothing to the arena's purge but through the idle purge below (a
//     decommit unmaps memory whatever work still uses it; PyTorch found that cuMemUnmap and
//     cuMemRelease do not wait for the device).
//   - FreeAsync on another stream, and every huge block (which goes back to the arena itself):
//     deferred on the freeing stream's list (internal/streamq's Lists), done once that stream
//     has passed a point placed after the free: an event recorded after the free that has
//     completed (Poll), a synchronize of the stream (Drain, ForgetStream), or a synchronize of
//     the context for a stream the driver refuses, destroyed without ForgetStream (Recover).
//     With ZeroOnFree, the memset queued on the freeing stream comes after the work queued on
//     the block's own stream (an event recorded there, waited for): the block may have been
//     freed there and reused at once, its old owner's work still queued, which the caller
//     cannot order the freeing stream after.
//   - Free: synchronous; the caller promises no work uses p. With ZeroOnFree its memset is
//     waited for before the block is free, and comes after the work queued on the stream p was
//     allocated on: p may have been freed there and reused at once, its old owner's work still
//     queued (the caller cannot promise for that work).
//   - reclaim (an Alloc out of memory, Trim): drains the deferred frees, then synchronizes each
//     stream whose heap holds memory, the caller's own included, before that heap gives its
//     empty segments to the arena; a stream that fails to synchronize keeps its memory. It
//     used to skip the caller's stream, whose same-stream frees may have copies queued. The
//     legacy stream is synchronized first (when a default stream's heap holds memory, a point
//     recorded there is waited for, which waits for every blocking stream's earlier work too): a
//     blocking stream's frees come after the legacy stream's earlier work, which the blocking
//     stream's own synchronize does not wait for. ForgetStream does the same. None of these
//     synchronizes the context, which the driver refuses while any stream captures a CUDA graph,
//     ending that capture.
//   - The idle purge: a stream heap quiet for a purge delay (the legacy stream's excepted) is asked
//     for on its stream's list of a second streamq.Lists, and trimmed when the list hands the
//     request back (an event recorded after the request has completed, a query found the stream
//     idle, or, for a stream the driver refuses, the context synchronized) if the heap made no
//     operation since the request: every free it took is then before a point its stream has passed.
//     A heap busy again is left alone, but for its empty segments: those it kept at the previous
//     look (stamped when they emptied) go once its stream has passed a point placed after it.
//     (TestFakeIdleFootprint holds the stream's work back and checks nothing moves;
//     TestFakeIdlePurgeEarlyMutant shows the fake faults when a purge does not wait.)
//   - Trim's arena purge (arena.Arena.Trim) runs after the reclaim: the arena decommits only chunks
//     it holds, which came to it by the paths above, and so does its purge timer.
//   - ForgetStream synchronizes the stream (the context, for a stream the user destroyed first,
//     which the driver refuses) and does its deferred frees before its heap closes (a heap with
//     live blocks, deferred ones included, refuses). When a capture keeps it from synchronizing
//     the context for a destroyed stream, it parks the stream's list and heap apart from the
//     handle, which the driver gives to the next stream created: nothing of them goes to that
//     stream, and they change owner only once a synchronize of the context made after the park
//     has succeeded (internal/streamq's Points.SyncedSince). Close refuses while a
//     stream the heap has seen has work in flight (the legacy stream too, when one is blocking
//     or a default stream), and then does the deferred frees, those on the legacy stream, and
//     the legacy stream's heap, after a point it records there and waits for (internal/streamq's
//     Settle): it comes after every blocking stream's earlier work, seen by the heap or not. A
//     stream destroyed without ForgetStream, which the driver refuses, is not found idle: Close
//     synchronizes the context first, which waits for the work that stream still had (its own
//     same-stream frees went to its heap at once, and no list of frees stands for them).
//   - A stream destroyed without ForgetStream while frees wait on it: the driver refuses its
//     handle, so no point can be placed in it; the poll that finds it refused synchronizes the
//     context once (which waits for the work the destroyed stream still had) before its frees
//     are done. When a capture puts that synchronize off, or a reclaim or the idle purge finds
//     the handle refused, the stream's heap is parked as ForgetStream parks it (it leaves the
//     handle, which the driver may give to a new stream) until a synchronize of the context
//     (TestFakeRefusedReusedHandleAlloc and its siblings); its lists wait for that synchronize
//     too, and ask the handle nothing meanwhile (internal/streamq's refused lists). A
//     handle destroyed and given to a new stream before the heap asks the driver about it
//     cannot be told from the new stream: call ForgetStream first.
//   - The pressure hook gives memory back through Free, after its own events (a uvm.Tier frees
//     VRAM only once its copies are done).
//
// The copies' host memory follows the same rule on the pool's side (docs/streams.md).
//
// # Streams
//
// Streams and device pointers cross the API as raw handles (cuda.Stream and cuda.DevicePtr are
// types of their own over uintptr), so a program using gorgonia.org/cu, cgo or another binding
// passes its own streams with one conversion, cuda.Stream(raw).
// 0 is the legacy default stream. A stream is checked by recording an event in it the first
// time the heap sees it; a handle the driver rejects is refused with an error wrapping ErrInvalidStream.
// An event the driver cannot make for that check is not the stream's fault: the call fails
// with ErrOutOfMemory where memory ran out, else pinmalloc.ErrRefused, having done nothing.
// Before destroying a stream the heap has seen, call ForgetStream.
//
// # Concurrency
//
// A Heap is safe for concurrent use: one mutex guards it (the copy helpers only take it to
// check the stream). Driver calls run with the device's primary context current.
package device

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/heap"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// Heap allocates device memory with stream-ordered frees: Alloc(size, s) gives a block for work
// on stream s, and FreeAsync(p, s) frees it in s's order, so the block is reused by s at once
// and by other streams only once the device has passed the free; Free frees at once when no
// work in flight uses the block. HtoD, DtoH and their Async forms copy, checking that a range
// stays within its block. Running out of memory, Alloc takes back what other streams hold and
// then calls the pressure hook (SetPressure). A Heap is safe for concurrent use; Close it
// before the cuda.Device. The package documentation says how the streams are kept apart.
type Heap struct {
	pub    *cuda.Device  // the device given to New (or opened: ownDev)
	dev    *icuda.Device // the binding inside pub
	ownDev bool
	a      *arena.Arena
	g      *heap.Group
	align  uintptr
	press  atomic.Pointer[PressureFunc] // nil: no hook
	hooks  inHook                       // goroutines running the hook (pressure.go)

	mu      sync.Mutex
	closed  bool
	refused bool                       // the driver refused memory or an event back at Close: a later Close tries again
	streams map[cuda.Stream]*heap.Heap // heaps, by allocation stream
	// passed holds, for a stream heap, the free mark (heap.Heap.FreeMark) its stream is known to
	// have passed: a purge request pushed at it handed back, or a synchronize of the stream by
	// reclaim (freesPassed); none for a heap whose stream has passed no such point yet.
	passed   map[*heap.Heap]uint64
	parked   []parkedStream                 // streams destroyed before their ForgetStream, waiting for a synchronize of the context (park.go)
	parkErr  error                          // errors of parked frees done, for the next Sync, Trim or Close (settleParked)
	lists    *streamq.Lists[cuda.DevicePtr] // the streams seen, and the deferred frees by freeing stream (deferred.go)
	done     []cuda.DevicePtr               // deferred frees handed back, to do (finishDone)
	deferred map[cuda.DevicePtr]bool        // blocks with a deferred free
	held     map[cuda.DevicePtr]heldBlock   // blocks held (hold.go), by start; nil until the first Hold
	holdID   uint64                         // the last hold's id (Hold.id)
	events   *icuda.EventPool
	st       Stats

	purge  purger // the idle purge of the stream heaps (purge.go), under mu
	guard         // ZeroOnFree and Quota (guard.go)
	checks uint32 // calls of checkInvariants (verify.go)
}

// New creates a heap of memory on dev, which must stay open until Close.
func New(dev *cuda.Device, o Options) (*Heap, error) {
	d, err := icuda.Of(dev)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if o.Align == 0 {
		o.Align = DefaultAlign
	}
	if o.Align < DefaultAlign || o.Align > maxAlign || o.Align&(o.Align-1) != 0 {
		return nil, fmt.Errorf("%w: alignment %d (want a power of two from %d to %d)",
			ErrInvalidOptions, o.Align, DefaultAlign, maxAlign)
	}
	if o.Capacity < 0 || o.Quota < 0 {
		return nil, fmt.Errorf("%w: capacity %d, quota %d (want 0 or more)", ErrInvalidOptions, o.Capacity, o.Quota)
	}
	if err := sameDevice(o.Provider, d.Ordinal()); err != nil {
		return nil, err
	}
	prov := o.Provider
	if prov == nil {
		var err error
		if prov, err = cudamem.NewDevice(dev); err != nil {
			return nil, err
		}
	}
	if o.Capacity == 0 && !defaultsCapacity(prov) {
		return nil, fmt.Errorf("%w: capacity 0 over provider %s, which has no default capacity",
			ErrInvalidOptions, prov.Name())
	}
	// The options are checked, but for those the heap checks: what the arena refuses now is the
	// provider's fault (its granule, say), said with the arena's sentinel alone.
	a, err := arena.New(arena.Options{Provider: prov, Capacity: uintptr(o.Capacity),
		Align: uintptr(o.Align), PurgeDelay: o.PurgeDelay, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	g, err := heap.NewGroup(a)
	if err == nil { // a heap made and closed at once checks the alignment against the arena now
		var probe *heap.Heap
		if probe, err = g.NewHeap(heap.Options{Align: uintptr(o.Align)}); err == nil {
			err = probe.Close()
		}
	}
	if err != nil {
		// The heap refuses the caller's alignment, or the caller's capacity (not one the
		// provider cut or gave) past heap.MaxCapacity; anything else is the provider's (a chunk
		// of its granule past 2 MiB, its default capacity).
		tooBig := o.Capacity != 0 && a.Capacity() > heap.MaxCapacity
		if errors.Is(err, heap.ErrInvalidAlign) || tooBig {
			err = fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
		if cerr := a.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("device: giving back the arena of the heap "+
				"New could not make: %w", cerr))
		}
		return nil, err
	}
	h := &Heap{
		pub: dev, dev: d, a: a, g: g, align: uintptr(o.Align),
		streams: map[cuda.Stream]*heap.Heap{}, passed: map[*heap.Heap]uint64{}, deferred: map[cuda.DevicePtr]bool{},
		events: icuda.NewEventPool(d),
		guard:  guard{zeroOnFree: o.ZeroOnFree, quota: uintptr(o.Quota)},
	}
	h.lists = newLists(streamq.NewPoints(d, h.events))
	h.lists.SetOthers(h.heapStreams)
	h.newPurger(o.PurgeDelay, prov)
	h.SetPressure(o.Pressure)
	return h, nil
}

// sameDevice returns an error wrapping ErrInvalidOptions when provider p names a CUDA device
// (a Device() *cuda.Device method, as cudamem's providers have) other than the heap's, ordinal;
// nil for a nil provider, one that names no device, or one of the heap's.
func sameDevice(p arena.Provider, ordinal int) error {
	d, ok := p.(interface{ Device() *cuda.Device })
	if !ok {
		return nil
	}
	if n := d.Device().Ordinal(); n >= 0 && n != ordinal {
		return fmt.Errorf("%w: Options.Provider %s allocates on CUDA device %d, not on the heap's device %d",
			ErrInvalidOptions, p.Name(), n, ordinal)
	}
	return nil
}

// Open opens device ordinal (cuda.Open: the error wraps cuda.ErrNoDriver without a driver) and
// creates a heap on it that closes the device with the heap.
func Open(ordinal int, o Options) (*Heap, error) {
	dev, err := cuda.Open(ordinal)
	if err != nil {
		return nil, err
	}
	h, err := New(dev, o)
	if err != nil {
		_ = dev.Close()
		return nil, err
	}
	h.ownDev = true
	return h, nil
}

// Device returns the heap's device.
func (h *Heap) Device() *cuda.Device { return h.pub }

// Arena returns the heap's arena.
func (h *Heap) Arena() *arena.Arena { return h.a }

// Align returns the alignment of every block.
func (h *Heap) Align() int { return int(h.align) }

// Free gives back the block at p at once. The caller guarantees that no work in flight on any
// stream uses it (after a synchronize, say). Errors: heap.ErrNotOwned for a pointer of another
// heap, heap.ErrDoubleFree, heap.ErrInteriorPointer; with Options.ZeroOnFree, whose memset runs
// on the legacy stream, one matching cuda.ErrCapturing while a blocking stream captures a CUDA
// graph, or while the stream p was allocated on does and HtoD would be refused (the block
// still live), and the driver's when it refuses the memset or the wait for it
// fails (the block still live, to free again: never handed out uncleared). That memset comes
// after the work queued on the stream p was allocated on, as HtoD does. A held block (Hold)
// is freed at its last Release: Free returns at once, with no error.
func (h *Heap) Free(p cuda.DevicePtr) error {
	if err := h.lock(); err != nil {
		return err
	}
	defer h.unlock("Free")
	owner, err := h.owner(p)
	if err != nil {
		return err
	}
	if len(h.held) != 0 { // a heap never held pays this branch
		if u, ok := h.held[p]; ok {
			return h.deferHeld(p, u, nil)
		}
	}
	if err := h.scrub(p, nil, freeLater); err != nil {
		return err
	}
	return h.free(owner, p)
}

// FreeAsync gives back the block at p in the order of stream s, as cudaFreeAsync does: work queued
// on s before the call may still use p. The block is reusable at once by allocations on s when p
// was allocated on s, and otherwise once s has passed the call: an Alloc or Stats does the frees it
// finds waiting on an idle s, or records an event on a busy s for them, and a later one that finds
// it complete does them. FreeAsync itself makes no driver call for such a free. As with
// cudaFreeAsync, work on other streams that uses p must be ordered before the call (s waits on an
// event of theirs): the heap waits for s alone, and a huge block (above heap.HugeThreshold) goes
// back to the arena, for any stream, once s has passed the free. The heap orders one thing
// itself, with Options.ZeroOnFree: the memset that clears a block of another stream's heap,
// queued on s, comes after the work queued so far on the stream the block was allocated on (an
// event recorded there, waited for on s, as for a synchronous Free's memset and HtoD): the block
// may have been freed there and reused at once, its old owner's work still queued, which the
// caller knows nothing of. A FreeAsync on the block's own stream, or without ZeroOnFree, asks
// nothing of the driver for it.
//
// While s captures a CUDA graph (cuStreamBeginCapture), the heap's polls and Trim ask nothing
// of s and record nothing there, so the capture stays valid, and its deferred frees (another
// stream's blocks, huge ones) wait for the capture to end: such a block is reused once s has
// passed the free after the capture, whether the graph has been launched or not. A block of s's
// own freed on s is free at once, capture or not (no driver call asks whether s captures), and
// the next Alloc on s may hand it to later work of the same capture. That is safe in the graph:
// the nodes captured from s keep s's order, so each launch runs the block's earlier use before
// its later one, and launches of one executable graph run one after another. Memory a graph uses
// must outlive the graph: every block its nodes use must be live when the capture ends and stay
// live until the graph is destroyed (a block freed and allocated again during the capture is,
// by its new allocation); one freed during the capture and not allocated again goes to work
// after it that the graph's launches would race. A graph captured on s runs in s's order only
// launched on s: launched on another stream, order that stream after s's work queued before the
// capture, as for any block of s's used on another stream (an Alloc during the capture may
// return a block freed on s before it, whose users queued then may still run). A capture whose
// dependencies the user sets (cuStreamUpdateCaptureDependencies) no longer keeps s's order: free
// nothing on s during it. With Options.ZeroOnFree, whose
// memset would be a node of the user's graph, a FreeAsync on a stream a capture holds (or on the
// legacy stream while a blocking stream captures) is refused with an error matching
// cuda.ErrCapturing, the block still live: free it once the capture has ended; so is one of a
// block whose own stream captures, on another stream, where HtoD into it would be refused (its
// memset must come after that stream's work). A memset the
// driver refuses leaves the block live too, with its error: free it again.
//
// The heap's ask whether s captures (cuStreamIsCapturing) and the query or record it allows
// are separate driver calls, made by any Alloc or Stats and by the purge timer, on their own
// goroutines. A capture begun with the module's own binding waits for them; one begun with
// another binding (cuda has no capture call) on another thread in the instant between the two
// is invalidated by a query (its end fails), while a point recorded then is found and not
// trusted: the frees still wait. One that also ends within the record, before the heap asks
// again, is not seen: the point stands for nothing, and a block freed on s may be reused while
// work queued before the free still runs. To rule both out, begin a capture while no call of
// the heap runs on another goroutine and the purge timer is off (a negative
// Options.PurgeDelay).
//
// Errors, on any stream: those of Free (heap.ErrDoubleFree for a block freed already or with a
// free pending), checked before anything is queued or deferred. A held block (Hold) is freed
// in s's order at its last Release: FreeAsync returns at once, with no error, and the free is
// made then as a FreeAsync on s made at that moment would be (the rules above).
func (h *Heap) FreeAsync(p cuda.DevicePtr, s cuda.Stream) error {
	if err := h.lock(); err != nil {
		return err
	}
	defer h.unlock("FreeAsync")
	l, err := h.checkStream(s)
	if err != nil {
		return err
	}
	owner, err := h.owner(p)
	if err != nil {
		return err
	}
	// A live block, on every path: Owner finds a freed block's start too, and a free deferred
	// unchecked would free the block's next owner once the stream passed it.
	size, err := h.g.Size(uintptr(p))
	if err != nil {
		return err
	}
	if len(h.held) != 0 { // a heap never held pays this branch
		if u, ok := h.held[p]; ok {
			return h.deferHeld(p, u, &s)
		}
	}
	// (The body, not a call: the pair's hot path. A held block's Release frees the same way.)
	if err := h.scrub(p, &s, freeLater); err != nil {
		return err
	}
	if h.reusableOn(owner, s, size) {
		return h.free(owner, p)
	}
	h.deferOn(l, p)
	return nil
}

// reusableOn reports whether a block of owner, of size bytes, freed in the order of stream s
// is free at once, for s's next allocations (FreeAsync's same-stream rule). h.mu is held.
func (h *Heap) reusableOn(owner *heap.Heap, s cuda.Stream, size uintptr) bool {
	return owner == h.streams[s] && size <= heap.HugeThreshold
}

// deferOn defers the free of block p to the point its stream, whose list is l, passes next
// (FreeAsync's free on another stream). h.mu is held.
func (h *Heap) deferOn(l *deferredList, p cuda.DevicePtr) {
	h.lists.Push(l, p)
	h.deferred[p] = true
	h.st.DeferredFrees++
}

// lock takes h.mu, or fails with ErrClosed (and leaves it unlocked) after Close.
func (h *Heap) lock() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// ready checks the heap is open and s is a stream the driver accepts, and does the deferred
// frees that have completed. h.mu is held.
func (h *Heap) ready(s cuda.Stream) error {
	if h.closed {
		return ErrClosed
	}
	if _, err := h.checkStream(s); err != nil {
		return err
	}
	return h.poll()
}

// checkStream returns the list of stream s (streamq's Lists.Check: a stream seen before, or one
// the driver accepts as a stream of the heap's device; the per-thread default stream is
// refused, since neither a same-stream reuse nor a point a later poll records on it would
// order anything). An event the driver could not make to ask s with is its refusal
// (pinmalloc.ErrRefused; ErrOutOfMemory when memory ran out), not an invalid stream. h.mu is
// held.
func (h *Heap) checkStream(s cuda.Stream) (*deferredList, error) {
	l, err := h.lists.Check(uintptr(s))
	if errors.Is(err, cuda.ErrDeviceFault) { // the driver refuses every stream, not this one
		return nil, fmt.Errorf("%w: %w", ErrDeviceFault, err)
	}
	if errors.Is(err, streamq.ErrNoEvent) { // not asked: ErrOutOfMemory, or pinmalloc.ErrRefused
		return nil, fmt.Errorf("device: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidStream, err)
	}
	return l, nil
}

// heapFor returns s's heap, making it on first use.
func (h *Heap) heapFor(s cuda.Stream) (*heap.Heap, error) {
	if sh := h.streams[s]; sh != nil {
		return sh, nil
	}
	sh, err := h.g.NewHeap(heap.Options{Align: h.align, Retention: heap.RetainSegments})
	if err != nil {
		return nil, err
	}
	h.streams[s] = sh
	h.watch(s, sh)
	return sh, nil
}

// owner returns the stream heap of the live block at p.
func (h *Heap) owner(p cuda.DevicePtr) (*heap.Heap, error) {
	sh, err := h.g.Owner(uintptr(p))
	if err != nil {
		return nil, err
	}
	if h.deferred[p] {
		return nil, fmt.Errorf("%w: %#x has a free pending already", heap.ErrDoubleFree, p)
	}
	return sh, nil
}

// free gives p back to its heap, as its owner (h.mu makes every stream heap ours).
func (h *Heap) free(owner *heap.Heap, p cuda.DevicePtr) error {
	size := h.liveSize(p)
	if err := owner.Free(uintptr(p)); err != nil {
		return err
	}
	h.st.Frees++
	h.used -= size
	return nil
}

// reclaim does every deferred free, then synchronizes each stream whose heap holds memory,
// the caller's own included, and gives that memory back to the arena. The synchronize comes
// first: a block freed on its own stream is free in the heap at once, with the stream's work
// that used it possibly still queued, and the arena hands what it gets to any stream. A stream
// that fails to synchronize keeps its memory.
//
// The legacy default stream orders work implicitly (stream-sync-behavior): a blocking stream's
// work, a same-stream free included, comes after the legacy stream's earlier work, and the
// legacy stream's after every blocking stream's; a stream's own synchronize covers neither. So
// before any heap gives memory back, streamq's Points.WaitLegacyOrder synchronizes the legacy
// stream once, or, when a default stream's heap holds memory, waits for a point it records
// there. When that fails, no blocking or default stream's heap gives anything back; where it
// fails because a blocking stream captures a graph (the driver refuses the legacy stream then),
// the non-blocking streams' heaps still do: their work comes after nothing but their own.
func (h *Heap) reclaim() error {
	// The parked entries are settled twice, before and after the drain; the second says what
	// keeps one (it tries again an entry the first kept): the first says only its synchronize's
	// error, errs[0].
	errs := []error{h.settleParked(true, noneMine)}
	if betweenSettles != nil {
		betweenSettles()
	}
	errs = append(errs, h.drain())
	pts := h.lists.Points()
	ordered := true  // the legacy stream's order waited for: every heap may give back
	refused := false // a stream heap's stream was refused: parked
	if held, dflt := h.heldBy(); held {
		if err := pts.WaitLegacyOrder(dflt); err != nil {
			errs = append(errs, fmt.Errorf("device: %w", err))
			if !errors.Is(err, cuda.ErrCapturing) {
				return errors.Join(errs...)
			}
			ordered = false
		}
	}
	for s, sh := range h.streams {
		if sh.Stats().Segments == 0 {
			continue
		}
		if !ordered {
			if nb, err := pts.NonBlocking(uintptr(s)); err != nil || !nb {
				continue // ordered after the legacy stream's earlier work, which cannot be waited for
			}
		}
		captured, err := pts.SyncUncaptured(uintptr(s))
		if captured {
			continue // its work runs when the user launches the graph: its memory stays
		}
		if err != nil {
			if errors.Is(err, cuda.ErrInvalidHandle) {
				// Destroyed without ForgetStream: its heap leaves the handle, which the driver
				// may give to a new stream, and waits for a synchronize of the context (below).
				h.parkHeap(s)
				refused = true
				continue
			}
			errs = append(errs, fmt.Errorf("device: synchronize stream %#x: %w", s, err))
			continue
		}
		h.passed[sh] = sh.FreeMark() // (freesPassed)
		sh.Trim()
	}
	// Parked heaps whose last blocks the drain freed, and those of streams parked above, whose
	// work only a synchronize of the context waits for; the first synchronize's error is moot
	// once no parked entry waits for a synchronize (the drain's may have passed them all): one
	// parked for a reason of its own says it.
	errs = append(errs, h.settleParked(refused, nil))
	if !h.parkedSyncWaits(nil) {
		errs[0] = nil
	}
	return errkind.Once(errs...)
}

// heldBy reports whether a stream heap holds memory, and whether a default stream's does.
func (h *Heap) heldBy() (held, dflt bool) {
	for s, sh := range h.streams {
		if sh.Stats().Segments > 0 {
			held, dflt = true, dflt || streamq.DefaultStream(streamq.Stream(s))
		}
	}
	return held, dflt
}
