package pinned

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// Shared buffers: the seam through which a layer above a pool (package ipcpool, a pool shared
// by the processes of a host) takes part in frees the pool cannot decide alone.
//
//   - A free of memory outside the pool (a buffer another process holds, mapped here too) goes
//     to Sharer.FreeOutside, found on the free's slow path: the pool's own frees never look.
//   - Share marks a buffer shared: it holds its block (heap.Group.Hold, as RecordStream does),
//     so that every free of it leaves the fast path, and a free of a held buffer asks
//     Sharer.DropShared first, whose answer says whether the free was the buffer's last
//     reference. Until then the buffer stays live; the last one frees it as the free it is
//     (Free, FreeAsync: after the streams recorded on it, as any held buffer, and after the
//     last Release of its holds, Pool.Hold). FreeShared is that last free when it comes from
//     elsewhere (another process let the buffer go). A FreeAsync records its stream on the
//     buffer first, as RecordStream does, so that the last free waits for that stream too. A
//     free of a shared buffer the Sharer does not know (DropShared answers shared false) frees
//     it as any held buffer, whatever the backend.
//
// A buffer never shared, in a pool with no Sharer or one with it, pays nothing on Alloc and
// Free: the fast paths are unchanged, and only frees that leave them ask anything.
//
// The tag (see streamtag.go) of a shared buffer no stream was recorded on is tagHeld: live,
// held, waiting for no stream. RecordStream on it records the stream as on any buffer; its
// last free then waits for the stream.

// A Sharer is told of the frees a pool cannot finish alone: of memory outside the pool, and
// of buffers it shared with Pool.Share. Options.Sharer sets it; package ipcpool's processes
// are one. Its methods are called from any goroutine that frees, never with a lock of the
// pool held.
type Sharer interface {
	// FreeOutside frees b, a slice of memory outside the pool's arena that a Free (or a
	// FreeAsync, once its stream has passed the work queued so far) was given. Its error is
	// the free's.
	FreeOutside(b []byte) error
	// DropShared is asked by a free of a held buffer at addr whether the buffer is shared
	// (Pool.Share) and, if so, drops the reference that free holds: last says it was the
	// last, and the pool then frees the buffer. shared false says the sharer does not know the
	// buffer: the pool frees it as any held buffer. err, with shared set, is the free's error
	// (a reference dropped already, say).
	DropShared(addr uintptr) (shared, last bool, err error)
}

// ErrNoSharer: Share on a pool made without Options.Sharer.
var errNoSharer = fmt.Errorf("%w: Share needs Options.Sharer", ErrInvalidOptions)

// Share marks buffer b, a whole live buffer of the pool, shared: from now on every free of it
// asks the pool's Sharer (Options.Sharer) whether it was the last reference, and the buffer
// stays live until it was (see Sharer). Sharing a buffer twice is not an error; the Sharer
// counts references, the pool does not.
func (p *Pool) Share(b []byte) error {
	if p.sharer == nil {
		return errNoSharer
	}
	addr, n, err := p.buffer(b)
	if err != nil {
		return err
	}
	r, ok := p.g.FindFrom(addr, n)
	if !ok {
		size, err := p.g.Size(addr)
		if err == nil && size != n {
			err = fmt.Errorf("%w: %d bytes of a buffer of %d", ErrSubSlice, n, size)
		}
		if err == nil {
			err = fmt.Errorf("%w: %#x was freed meanwhile", ErrDoubleFree, addr)
		}
		return wrapError(err, ErrNotOwned)
	}
	if size, err := p.g.Size(addr); err != nil || size != n {
		if err == nil {
			err = fmt.Errorf("%w: %d bytes of a buffer of %d", ErrSubSlice, n, size)
		}
		return wrapError(err, ErrNotOwned)
	}
	// The holds table's lock first, as Hold takes it (a Hold settles the tag under it): a held
	// buffer whose free waits for its holds is freed already, and where the hold bit is the
	// table's, it passes to the Share.
	sh := p.out.shard(addr)
	if !sh.lockEntry(addr) {
		return p.Share(b)
	}
	defer sh.mu.Unlock()
	tag := r.Tag()
	if u := sh.m[addr]; u != nil {
		if u.freed != 0 {
			return fmt.Errorf("%w: buffer %#x shared after its free (it waits for its holds)", ErrDoubleFree, addr)
		}
		if u.own {
			u.own = false
			tag.Store(tagHeld)
			return nil
		}
	}
	for {
		if t := settled(tag); t != tagNone {
			return nil // held for streams recorded on it: live, and every free asks already
		}
		if !tag.CompareAndSwap(tagNone, tagLocked) {
			continue
		}
		first, ok := r.Hold()
		if !ok || !first { // freed since it was found, or its free is pending
			tag.Store(tagNone)
			return fmt.Errorf("%w: buffer %#x shared after its free", ErrDoubleFree, addr)
		}
		tag.Store(tagHeld)
		return nil
	}
}

// FreeShared frees buffer b, shared with Share, whose last reference its Sharer has seen go
// elsewhere (another process let it go): as Free frees a held buffer, after the streams
// recorded on it and the last Release of its holds (Hold). The Sharer must know the buffer no
// more (DropShared answers shared false). A part of a buffer (ErrSubSlice), a buffer freed
// (ErrDoubleFree) or one never shared (ErrNotOwned) is refused, and nothing changes; but in a
// pool with stream order (CUDAHost) a buffer never shared that a Hold or a stream's record
// holds looks shared, and is freed: the Sharer must name only buffers it shared.
func (p *Pool) FreeShared(b []byte) error {
	addr, n, err := p.buffer(b)
	if err != nil {
		return err
	}
	// Refused as a free is, before anything changes: a part of a buffer, a buffer freed, memory
	// not of one, or a buffer never shared (not held).
	size, err := p.g.Size(addr)
	switch {
	case err != nil:
		return wrapError(err, ErrNotOwned)
	case size != n:
		return subSliceFree(addr, n, size)
	case !p.g.Held(addr), p.order == nil && !sharedTag(p.g.Tag(addr)):
		return fmt.Errorf("%w: %#x is not a shared buffer", ErrNotOwned, addr)
	}
	return p.releaseShared(addr, n, nil)
}

