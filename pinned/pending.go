package pinned

import "fmt"

// unfreed checks that b lies inside a live buffer of the pool that the caller has not freed, and
// returns the buffer's start, for the calls that take a buffer and free none (DevicePointer,
// Live, WaitStreams, RecordStream): liveBuffer's checks, and then, for a buffer the heap holds,
// that no free of it is pending (freePending). Errors: liveBuffer's, and ErrDoubleFree for a
// free pending. It costs a lookup, and the holds table's lock only for a held buffer (in a
// pool with stream order, only while some buffer is held).
func (p *Pool) unfreed(b []byte) (uintptr, error) {
	for {
		base, _, err := p.liveBuffer(b)
		if err != nil {
			return 0, err
		}
		pending, again := p.freePending(base)
		switch {
		case again:
			continue // a Release was making its free: freed now, or another owner's
		case pending:
			return 0, fmt.Errorf("%w: buffer %#x was freed; its free waits for its streams or holds",
				ErrDoubleFree, base)
		}
		return base, nil
	}
}

// freePending reports whether the free of the live buffer at base is pending: deferred to its
// streams or its FreeAsync cache (held, tagNone, or no tag: see streamtag.go), to the last
// Release of its holds (its entry freed: hold.go), or under way (a guarded free's claim). again
// says the buffer's last Release was making its free: the caller looks at the buffer again.
//
// The holds table is read first, under its shard's lock, while some buffer is held (counted in
// active before its entry is made, and after it is dropped): a Release that makes the free makes
// it with the entry kept (releasing), so the tag is read only once no Release is at work on the
// buffer. Without stream order the hold bit of a buffer no Hold keeps is a Share's (tagHeld) or
// a claim's: read under the lock, as a Hold sets and its last Release clears the table's bit
// under it.
func (p *Pool) freePending(base uintptr) (pending, again bool) {
	if !p.g.Held(base) {
		return false, false // live and held by no one: the caller's
	}
	if p.order == nil || p.out.active.Load() != 0 {
		sh := p.out.shard(base)
		if !sh.lockEntry(base) {
			return false, true
		}
		defer sh.mu.Unlock()
		if u := sh.m[base]; u != nil {
			return u.freed != 0, false
		}
		if p.order == nil {
			tag := p.g.Tag(base)
			return p.g.Held(base) && (tag == nil || settled(tag) != tagHeld), false
		}
	}
	tag := p.g.Tag(base)
	return tag == nil || settled(tag) == tagNone, false
}
