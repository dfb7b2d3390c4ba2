package ipcpool

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Retain adds a reference of this process to the buffer of h: the buffer stays live, whoever
// frees its allocation, until this process calls Release as many times as it retained it
// (or leaves the pool, or dies). So several processes can read one buffer (a shared KV
// prefix) and the buffer goes back to its holder when the last of them lets go. It fails
// with ErrStaleHandle for a buffer already let go, and with ErrProtocol, retaining nothing,
// when another process rewrites the buffer's words of the control region without end.
func (p *Process) Retain(h Handle) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if !p.adopted() { // (outside enter: a Close does not wait for the owner's scan)
		return ErrClosed
	}
	if !p.enter() {
		return ErrClosed
	}
	defer p.exit()
	ex := &p.ex
	ex.mu.Lock() // one retain or release of this process at a time: see below
	e, err := p.resolve(h)
	if err != nil {
		ex.mu.Unlock()
		return err
	}
	if n := ex.retains[h]; n > 0 {
		ex.retains[h] = n + 1
		ex.mu.Unlock()
		return nil
	}
	c := &p.c
	if !p.retainedEver {
		// Before the first bit: the owner scans for a process's bits when it goes only if
		// it says it may have some.
		if err := p.flagRetains(); err != nil {
			ex.mu.Unlock()
			return err
		}
		p.retainedEver = true
	}
	if _, err := c.setRetain(e, p.slot, true); err != nil {
		ex.mu.Unlock()
		return err // (the bit not set: no retain)
	}
	// The bit is set: a retirement that has not marked the entry yet sees it and backs off;
	// one that has marked it is seen here.
	w := c.load(c.entry(e) + eState)
	if entryGen(w) == h.Gen && w&(eLive|eRetiring) == eLive {
		ex.retains[h] = 1
		ex.mu.Unlock()
		return nil
	}
	// Too late: the buffer is being let go. Take the bit back (this process's, which no other
	// retain of it can hold: ex.mu) and let the entry retire if it now may. A word another
	// process rewrites without end keeps the bit, for the drainer to take back (clearUntaken).
	retired := false
	if _, err := c.setRetain(e, p.slot, false); err != nil {
		ex.untaken = append(ex.untaken, e)
	} else {
		retired = c.tryRetire(e, entryGen(w))
	}
	ex.mu.Unlock()
	if retired {
		p.deliver(e, entryGen(w))
	}
	return fmt.Errorf("%w: %v", ErrStaleHandle, h)
}

// Release lets go one reference Retain added. When it was the buffer's last reference, the
// buffer goes back to its holder. Release of a handle this process does not retain is
// refused with ErrStaleHandle. One that fails with ErrProtocol (another process rewrites the
// buffer's words of the control region without end) keeps the reference: Release it again.
// The caller must have let every stream that used the buffer pass first.
func (p *Process) Release(h Handle) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if !p.adopted() { // (outside enter: a Close does not wait for the owner's scan)
		return ErrClosed
	}
	if !p.enter() {
		return ErrClosed
	}
	defer p.exit()
	p.ex.mu.Lock()
	retired, err := p.release(h)
	p.ex.mu.Unlock()
	if retired {
		p.deliver(int(h.Entry), h.Gen)
	}
	return err
}

// release is Release with ex.mu held: retired says the entry of h must be delivered (once
// ex.mu is let go).
func (p *Process) release(h Handle) (retired bool, err error) {
	ex := &p.ex
	n := ex.retains[h]
	switch {
	case n == 0:
		return false, fmt.Errorf("%w: %v is not retained by this process", ErrStaleHandle, h)
	case n > 1:
		ex.retains[h] = n - 1
		return false, nil
	}
	e := int(h.Entry) // checked by Retain
	if _, err := p.c.setRetain(e, p.slot, false); err != nil {
		return false, err // the retain still held, for another Release
	}
	delete(ex.retains, h)
	if p.pauseFree != nil {
		p.pauseFree()
	}
	return p.c.tryRetire(e, h.Gen), nil
}