// sharedTag reports, in a pool without stream order, whether the tag of a held buffer says it
// is shared (tagHeld: see Share); a Hold's own hold bit leaves the tag tagNone. In a pool with
// stream order a Hold, or a stream's record, tags it as a Share does: only the Sharer knows.
func sharedTag(tag *atomic.Uintptr) bool {
	return tag != nil && settled(tag) == tagHeld
}

// freeShared is the part of a free (Free, FreeAsync on the stream of l when l is not nil) of
// the held buffer at addr that asks the Sharer: done says the free is finished, with err.
func (p *Pool) freeShared(addr, n uintptr, l *streamList) (done bool, err error) {
	if size, err := p.g.Size(addr); err == nil && size != n {
		// Before the Sharer: a sub-slice's free drops no reference.
		return true, subSliceFree(addr, n, size)
	}
	if l != nil {
		// FreeAsync's stream is recorded on the buffer, before the Sharer (after it, a last
		// free elsewhere could give the buffer back first): whichever free is the last, it
		// waits for the work queued on the stream before this one.
		r, ok := p.g.FindFrom(addr, n)
		if !ok {
			return true, fmt.Errorf("%w: %#x was freed meanwhile", ErrDoubleFree, addr)
		}
		err := p.order.recordOn(r, addr, streamOf(l))
		p.order.verify()
		if err != nil {
			return true, err
		}
	}
	shared, last, err := p.sharer.DropShared(addr)
	switch {
	case !shared:
		return false, nil
	case err != nil || !last:
		return true, err
	}
	return true, p.releaseShared(addr, n, l)
}

// releaseShared frees the shared buffer at addr, held, whose last reference went (FreeAsync on
// the stream of l when l is not nil): at its holds' last Release while it has any. After
// Close, the free that gives it back finishes the close, as any free does; one deferred to a
// Release leaves that to the Release.
func (p *Pool) releaseShared(addr, n uintptr, l *streamList) error {
	var s cuda.Stream
	if l != nil {
		s = streamOf(l)
	}
	if handled, err := p.out.deferFree(addr, n, l != nil, s, true); handled { // held: hold.go
		return err
	}
	err := p.giveBackShared(addr, n, l)
	if err == nil && p.closed.Load() {
		p.finishClose(addr)
	}
	return err
}

// giveBackShared gives back the shared buffer at addr, held, whose last reference went and
// which no Hold keeps.
func (p *Pool) giveBackShared(addr, n uintptr, l *streamList) error {
	if p.order == nil {
		if tag := p.g.Tag(addr); tag != nil {
			tag.CompareAndSwap(tagHeld, tagNone) // the heap's rule: given back with its tag zero
		}
		return p.freeRecorded(addr, n, nil, true)
	}
	// A held buffer freed so is deferred by what its tag says (deferTagged): at once with
	// tagHeld, behind its streams otherwise.
	return p.freeRecorded(addr, n, l, false)
}

// sharedOrForeign is the Sharer's part of a free (Free, FreeAsync on the stream of l when l
// is not nil) of the buffer at addr found held or not in the pool (r: what the fast section
// saw, zero where none ran): done says the free is finished, with err.
func (p *Pool) sharedOrForeign(addr, n uintptr, r fastFree, l *streamList) (done bool, err error) {
	if r.done || r.claimed != nil {
		return false, nil
	}
	if !r.held {
		if _, in := p.a.Lookup(addr); !in {
			// Outside the pool: the Sharer's, found before the heap's lookup would make an
			// error of it (a free of a peer's buffer is no error, and must be cheap).
			return true, p.sharer.FreeOutside(mem.Bytes(addr, n))
		}
		if !p.g.Held(addr) {
			return false, nil
		}
	}
	return p.freeShared(addr, n, l)
}

// freeOutside hands a free of memory outside the pool to the Sharer: err is the free's error
// (from the heap: a foreign pointer) when the memory is not outside, or there is no Sharer.
func (p *Pool) freeOutside(addr, n uintptr, err error) error {
	if p.sharer == nil || !errors.Is(err, heap.ErrNotOwned) && !errors.Is(err, ErrNotOwned) {
		return err
	}
	if _, in := p.a.Lookup(addr); in {
		return err
	}
	return p.sharer.FreeOutside(mem.Bytes(addr, n))
}

// freeAsyncShared is FreeAsync's part for a pool with a Sharer: a buffer outside the pool is
// freed once s has passed the work queued on it (the caller waits for it: the other process
// cannot), a shared one asks the Sharer.
func (p *Pool) freeAsyncShared(addr, n uintptr, s cuda.Stream, l *streamList) (done bool, err error) {
	if _, in := p.a.Lookup(addr); !in {
		if err := p.order.points().WaitStream(streamq.Stream(s)); err != nil {
			return true, streamError("", err)
		}
		return true, p.sharer.FreeOutside(mem.Bytes(addr, n))
	}
	if !p.g.Held(addr) {
		return false, nil
	}
	return p.freeShared(addr, n, l)
}
