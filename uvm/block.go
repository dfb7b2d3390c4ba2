package uvm

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// Blocks: the tier's table of block slots, the handles that name them, Alloc and Free. A handle is
// a slot and the slot's generation, so a handle used after Free is refused, never taken for the
// block that reuses the slot. Each tier numbers its slots' generations from a base of its own
// (genBase), far from every other tier's, so that a handle of another tier is refused too, not
// taken for the block in the same slot here: with every tier counting from 1, the first block of
// one tier had the handle of the first block of any other. The states of a block and their
// invariants are on the block type.

// Handle names a block of a Tier. The zero Handle is never valid.
type Handle uint64

// hostAlign is the alignment of host buffers and device blocks: what coalesced copies and the
// copy kernel's 16-byte vectors want.
const hostAlign = 256

// tiers counts the tiers made, for their generation bases.
var tiers atomic.Uint32

// genBase returns the first generation of the slots of a new tier: the number of tiers made so
// far times 2^32 over the golden ratio (odd, so that 2^32 tiers get distinct bases). The bases
// of the first n tiers lie more than 2^32/(2.62n) apart (the three-distance theorem: over 1.6
// million for the first thousand tiers), so a slot of one tier reaches the generation of the
// same slot of another only after that many frees of it, and a handle of another tier is
// refused. Never 0, so that a handle's high half is never 0 either.
func genBase() uint32 {
	if g := tiers.Add(1) * 0x9E3779B1; g != 0 {
		return g
	}
	return 1
}

// roundUp rounds a block size to hostAlign.
func roundUp(n uintptr) uintptr { return (n + hostAlign - 1) &^ (hostAlign - 1) }

// block is one slot of the tier's table. See the package documentation for its states:
//
//	fresh:  fresh, dev == 0, host == nil
//	host:   dev == 0, host != nil, hostValid
//	clean:  dev != 0, host != nil, hostValid
//	dirty:  dev != 0, and host == nil or !hostValid
//
// Invariants (t.mu held): a live block is in exactly one state; pins > 0 implies dev != 0;
// the policy holds a block iff it is live, dev != 0 and pins == 0; hostWrite implies
// hostPins > 0 and dev == 0 while it lasts.
type block struct {
	gen       uint32 // generation of the slot; handles carry it
	live      bool
	fresh     bool
	hostValid bool // the host buffer holds the block's bytes
	hostWrite bool // acquired on the host for writing
	hostLent  bool // host went to Go (AcquireHost): the user's copies may still use it (host.go)
	chosen    bool // picked for the eviction or restore being built (scratch)
	hostRead  bool // a failed restore's copies, which nothing orders, may read host (undoRestore)
	size      uintptr
	n         int // bytes asked by Alloc
	dev       cuda.DevicePtr
	host      []byte         // len size
	hostDev   cuda.DevicePtr // device address of host
	pins      int32          // device acquisitions, all streams together
	hostPins  int32
	uses      []use       // device acquisitions by stream
	rel       []relEvent  // last release event per stream since the last migration
	waitS     cuda.Stream // the stream last made to wait for rel (waitReleases)
	waitSeq   uint64      // t.rel.seq then: rel entries up to it are waited for on waitS
	readySeq  uint64      // restore batch that last wrote dev, or read host (H2D; undoRestore)
	readyEv   cuda.Event  // its event, valid while the batch is pending
	evictSeq  uint64      // eviction batch that last wrote host (D2H)
	evictEv   cuda.Event
	thrash    thrashState
}

// use counts a block's acquisitions on one stream. refused says that the driver refused s's
// handle (destroyed) while the use went on: a Release or Free tried to end a use there and a
// capture held off the device's synchronize (unordered), or an Acquire's or Prefetch's wait
// there was refused (refusedStream): the uses left end by a synchronize of the device, whatever
// stream has the handle s now.
type use struct {
	s       cuda.Stream
	n       int32
	refused bool
}

func (b *block) clean() bool { return b.host != nil && b.hostValid }

// handle returns the handle of slot id.
func (t *Tier) handle(id BlockID) Handle {
	return Handle(uint64(t.blocks[id].gen)<<32 | uint64(id) + 1)
}

