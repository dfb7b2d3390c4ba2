package pinned

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// Holds: a buffer used by work outside the pool that ends after the call that starts it (a
// network transfer of package remote reads or writes it until its completion).
//
// A hold keeps the buffer's block held in the heap (heap.Group.Hold), the mechanism a stream's
// use goes through: every free of the block is refused by the heap, so the pool's free paths
// look up the buffer in the holds table and defer the free to the last Release, which gives the
// buffer back the way the deferred Free or FreeAsync would have. The table is looked at only
// while some buffer is held (outside.active), so a pool never held costs its frees one atomic
// load.
//
//   - In a pool without stream order (Locked, Pageable, ...), the hold bit is the table's own:
//     the first Hold sets it; the last Release clears it (heap.Group.Unhold) under the table's
//     lock, so a free racing the Release either finds the entry (and is deferred) or finds the
//     block live (and frees it), or, when a free waited for the holds, gives the block back
//     with the bit set (see below). A shared buffer's bit (Pool.Share) is the Share's: a Hold
//     leaves it, and a Share of a held buffer takes it over from the table.
//   - In a pool with stream order (CUDAHost), a buffer recorded on a stream is held already,
//     and stays so after the last Release (the streams' protocol takes it back at its free); one
//     recorded on none is held waiting for no stream (tagHeld: its free, when no hold is left,
//     frees it at once), so that a later RecordStream on it records as usual.
//
// The last Release makes the free that waited for the holds with the buffer's entry kept in the
// table (releasing) and the buffer still held, and drops the entry after: a free or Hold racing
// that free waits for the Release, and then finds the buffer freed (a double free: ErrDoubleFree)
// or another owner's since, never a buffer the Release is about to free. A Close that counts
// the live buffers meanwhile waits for the Release's free too (outside.counting): the buffer
// counts as freed until the Release has given it back (or deferred it behind its streams), and
// the Release finishes the close of a closed pool after that, as any free does, while Close
// waits, if it must, for the buffer's streams as for any deferred buffer.
//
// A shared buffer's free asks the Sharer first, held or not: each free drops its reference at
// once, and only the give-back after the last one (by a free, or FreeShared) waits for the
// holds, marked dropped so that the last Release asks the Sharer nothing.
//
// A Hold and a free of the same buffer must be ordered by their caller, as any use and its
// free are; if they race, the free is either deferred or wins (the Hold is then refused).

// Hold keeps buffer b, or the live buffer b is part of, in use by work outside the pool until
// Release: a Free or FreeAsync of the buffer meanwhile returns at once and takes effect at the
// last Release of its holds, so that memory a transfer still reads or writes is never handed
// out again. A buffer may be held many times. Holding costs a lookup and a lock; package remote
// holds the buffers of its transfers. Errors: an empty slice or memory not of a live buffer of
// the pool (ErrNotOwned, ErrDoubleFree), a buffer whose free is pending (ErrDoubleFree), a
// released pool (ErrClosed).
func (p *Pool) Hold(b []byte) (Hold, error) {
	base, size, err := p.liveBuffer(b)
	if err != nil {
		return Hold{}, err
	}
	sh := p.out.shard(base)
	if !sh.lockEntry(base) {
		return p.Hold(b)
	}
	defer sh.mu.Unlock()
	if u := sh.m[base]; u != nil {
		if u.freed != 0 {
			return Hold{}, fmt.Errorf("%w: buffer %#x was freed; its free waits for its holds", ErrDoubleFree, base)
		}
		return Hold{p: p, base: base, id: sh.addHold(u)}, nil
	}
	p.out.active.Add(1) // before the hold bit: a free that finds the bit finds the table in use
	own, err := p.holdBlock(base, size)
	if err != nil {
		p.out.active.Add(-1)
		return Hold{}, err
	}
	if sh.m == nil {
		sh.m = map[uintptr]*outUse{}
	}
	u := sh.entry()
	u.size, u.own = size, own
	sh.m[base] = u
	return Hold{p: p, base: base, id: sh.addHold(u)}, nil
}

