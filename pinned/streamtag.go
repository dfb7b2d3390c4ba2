package pinned

import (
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
)

// What a buffer's tag says.
//
// The streams recorded on a live buffer are kept beside its block, in the word the heap keeps
// for a holder (heap.BlockRef.Tag: see heap/tag.go), so that the common case, a buffer one
// stream uses, costs compare-and-swaps and no map or lock:
//
//	tagNone     no stream recorded. A held buffer with it has its free pending (FreeAsync
//	            held it, or a free of a recorded buffer cleared its tag) or is being freed (a
//	            ZeroOnFree claim): a record or a free of it is refused (ErrDoubleFree). Every
//	            block is given back with it.
//	tagLocked   a record is between its write of the tag and its hold of the block (record),
//	            or a free's claim between its write and its look at the holds (claim): every
//	            other call waits for it (settled).
//	tagMulti    live and held, several streams recorded: the use under its uses shard's lock
//	            has them. It leaves tagMulti only under that lock.
//	tagHeld     live and held, waiting for no stream: a Hold (hold.go) or a Share (share.go)
//	            of a buffer no stream was recorded on. A free frees it at once (FreeAsync: once
//	            its stream has passed it); a record makes it tagOf(s).
//	tagOf(s)    live and held, recorded on stream s alone.
//
// So a tag other than tagNone and tagLocked says the buffer is live and held, and tagNone on
// a held buffer that its free is pending, with no write of the tag by FreeAsync or a claim.
// ForgetStream writes no tag: a free asks whether each stream its tag or use names was
// forgotten since (knownList: streamq's Lists.GetKnown), and does not wait for those. A
// record that finds tagNone locks the tag first, then holds the block: a hold that was not the
// first finds a free pending (it unlocks the tag and is refused). Every change is a
// compare-and-swap from the value read, so a record and a free racing on one buffer are
// ordered by it: the record wins (the free then waits for its stream too) or the free wins
// (the record is refused). A stream whose handle does not fit a tag (tagFits) goes to the uses
// map, as a second stream does.

const (
	tagNone   uintptr = 0
	tagLocked uintptr = 1
	tagMulti  uintptr = 2
	tagHeld   uintptr = 3
)

// tagOf is the tag of a buffer recorded on stream s alone (tagFits(s)).
func tagOf(s cuda.Stream) uintptr { return (uintptr(s) + 1) << 2 }

// tagFits reports whether tagOf(s) is a tag of s alone.
func tagFits(s cuda.Stream) bool { return uintptr(s) < 1<<61 }

// tagStream is the stream of tag t, one of a buffer recorded on one stream (t > tagHeld).
func tagStream(t uintptr) cuda.Stream { return cuda.Stream(t>>2 - 1) }

// settled returns tag's value once no record holds it locked (tagLocked): the wait is that of
// a record between two of its instructions.
func settled(tag *atomic.Uintptr) uintptr {
	for {
		if t := tag.Load(); t != tagLocked {
			return t
		}
		runtime.Gosched()
	}
}

// record holds the buffer holding [addr, addr+n) and records s on it.
func (o *streamOrder) record(addr, n uintptr, s cuda.Stream) error {
	if _, err := o.check(s); err != nil {
		return err
	}
	// A range from a buffer's start (the usual RecordStream(buf, s)) is found in one lookup;
	// any other goes through Block first, for the start of its buffer.
	base := addr
	r, ok := o.g.FindFrom(addr, n)
	if !ok {
		b, size, err := o.g.Block(addr)
		if err != nil {
			return wrapError(err, ErrNotOwned)
		}
		if off := addr - b; n > size-off {
			return fmt.Errorf("%w: %d bytes at %#x run %d bytes past the end of buffer %#x of %d bytes", ErrNotOwned, n, addr, n-(size-off), b, size)
		}
		if r, ok = o.g.FindFrom(b, size); !ok {
			return fmt.Errorf("%w: %#x was freed during the record", ErrDoubleFree, b)
		}
		base = b
	}
	err := o.recordOn(r, base, s)
	o.verify()
	return err
}