// lookup returns the slot of a live handle; ErrClosed once the tier is closed. The error of a
// handle that is not live says whether the tier gave it out and freed it since, or never gave
// it out (another tier's, say): a slot's generations run from genBase to its generation now,
// the last of which, when the slot is not live, no handle has had yet. t.mu is held.
func (t *Tier) lookup(h Handle) (BlockID, *block, error) {
	if t.closed {
		return 0, nil, ErrClosed
	}
	low := uint32(h)
	if low == 0 || int(low) > len(t.blocks) {
		return 0, nil, fmt.Errorf("%w: %#x (not a block of this tier)", ErrInvalidHandle, uint64(h))
	}
	id := BlockID(low - 1)
	b := &t.blocks[id]
	if gen := uint32(h >> 32); !b.live || b.gen != gen {
		if gen-t.genBase < b.gen-t.genBase { // wraps as the generations do
			return 0, nil, fmt.Errorf("%w: %#x (freed)", ErrInvalidHandle, uint64(h))
		}
		return 0, nil, fmt.Errorf("%w: %#x (not a block of this tier)", ErrInvalidHandle, uint64(h))
	}
	return id, b, nil
}

// Alloc creates a block of n bytes. It has no storage until it is first acquired (on the
// device or the host), and its contents are undefined until written. It fails with ErrTooLarge
// above the device budget, with ErrHostFull when the live blocks would exceed what device
// budget and host capacity can hold together, and with ErrInvalidOptions (and
// pinmalloc.ErrInvalidSize) for n of zero or less.
func (t *Tier) Alloc(n int) (Handle, error) {
	if n <= 0 {
		return 0, invalidSize(fmt.Errorf("%w: block of %d bytes", ErrInvalidOptions, n))
	}
	size := roundUp(uintptr(n))
	t.mu.Lock()
	defer t.unlock("Alloc")
	if t.closed {
		return 0, ErrClosed
	}
	if size > t.mem.budget {
		return 0, fmt.Errorf("%w: %d bytes, budget %d", ErrTooLarge, n, t.mem.budget)
	}
	if t.acct.live+size > t.mem.budget+t.mem.hostCap {
		return 0, fmt.Errorf("%w: %d bytes more than the %d live fit in device budget %d and host capacity %d",
			ErrHostFull, size, t.acct.live, t.mem.budget, t.mem.hostCap)
	}
	var id BlockID
	if k := len(t.free); k > 0 {
		id = BlockID(t.free[k-1])
		t.free = t.free[:k-1]
	} else {
		if len(t.blocks) == 1<<32-1 {
			return 0, fmt.Errorf("%w: too many blocks", ErrHostFull)
		}
		t.blocks = append(t.blocks, block{gen: t.genBase})
		id = BlockID(len(t.blocks) - 1)
	}
	b := &t.blocks[id]
	b.live, b.fresh, b.size, b.n = true, true, size, n
	t.acct.live += size
	t.acct.fresh += size
	t.st.Allocs++
	return t.handle(id), nil
}

// Free frees a block from any state. Work already queued on the streams it was acquired on
// may still use its device memory: that memory is reused only after the tier's D2H stream has
// waited for it (an acquired block counts as released on each of its streams now). A []byte
// from AcquireHost must not be used after Free. When the driver refuses both that wait and a
// wait on the CPU (a context with a sticky error), the block is freed all the same and Free
// returns ErrHeldBack: its memory stays out of use until a synchronize of the device succeeds.
// The Free of a block acquired on a stream that is capturing a CUDA graph is refused with an
// error matching cuda.ErrCapturing, and frees nothing: free it once the capture has ended. So is
// the Free of a block acquired on a stream the driver refuses (destroyed without ForgetStream)
// while a capture holds a stream the tier knows: the synchronize of the device that would wait
// for the work queued there would end that capture (see Release).
func (t *Tier) Free(h Handle) error { return faulted(t.freeHandle(h)) }

// freeHandle is Free, its error not yet made to match ErrDeviceFault.
func (t *Tier) freeHandle(h Handle) error {
	t.mu.Lock()
	defer t.unlock("Free")
	id, b, err := t.lookup(h)
	if err != nil {
		return err
	}
	for _, u := range b.uses { // its release events would be recorded in the user's graph
		if err := t.notCapturing(u.s, "Free", h); err != nil {
			return fmt.Errorf("%w; nothing was freed: free it once the capture ends", err)
		}
	}
	errs, ok := t.endUses(id, b)
	if !ok {
		return fmt.Errorf("uvm: Free of block %#x refused: %w; nothing was freed: free it once the capture ends", uint64(h), errors.Join(errs...))
	}
	return errors.Join(append(errs, t.freeBlock(id))...)
}