// Live checks that b lies inside one live buffer of the pool that the caller has not freed, as
// Hold does, and holds nothing: a lookup with no allocation, and a lock only for a held buffer
// while some buffer is held, for memory another party names (package remote checks the target
// of a peer's put or get with it). Its answer is the moment's: a free of the buffer racing the
// call, or following it, is the caller's business, as for any use of a buffer. Errors: Hold's.
func (p *Pool) Live(b []byte) error {
	_, err := p.unfreed(b)
	return err
}

// liveBuffer returns the start and size of the live buffer b lies in (Hold, unfreed).
func (p *Pool) liveBuffer(b []byte) (base, size uintptr, err error) {
	if len(b) == 0 {
		return 0, 0, errEmptySlice
	}
	if p.released.Load() {
		return 0, 0, ErrClosed
	}
	addr, n := mem.Addr(b), uintptr(len(b))
	if base, size, err = p.g.Block(addr); err != nil {
		return 0, 0, wrapError(err, ErrNotOwned)
	}
	if off := addr - base; n > size-off {
		return 0, 0, fmt.Errorf("%w: %d bytes at %#x run past the end of buffer %#x of %d bytes", ErrNotOwned, n, addr, base, size)
	}
	return base, size, nil
}

// holdBlock holds the live block at base of size bytes for the table, and reports whether the
// hold bit is the table's (see above). The caller holds the block's table shard.
func (p *Pool) holdBlock(base, size uintptr) (own bool, err error) {
	if p.order != nil {
		return false, p.order.holdUnrecorded(base, size)
	}
	first, err := p.g.HoldSized(base, size)
	if err != nil {
		return false, wrapError(err, ErrNotOwned)
	}
	if first {
		return true, nil
	}
	if tag := p.g.Tag(base); tag != nil && settled(tag) == tagHeld {
		return false, nil // shared (Pool.Share): the hold bit is the Share's
	}
	// A ZeroOnFree free's claim: the buffer is being freed.
	return false, fmt.Errorf("%w: buffer %#x is being freed", ErrDoubleFree, base)
}

// holdUnrecorded holds the live block at base, of size bytes, as a buffer waiting for no stream
// (tagHeld), unless a stream's record holds it already.
func (o *streamOrder) holdUnrecorded(base, size uintptr) error {
	r, ok := o.g.FindFrom(base, size)
	if !ok {
		return fmt.Errorf("%w: %#x was freed during the hold", ErrDoubleFree, base)
	}
	tag := r.Tag()
	for {
		switch t := settled(tag); t {
		case tagNone:
			if !tag.CompareAndSwap(tagNone, tagLocked) {
				continue
			}
			if first, ok := r.Hold(); !ok || !first { // freed since, or its free is pending
				tag.Store(tagNone)
				return fmt.Errorf("%w: buffer %#x was freed", ErrDoubleFree, base)
			}
			tag.Store(tagHeld)
			return nil
		default: // recorded: live and held by its streams' protocol
			return nil
		}
	}
}

// Hold is one hold of a buffer (Pool.Hold), ended once by Release.
type Hold struct {
	p    *Pool
	base uintptr
	id   uint64 // this hold's, unique in its table shard: a hold is ended once, never another's
}