// deliver hands entry e, retired at gen by this process, to its holder: its own entry is
// taken at once, a peer's goes on the ring to it (or, the ring full, its overflow word says
// to scan). An entry whose holder is gone is the owner's to let go (table.go).
func (p *Process) deliver(e int, gen uint32) {
	c := &p.c
	s, i := e/p.exports, e%p.exports
	holder := c.load(c.entry(e) + eHolder)
	serial := holder >> 16
	if int(holder&0xffff) != s || s >= p.slots {
		return // garbage: the holder's scan, or the owner's, deals with it
	}
	if s == p.slot && serial == p.serial {
		p.takeRetired(i, gen)
		return
	}
	if c.slotLoad(s, sSerial) != serial {
		return // its holder is gone: an orphan
	}
	p.pushMu.Lock()
	ok := c.push(p.slot, s, packRing(i, gen))
	p.pushMu.Unlock()
	if !ok {
		c.add(c.slotWord(s, sOverflow), 1)
		p.st.overflows.Add(1)
	}
	p.st.retiredOut.Add(1)
}

// takeRetired frees the buffer of this process's entry i, retired at gen, if the entry and
// this process's record of it agree and no retain holds it; anything else (a replayed or
// forged ring entry, a corrupted entry) is dropped and counted. An entry whose allocation the
// owner let go (eGone: this process left its socket alive) is not this process's to take in:
// it may still hold the buffer, and the owner lets the entry go.
func (p *Process) takeRetired(i int, gen uint32) {
	ex := &p.ex
	ex.mu.Lock()
	if i < 0 || i >= len(ex.recs) {
		ex.mu.Unlock()
		p.st.dropped.Add(1)
		return
	}
	r := ex.recs[i]
	c := &p.c
	e := p.slot*p.exports + i
	w := c.load(c.entry(e) + eState)
	if r.addr == 0 || r.taking || r.gen != gen || w != packState(gen, eLive|eRetiring) {
		ex.mu.Unlock()
		if d := entryGen(w) - gen; d == 0 && w&eGone == 0 || d >= 1<<31 {
			// Not a retirement this process has seen go by (the entry is not past the
			// generation): a forged or garbled entry. One the entry is past is a delivery
			// taken already (a scan found it before the ring did), or a replay: nothing.
			p.st.dropped.Add(1)
		}
		return
	}
	if c.retained(e) {
		// A retain landed on the mark, which its retirer backs off (tryRetire), or would have:
		// killed first, it left the buffer marked under a retain that holds it. Backed off
		// here too (only one compare-and-swap succeeds): the last release retires it, and if
		// the retain was one backing off itself, finding the mark, the next scan does.
		c.cas(c.entry(e)+eState, w, packState(gen, eLive))
		ex.mu.Unlock()
		return
	}
	ex.recs[i].taking = true
	c.store(c.entry(e)+eState, packState(gen+1, 0))
	pause := p.pauseTake
	ex.mu.Unlock()
	p.giveBack(i, r, pause)
}

// sharer is the process's pinned.Sharer: what its pool asks of frees it cannot finish alone.
type sharer struct{ p *Process }

// FreeOutside frees a peer's buffer this process mapped with Bytes, as FreeHandle does.
func (s sharer) FreeOutside(b []byte) error {
	p := s.p
	if !p.enter() {
		return ErrClosed
	}
	defer p.exit()
	if _, in := p.sp.in(mem.Addr(b), 1); !in {
		return fmt.Errorf("%w: %#x is not memory of the pool", pinned.ErrNotOwned, mem.Addr(b))
	}
	p.ex.mu.Lock()
	h, ok := p.ex.peers[mem.Addr(b)]
	p.ex.mu.Unlock()
	if !ok || uint64(cap(b)) != h.Length {
		if _, in := p.sp.in(mem.Addr(b), 1); in && ok {
			return fmt.Errorf("%w: %d bytes of a buffer of %d", ErrForeignHandle, cap(b), h.Length)
		}
		return fmt.Errorf("%w: %#x is not a buffer this process mapped with Bytes (free a peer's buffer by its handle)", ErrForeignHandle, mem.Addr(b))
	}
	return p.FreeHandle(h)
}