// recordOwn is record of s, checked, on the buffer holding [addr, addr+n) by the owner of its heap
// h, in a fast section of h's shard: a buffer from its start found in h's page cache
// (heap.Heap.TryFindFrom), its tag made, and none but tagNone or s's own. It holds the block with
// the owner's hold (heap.Heap.TryHoldRef: a plain store while the page is exclusive, which it
// stays), between the tag's lock and its store as recordOn does. done false says it changed
// nothing: record then does the work, and says why it fails where it does, unless untagged is set
// (r the block): the block's page has no tags made yet, which its BlockRef.Tag makes (out of the
// fast section, as it allocates) before a second try. It never blocks: a tag another record holds
// locked is record's to wait for.
func (o *streamOrder) recordOwn(h *heap.Heap, addr, n uintptr, s cuda.Stream) (done, untagged bool, r heap.BlockRef) {
	if !tagFits(s) {
		return false, false, r
	}
	r, ok := h.TryFindFrom(addr, n)
	if !ok {
		return false, false, r
	}
	tag := r.TryTag()
	if tag == nil {
		return false, true, r
	}
	switch tag.Load() {
	case tagOf(s):
		return true, false, r // recorded already: live and held
	case tagNone:
	default:
		return false, false, r
	}
	if !tag.CompareAndSwap(tagNone, tagLocked) {
		return false, false, r
	}
	if first, ok := h.TryHoldRef(r); !ok || !first { // changed nothing: record says why
		tag.Store(tagNone)
		return false, false, r
	}
	tag.Store(tagOf(s))
	return true, false, r
}

// recordOn records s on the live block r, which starts at base.
func (o *streamOrder) recordOn(r heap.BlockRef, base uintptr, s cuda.Stream) error {
	tag := r.Tag()
	for {
		t := settled(tag)
		switch {
		case t == tagNone:
			if !tag.CompareAndSwap(tagNone, tagLocked) {
				continue
			}
			first, ok := r.Hold()
			if !ok || !first { // freed since it was found, or its free is pending
				tag.Store(tagNone)
				return fmt.Errorf("%w: stream %#x recorded on buffer %#x after its free", ErrDoubleFree, s, base)
			}
			if tagFits(s) {
				tag.Store(tagOf(s))
				return nil
			}
			sh := o.shard(base)
			sh.mu.Lock()
			sh.m[base] = use{one: s}
			tag.Store(tagMulti)
			sh.mu.Unlock()
			return nil
		case tagFits(s) && t == tagOf(s):
			return nil
		case tagFits(s) && t == tagHeld:
			if tag.CompareAndSwap(t, tagOf(s)) {
				return nil
			}
			continue
		}
		// A second stream (or one that does not fit a tag): the uses map.
		if recordSharedLook != nil {
			recordSharedLook()
		}
		sh := o.shard(base)
		sh.mu.Lock()
		// tagMulti is left only under this lock: read again under it, as a free may have
		// claimed the buffer since (its use deferred, or gone with the buffer).
		if t == tagMulti && tag.Load() != tagMulti || t != tagMulti && !tag.CompareAndSwap(t, tagMulti) {
			sh.mu.Unlock()
			continue // changed since it was read: read it again
		}
		var u use
		switch t {
		case tagMulti:
			u = sh.m[base]
			u.add(s)
		case tagHeld:
			u = use{one: s}
		default:
			u = use{one: tagStream(t)}
			u.add(s)
		}
		sh.m[base] = u
		sh.mu.Unlock()
		return nil
	}
}

// recordSharedLook, when set (by tests), runs in recordOn between its read of the tag and its
// lock of the uses shard, on the way to the uses map.
var recordSharedLook func()

// deferFree frees the whole buffer at addr, of n bytes, once every stream recorded on it, and
// the stream of l when l is not nil (FreeAsync), has passed the work queued on it so far. l nil
// is a Free of a held buffer.
func (o *streamOrder) deferFree(addr, n uintptr, l *streamList) error {
	if l != nil {
		first, err := o.g.HoldSized(addr, n)
		if err != nil {
			return wrapError(err, ErrNotOwned)
		}
		if first { // no stream recorded, and none can be now: the buffer is l's alone
			return o.enqueue(l, deferred{addr: addr, n: n})
		}
	} else if err := o.wholeBuffer(addr, n); err != nil {
		return err
	}
	err := o.deferTagged(addr, n, l, nil)
	o.verify()
	return err
}