// Release ends the hold. At the buffer's last, a Free or FreeAsync made meanwhile takes effect
// (a Close counting the live buffers then waits for it), and its error, if any, is Release's.
// A second Release of any hold is an error wrapping ErrDoubleFree, and ends no other hold.
func (h Hold) Release() error {
	p := h.p
	if p == nil {
		return fmt.Errorf("%w: release of the zero Hold", ErrNotOwned)
	}
	sh := p.out.shard(h.base)
	sh.mu.Lock()
	u := sh.m[h.base]
	var i int
	if u != nil && u.releasing == nil {
		i = slices.Index(u.ids, h.id)
	}
	if u == nil || u.releasing != nil || i < 0 {
		sh.mu.Unlock()
		return fmt.Errorf("%w: release of a hold of buffer %#x, which it no longer holds", ErrDoubleFree, h.base)
	}
	if u.ids = slices.Delete(u.ids, i, i+1); len(u.ids) > 0 {
		sh.mu.Unlock()
		return nil
	}
	if u.freed != 0 {
		// The free waiting for the holds is made with the entry kept, marked releasing, and
		// the buffer still held: a free or Hold of it meanwhile waits for the end of the
		// Release (outShard.lockEntry), and then finds the buffer freed (a double free), or
		// another owner's since.
		u.releasing = make(chan struct{})
		sh.mu.Unlock()
		// Counted freed until the free is made, under counting: a Close counting meanwhile
		// waits for the free (no wait for a stream: it only defers the buffer), and never
		// counts the buffer live while it is on its way back. The close the Release finishes
		// comes after, out of the lock: it may wait for the buffer's streams (closeWait, 5 s),
		// and a Close meanwhile counts the buffer as the deferred buffer it is by then.
		p.out.counting.RLock()
		p.out.freedN.Add(-1)
		p.out.freedBytes.Add(-int64(u.size))
		if releaseHook != nil {
			releaseHook()
		}
		err := p.releaseFree(h.base, u)
		if err != nil && u.own {
			// Not freed: an ordinary live buffer again, not one held by no entry, whose
			// every later free the heap would refuse.
			err = errors.Join(err, wrapError(p.g.Unhold(h.base, u.size), ErrNotOwned))
		}
		sh.mu.Lock()
		delete(sh.m, h.base)
		p.out.active.Add(-1)
		sh.mu.Unlock()
		close(u.releasing)
		p.out.counting.RUnlock()
		if err == nil && p.closed.Load() {
			p.finishClose(h.base)
		}
		return err
	}
	var err error
	if u.own {
		err = wrapError(p.g.Unhold(h.base, u.size), ErrNotOwned)
	}
	delete(sh.m, h.base)
	sh.recycle(u) // no one else has it: only a releasing entry is waited on out of the lock
	p.out.active.Add(-1)
	sh.mu.Unlock()
	return err
}

// releaseFree makes the free of the held buffer at base that waited for its holds (u.freed), as
// the Free or FreeAsync would have (the guards, the streams), but not by them: the buffer is
// still held, and its entry, which they would find, in the table. The Sharer was asked at the
// free: a shared buffer's free waits for the holds only once its last reference went.
func (p *Pool) releaseFree(base uintptr, u *outUse) error {
	if u.own { // the hold bit is the table's: the block is given back held, as a claim is
		return p.freeRecorded(base, u.size, nil, true)
	}
	var l *streamList
	if p.order != nil && u.freed == freedAsync {
		// (A stream forgotten since the FreeAsync has passed the work queued before it, and
		// its handle may be destroyed, or another stream's: the free is a Free then.) The look
		// and the list's making are one step (streamq's Lists.GetKnown): a ForgetStream between
		// a look and a list made a list for the forgotten handle, which the reclaims then
		// queried, and with which the handle no longer counted as forgotten.
		// The FreeAsync checked its stream; it is not asked again here, where a refusal (an
		// event record the driver failed) would leave a buffer freed and no free to make: the
		// reclaims order the buffer after the stream, or after the whole context when the
		// driver refuses the stream's point (a list found lost).
		if releaseForgetLook != nil {
			releaseForgetLook()
		}
		l = p.order.lists.GetKnown(uintptr(u.stream))
	}
	if u.dropped || p.order == nil {
		// A shared buffer whose last reference went (its Sharer was asked at the free), or,
		// without stream order, one whose hold bit is the Share's.
		return p.giveBackShared(base, u.size, l)
	}
	// Stream order: held by its streams' record, or tagHeld.
	return p.freeRecorded(base, u.size, l, false)
}

// releaseHook, when set (by tests), runs in a last Release that has a free to make, just before
// that free; releaseWait in a free, Hold or Close that waits for such a Release.
var releaseHook, releaseWait func()

// releaseForgetLook, when set (by tests), runs in a last Release that makes a deferred
// FreeAsync just before it looks whether the FreeAsync's stream was forgotten.
var releaseForgetLook func()