// DropShared lets go the allocation of a buffer this process shared, for its pool's free of
// it: last says it was the buffer's last reference (the pool frees it then).
func (s sharer) DropShared(addr uintptr) (shared, last bool, err error) {
	p := s.p
	if !p.enter() {
		return true, false, ErrClosed // (nothing freed: it may be shared)
	}
	defer p.exit()
	ex := &p.ex
	ex.mu.Lock()
	defer ex.mu.Unlock()
	i, ok := ex.byAddr[addr]
	for ok && ex.recs[i].taking {
		// Let go, and given back to the pool now: this free is a second one of that buffer
		// (which the pool then finds free) or, once the pool has it back, the free of one
		// allocated in its place.
		p.waitTake()
		i, ok = ex.byAddr[addr]
	}
	if !ok {
		return false, false, nil
	}
	r := ex.recs[i]
	c := &p.c
	e := p.slot*p.exports + i
	st := c.entry(e) + eState
	for try := 0; ; try++ {
		if try == casTries {
			return true, false, contended(fmt.Sprintf("the export entry of buffer %#x", addr))
		}
		w := c.load(st)
		if allocGone(r, w) && !r.dropped {
			// The owner let the allocation go as this process left its socket (eGone): the
			// Free is this process's, which still held the buffer (freegone.go).
			ex.recs[i].dropped = true
			if !p.takeGone(i) {
				return true, false, nil
			}
			p.forget(i) // the pool frees the buffer as this call returns
			p.st.retiredIn.Add(1)
			return true, true, nil
		}
		if entryGen(w) != r.gen || w&eFlags != eLive|eAlloc {
			// A double free, as the pool says once it has taken the retirement in: the
			// same sentinel whenever it comes.
			err := fmt.Errorf("%w: buffer %#x freed already (by its handle)", ErrStaleHandle, addr)
			return true, false, errkind.Also(pinned.ErrDoubleFree, err, "ipcpool: ")
		}
		if c.cas(st, w, w&^eAlloc) {
			break
		}
	}
	if !c.tryRetire(e, r.gen) {
		return true, false, nil // others retain it
	}
	c.store(st, packState(r.gen+1, 0))
	p.forget(i) // the pool frees the buffer as this call returns
	p.st.retiredIn.Add(1)
	return true, true, nil
}

// adopted waits, in an owner that adopted the pool, until its scan of the previous owner's
// retains is done (the previous owner's retain bits are slot 0's, as the owner's are). It
// reports false when the owner closed first: the scan will not come.
func (p *Process) adopted() bool {
	if w := p.owner; w != nil {
		select {
		case <-w.scanned:
		case <-w.done:
			return false
		}
	}
	return true
}

// flagRetains sets this process's flagRetains, before its first retain bit. Called with ex.mu
// held.
func (p *Process) flagRetains() error {
	c := &p.c
	for range casTries {
		f := c.slotLoad(p.slot, sFlags)
		if f&flagRetains != 0 || c.cas(c.slotWord(p.slot, sFlags), f, f|flagRetains) {
			return nil
		}
	}
	return contended(fmt.Sprintf("the flags of slot %d", p.slot))
}

// clearUntaken takes back the retain bits a Retain set too late and could not take back (a peer
// rewrote their word without end), but for those a retain of this process now holds, and
// delivers the entries that retires.
func (p *Process) clearUntaken() {
	ex := &p.ex
	ex.mu.Lock()
	if len(ex.untaken) == 0 {
		ex.mu.Unlock()
		return
	}
	var retired []retirement
	left := ex.untaken[:0]
	for _, e := range ex.untaken {
		if p.retainsAny(e) {
			continue // the bit is that retain's now: its Release takes it back
		}
		if _, err := p.c.setRetain(e, p.slot, false); err != nil {
			left = append(left, e)
			continue
		}
		gen := entryGen(p.c.load(p.c.entry(e) + eState))
		if p.c.tryRetire(e, gen) {
			retired = append(retired, retirement{e, gen})
		}
	}
	ex.untaken = left
	ex.mu.Unlock()
	for _, r := range retired {
		p.deliver(r.e, r.gen)
	}
}

// retainsAny reports whether this process holds a retain of entry e, at any generation.
// Called with ex.mu held.
func (p *Process) retainsAny(e int) bool {
	for h := range p.ex.retains {
		if int(h.Entry) == e {
			return true
		}
	}
	return false
}