// endUses records block id's release event on each stream it is acquired on, ending its uses
// there, or waits for a stream the event cannot be recorded on (unordered), and returns the
// errors that says so. When a capture holds a stream (the record refused, with an error
// matching pinmalloc.ErrCapturing) or a wait would end a CUDA graph capture, ok is false: the block stays
// acquired, its error (matching pinmalloc.ErrCapturing) among errs; the events recorded on the
// other streams stand for no end of a use, which the next Release or Free records again. t.mu
// is held.
func (t *Tier) endUses(id BlockID, b *block) (errs []error, ok bool) {
	ok = true
	for i := range b.uses {
		u := &b.uses[i]
		err := errRefusedBefore
		if !u.refused {
			err = t.recordRelease(b, u.s)
		}
		if err == nil {
			continue
		}
		if errors.Is(err, pinmalloc.ErrCapturing) {
			// A capture began on u.s since Free's check (by code that does not wait for the
			// capture gate): the use goes on, as a Release's does; a wait for the stream
			// instead would end that capture.
			ok = false
			errs = append(errs, err) // it names the stream; the caller, the block
			continue
		}
		ended, err := t.unordered(t.handle(id), u, err) // streams.go
		ok = ok && ended
		errs = append(errs, err)
	}
	return errs, ok
}

// freeBlock frees slot id, whose uses have ended (endUses). t.mu is held.
func (t *Tier) freeBlock(id BlockID) error {
	b := &t.blocks[id]
	var errs []error
	if b.pins > 0 {
		t.acct.pinned -= b.size
		t.acct.pinnedBlocks--
	}
	b.pins, b.hostPins, b.hostWrite, b.uses = 0, 0, false, b.uses[:0]
	var devFree cuda.DevicePtr
	switch {
	case b.dev != 0:
		devFree = b.dev
		t.acct.device -= b.size
	case b.fresh:
		t.acct.fresh -= b.size
	default:
		t.acct.hostOnly -= b.size
	}
	hostFree := b.host
	if hostFree != nil {
		t.acct.hostHeld -= b.size
	}
	if hostFree != nil && b.hostRead { // nothing orders its reuse after the copies (undoRestore)
		t.unreadHost(b)
		t.holdBack(completion{host: [][]byte{hostFree}})
		hostFree = nil
		errs = append(errs, fmt.Errorf("%w: block %#x is freed, but its %s host buffer, "+
			"which the copies of a failed restore may still read, stays out of use until a "+
			"synchronize of the device succeeds",
			ErrHeldBack, uint64(t.handle(id)), units.Bytes(uint64(b.size))))
	}
	inFlight := (b.readySeq != 0 && t.pending(dirH2D, b.readySeq)) || (b.evictSeq != 0 && t.pending(dirD2H, b.evictSeq))
	if devFree != 0 || (hostFree != nil && inFlight) {
		// Behind the uses and the copies of the block, on the D2H stream.
		c := completion{dir: dirD2H}
		if devFree != 0 {
			// Counted, so that it becomes a spare run whose list the next restore that
			// takes the block gives back for the next Free (putSpares, popRun).
			c.dev, c.devBytes = append(t.oneDevList(), devBlock{devFree, b.size}), b.size
		}
		if hostFree != nil {
			c.host = [][]byte{hostFree}
		}
		t.rel.waits = t.rel.waits[:0]
		t.addWaits(b)
		gone, err := t.retire(c)
		if !gone { // the block goes all the same; its memory stays out of use (heldback.go)
			t.holdBack(c)
			err = fmt.Errorf("%w: block %#x is freed, but its %s of VRAM and %s host buffer stay out of use until a synchronize of the device succeeds: %w",
				ErrHeldBack, uint64(t.handle(id)), units.Bytes(uint64(len(c.dev))*uint64(b.size)), units.Bytes(uint64(len(c.host))*uint64(b.size)), err)
		}
		if err != nil { // errors.Join drops a nil one, but a list of one allocates
			errs = append(errs, err)
		}
	} else if hostFree != nil {
		errs = append(errs, t.mem.pool.Free(hostFree))
	}
	t.putReleases(b)
	t.policy.Freed(id)
	t.acct.live -= b.size
	*b = block{gen: b.gen + 1, uses: b.uses[:0], rel: b.rel[:0]}
	t.free = append(t.free, uint32(id))
	t.st.Frees++
	t.signal()
	return errors.Join(errs...)
}