// freeHeld frees the buffer at addr, of n bytes, which a free found held: deferred to its
// holds' last Release, to its streams, or, where a Hold's Release was clearing the hold at the
// time, freed once it has; a shared buffer its Sharer does not know (the hold bit the Share's)
// is freed at once.
func (p *Pool) freeHeld(addr, n uintptr) error {
	for {
		if handled, err := p.out.deferFree(addr, n, false, 0, false); handled {
			return err
		}
		if p.order != nil {
			return p.order.deferFree(addr, n, nil)
		}
		if err := p.freeSlow(addr, n, false); !errors.Is(err, heap.ErrHeld) {
			return err
		}
		if done, err := p.freeUnknownShared(addr, n); done {
			return err
		}
		runtime.Gosched() // a Release between its table and the heap: microseconds
	}
}

// freeUnknownShared frees the buffer at addr, of n bytes, in a pool without stream order, when
// it is shared (Pool.Share: its hold bit the Share's, tagHeld) and no Hold keeps it: its Sharer
// answered that it does not know it (DropShared, shared false), and the Sharer's contract says
// the pool then frees it as any held buffer, as a pool with stream order does (deferTagged).
// done false says it is not such a buffer.
func (p *Pool) freeUnknownShared(addr, n uintptr) (done bool, err error) {
	tag := p.g.Tag(addr)
	if tag == nil || settled(tag) != tagHeld || !tag.CompareAndSwap(tagHeld, tagNone) {
		return false, nil
	}
	return true, p.freeRecorded(addr, n, nil, true) // given back held, with its tag zero
}

// outside is a pool's holds table, sharded by buffer.
type outside struct {
	active             atomic.Int64 // buffers held
	freedN, freedBytes atomic.Int64 // of them, those freed: their free waits for their holds
	// counting is read-held by a last Release from the moment its buffer stops counting as
	// freed (freedN) until the free it makes is made (not through the close it then finishes
	// in a closed pool, which may wait for the buffer's streams), and held by Close while it
	// counts the buffers the caller has not freed (Pool.userLiveSettled) and, after its
	// drain, those still live (Pool.liveSettled): Close waits for a Release's free under way,
	// and never counts a buffer on its way back as live.
	counting sync.RWMutex
	shards   [16]outShard
}

type outShard struct {
	mu     sync.Mutex
	m      map[uintptr]*outUse // by buffer start
	spare  []*outUse           // entries dropped, for the next Hold: a hold in steady state allocates nothing
	holdID uint64              // the last hold's id (Hold.id)
	_      [16]byte
}

// addHold adds a hold to u and returns its id. Under sh.mu.
func (sh *outShard) addHold(u *outUse) uint64 {
	sh.holdID++
	u.ids = append(u.ids, sh.holdID)
	return sh.holdID
}

// entry returns an entry for a new held buffer, zeroed. Under sh.mu.
func (sh *outShard) entry() *outUse {
	if n := len(sh.spare); n > 0 {
		u := sh.spare[n-1]
		sh.spare[n-1] = nil
		sh.spare = sh.spare[:n-1]
		return u
	}
	return new(outUse)
}

// recycle keeps u, dropped from the table, for entry, up to maxSpareUses a shard (a burst of
// holds leaves no more behind). Under sh.mu; never a releasing entry, whose channel a free or
// Hold may still wait on.
func (sh *outShard) recycle(u *outUse) {
	if len(sh.spare) < maxSpareUses {
		*u = outUse{ids: u.ids[:0]}
		sh.spare = append(sh.spare, u)
	}
}

// maxSpareUses bounds a shard's spare entries.
const maxSpareUses = 64

// outUse is a held buffer: its holds, its size, whether the hold bit is the table's, and the
// free waiting for the holds, if any.
type outUse struct {
	ids   []uint64 // of its holds not yet released (Hold.id)
	size  uintptr
	own   bool
	freed uint8
	// dropped says the free is of a shared buffer whose last reference went (its Sharer said
	// so, or FreeShared): it gives the buffer back and asks the Sharer nothing.
	dropped bool
	stream  cuda.Stream // FreeAsync's
	// releasing, once the last Release is making the free, is closed when it has made it and
	// dropped the entry.
	releasing chan struct{}
}