// deferHeld is deferFree of a Free (l nil) whose fast path found the buffer live, held and of n
// bytes (heap.Heap.TryFreeOrHeld): the size check is made. tag is the block's tag when the fast
// path found it too (heap.Heap.NearTag), else nil.
func (o *streamOrder) deferHeld(addr, n uintptr, tag *atomic.Uintptr) error {
	err := o.deferTagged(addr, n, nil, tag)
	o.verify()
	return err
}

// deferTagged is deferFree of the buffer at addr, of n bytes, found held by someone else (a
// record, or a free pending), by what its tag says: tag, or when nil the group's (Group.Tag).
// While some buffer is held (Hold), it looks at the holds with the buffer's holds table shard
// locked, as Hold does, and takes the tag (claim) under that lock: a Hold of the buffer that
// came after the free's look at the holds has it wait for its last Release, and one after the
// claim is refused.
func (o *streamOrder) deferTagged(addr, n uintptr, l *streamList, tag *atomic.Uintptr) error {
	if tag == nil {
		tag = o.g.Tag(addr)
	}
	d := deferred{addr: addr, n: n}
	var hs *outShard // locked, once a Hold may be at work on the buffer
	for {
		t := tagNone
		if tag != nil {
			t = settled(tag)
		}
		if t != tagNone && hs == nil && o.holds != nil && o.holds.active.Load() != 0 {
			var s cuda.Stream
			if l != nil {
				s = streamOf(l)
			}
			var err error
			if hs, err = o.holds.lockUnheld(addr, n, l != nil, s); hs == nil {
				return err // deferred to the buffer's holds, or refused
			}
			continue // the tag again, under the lock
		}
		switch {
		case t == tagNone:
			unlockShard(hs)
			return fmt.Errorf("%w: %#x has a free pending already", ErrDoubleFree, addr)
		case t == tagHeld: // waits for no stream: l's alone, or none
			if !o.claim(tag, t, hs) {
				continue
			}
			unlockShard(hs)
			if l == nil {
				return o.free(d, nil)
			}
			return o.enqueue(l, d)
		case t != tagMulti && (l == nil || tagStream(t) == streamOf(l)): // one stream
			if !o.claim(tag, t, hs) {
				continue
			}
			unlockShard(hs)
			if tagForgetLook != nil {
				tagForgetLook()
			}
			if sl := o.knownList(tagStream(t), l); sl != nil {
				return o.enqueue(sl, d)
			}
			return o.free(d, nil) // forgotten (ForgetStream): it has passed the buffer
		}
		if err, again := o.deferShared(tag, t, d, l, hs); !again {
			return err
		}
	}
}

// claim takes the tag of a held buffer whose free the caller makes from t, read, to tagNone:
// the free is the caller's from then on. It fails, and nothing changes, when the tag changed
// since it was read, or, unless the caller holds hs (the buffer's holds table shard), when some
// buffer is held: a Hold of this one, which reads the tag after it counts itself (active), may
// have read t, and the caller looks at the holds under hs's lock first (deferTagged). The tag is
// locked (tagLocked) while claim looks at active, so that a Hold that has not read it then
// reads tagNone, and is refused. It is never tagNone meanwhile: a WaitStreams of a buffer whose
// free a Hold then defers would wait for no stream, and a record or Hold would be refused; and
// an undo from tagNone would wait for whatever locked it then, in Free's fast section, where
// nothing may wait. A compare-and-swap, a load and a store while no buffer is held.
func (o *streamOrder) claim(tag *atomic.Uintptr, t uintptr, hs *outShard) bool {
	if claimBefore != nil {
		claimBefore(tag)
	}
	if hs != nil {
		return tag.CompareAndSwap(t, tagNone)
	}
	if !tag.CompareAndSwap(t, tagLocked) {
		return false
	}
	if claimLocked != nil {
		claimLocked(tag)
	}
	if o.holds != nil && o.holds.active.Load() != 0 {
		tag.Store(t)
		return false
	}
	tag.Store(tagNone)
	return true
}

// claimBefore and claimLocked, when set (by tests), run in claim before its compare-and-swap of
// the tag and, where it locks the tag, once it has (before its look at the holds).
var claimBefore, claimLocked func(tag *atomic.Uintptr)