const (
	freedSync  = 1
	freedAsync = 2
)

func (o *outside) shard(base uintptr) *outShard { return &o.shards[(base>>6^base>>16)%16] }

// lockEntry locks sh for the buffer at base, and reports true, unless the buffer's last Release
// is making its free (its entry is releasing): it then waits for the Release to end, leaves sh
// unlocked and reports false, and the caller looks again (the buffer is freed, or another
// owner's since).
func (sh *outShard) lockEntry(base uintptr) bool {
	sh.mu.Lock()
	u := sh.m[base]
	if u == nil || u.releasing == nil {
		return true
	}
	sh.mu.Unlock()
	if releaseWait != nil {
		releaseWait()
	}
	<-u.releasing
	return false
}

// subSliceFree is the refusal of a free of n bytes at addr, a buffer of size bytes.
func subSliceFree(addr, n, size uintptr) error {
	return fmt.Errorf("%w: %#x freed with %d bytes, allocated with %d", ErrSubSlice, addr, n, size)
}

// deferFree defers the free of the buffer at addr, of n bytes (FreeAsync on stream s when
// async; of a shared buffer whose last reference went when dropped), when it is held: handled
// reports that it was (err then says why the free is refused: a sub-slice, a free pending
// already). A pool with no buffer held answers at the cost of one load.
func (o *outside) deferFree(addr, n uintptr, async bool, s cuda.Stream, dropped bool) (handled bool, err error) {
	if o.active.Load() == 0 {
		return false, nil
	}
	sh := o.shard(addr)
	if !sh.lockEntry(addr) {
		return o.deferFree(addr, n, async, s, dropped)
	}
	defer sh.mu.Unlock()
	u := sh.m[addr]
	if u == nil {
		return false, nil
	}
	return true, o.deferTo(u, addr, n, async, s, dropped)
}

// freedHeld reports that the free of the buffer at addr waits for the last Release of its holds
// (deferFree, lockUnheld): that Release makes it, and finishes the close of a closed pool then,
// so a free's close (settle) waits for no Hold. A pool with no buffer held answers at the cost
// of one load.
func (o *outside) freedHeld(addr uintptr) bool {
	if o.active.Load() == 0 {
		return false
	}
	sh := o.shard(addr)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	u := sh.m[addr]
	return u != nil && u.freed != 0
}

// deferTo defers the free of the buffer at addr, of n bytes, to the last Release of u, its entry
// (deferFree's arguments), or says why the free is refused. Under the entry's shard's lock.
func (o *outside) deferTo(u *outUse, addr, n uintptr, async bool, s cuda.Stream, dropped bool) error {
	switch {
	case n != u.size:
		return subSliceFree(addr, n, u.size)
	case u.freed != 0:
		return fmt.Errorf("%w: %#x has a free pending already (it waits for its holds)", ErrDoubleFree, addr)
	}
	u.freed, u.dropped = freedSync, dropped
	if async {
		u.freed, u.stream = freedAsync, s
	}
	o.freedN.Add(1)
	o.freedBytes.Add(int64(u.size))
	return nil
}

// lockUnheld is the look at the holds of a free that claims the tag of the buffer at addr, of n
// bytes, while some buffer is held (streamOrder.deferTagged): it returns the buffer's shard
// locked when no Hold keeps the buffer, or one's last Release is making this free (no Hold of
// it starts while the caller holds the lock); else nil, with the free deferred to the holds as
// deferFree defers it (FreeAsync on stream s when async), or err saying why it is refused.
func (o *outside) lockUnheld(addr, n uintptr, async bool, s cuda.Stream) (*outShard, error) {
	sh := o.shard(addr)
	sh.mu.Lock()
	if u := sh.m[addr]; u != nil && u.releasing == nil {
		err := o.deferTo(u, addr, n, async, s, false)
		sh.mu.Unlock()
		return nil, err
	}
	return sh, nil
}

// unlockShard lets go of sh, locked by lockUnheld; nothing when sh is nil.
func unlockShard(sh *outShard) {
	if sh != nil {
		sh.mu.Unlock()
	}
}