// tagForgetLook and sharedForgetLook, when set (by tests), run in deferTagged and deferShared
// just before they look up the list of a stream recorded on the buffer they defer.
var tagForgetLook, sharedForgetLook func()

// knownList returns the list of stream s: l when it is s's, else the one check found last, else
// the lists', made if need be, unless s was forgotten (ForgetStream): nil then, as s has passed
// the work recorded on it. The look at whether s was forgotten and the list's making are one
// step (streamq's Lists.GetKnown): a ForgetStream between a look (Forgotten) and a list made
// (Get) made a list for the forgotten handle, which the reclaims then queried (the driver may
// have given it to a new stream: the buffer waited for that one's work), and with which the
// handle no longer counted as forgotten, so that every buffer recorded on it waited for it too.
func (o *streamOrder) knownList(s cuda.Stream, l *streamList) *streamList {
	if l != nil && streamOf(l) == s {
		return l
	}
	if l = o.lists.Last(); l != nil && streamOf(l) == s {
		return l
	}
	return o.lists.GetKnown(uintptr(s))
}

// deferShared defers d, whose tag read t (tagMulti, or one stream other than l's), under its
// uses shard's lock; again says the tag changed since it was read, or a Hold may be at work on
// the buffer (claim). hs, when not nil, is the buffer's holds table shard, locked by the caller:
// it is let go once the tag is claimed, and kept when again is set. The streams forgotten
// (ForgetStream) are taken off the buffer's, and each other's list is looked up and made in one
// step (knownList), and pushed on only while its stream is not forgotten (queue): a stream
// forgotten meanwhile has passed the buffer, and d waits for the others only.
func (o *streamOrder) deferShared(tag *atomic.Uintptr, t uintptr, d deferred, l *streamList, hs *outShard) (err error, again bool) {
	sh := o.shard(d.addr)
	sh.mu.Lock()
	if !o.claim(tag, t, hs) {
		sh.mu.Unlock()
		return nil, true
	}
	unlockShard(hs)
	u := use{one: noStream}
	if t == tagMulti {
		u = sh.m[d.addr]
		delete(sh.m, d.addr)
	} else {
		u.add(tagStream(t))
	}
	u.dropForgotten(o.lists)
	if l != nil {
		u.add(streamOf(l))
	}
	if sharedForgetLook != nil {
		sharedForgetLook()
	}
	if len(u.more) == 0 {
		sh.mu.Unlock()
		if u.one != noStream {
			// One stream left: the buffer is its alone now, as after FreeAsync.
			if ul := o.knownList(u.one, l); ul != nil {
				return o.enqueue(ul, d), false
			}
		}
		// Every stream recorded was forgotten, so has passed: free it now.
		return o.free(d, nil), false
	}
	// Counted before it is on a list, and put on the lists under the lock, which a reclaim
	// that takes it off one takes to count that stream passed (passed): it finds the use
	// counting the lists it is on.
	o.sharedWeight.Add(weigh(d.n))
	o.shared.Add(1)
	o.sharedBytes.Add(int64(d.n))
	d.shared = true
	u.left = 0
	for i := -1; i < len(u.more); i++ {
		s := u.one
		if i >= 0 {
			s = u.more[i]
		}
		if sl := o.knownList(s, l); sl != nil && o.queue(sl, d) {
			u.left++
		}
	}
	if u.left == 0 { // every stream forgotten since dropForgotten: all have passed it
		sh.mu.Unlock()
		o.shared.Add(-1)
		o.sharedBytes.Add(-int64(d.n))
		o.sharedWeight.Add(-weigh(d.n))
		return o.free(d, nil), false
	}
	u.freed = true
	sh.m[d.addr] = u
	sh.mu.Unlock()
	return nil, false
}

// wholeBuffer checks that [addr, addr+n) is a whole live buffer, for a free.
func (o *streamOrder) wholeBuffer(addr, n uintptr) error {
	size, err := o.g.Size(addr)
	if err != nil {
		return wrapError(err, ErrNotOwned)
	}
	if size != n {
		return fmt.Errorf("%w: %d bytes of a buffer of %d", ErrSubSlice, n, size)
	}
	return nil
}
