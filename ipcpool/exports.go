package ipcpool

import "fmt"

// The export table: one entry (a cache line) for each buffer a process shared with a Handle,
// in the part of the table of the process's slot. An entry names one allocation: its
// generation changes each time the entry is let go, so a handle of a buffer freed since (or
// freed, or replayed, by a second FreeHandle) is refused, every time, and never names the
// buffer allocated in its place.
//
//	word 0  state: gen<<32 | eLive | eAlloc | eRetiring | eGone
//	word 1  the buffer's offset in the pool
//	word 2  its length
//	word 3  its holder: slot | serial<<16 (the process in the slot when it was shared)
//	word 4-7  retains: one bit per slot (Retain)
//
// A buffer is referenced by its allocation (eAlloc: what a Free or FreeHandle lets go, once)
// and by the processes that retained it (a bit each; a process counts its own retains in Go
// memory and holds its bit while it has one). The last reference to go retires the entry:
// the compare-and-swap to eRetiring decides, among racing processes, the one that does, and
// that one delivers the entry to its holder (a ring entry, or its overflow word when the ring
// is full; itself when it holds it), which frees the block and sets the entry free at the
// next generation. A retain that races with the retirement either lands first (the retirer
// sees its bit and backs off) or finds eRetiring and fails. The holder, and no one else,
// frees the block, and only for an entry still retiring at the generation it recorded, with no
// retain bit: a mark a retirer killed before its back-off left, the holder backs off itself.
//
// When a process goes (it died, or was cut off), the owner clears its retain bits in every
// entry (retiring what they kept alive) and lets go the allocations of its own entries; the
// entries that others still retain keep their buffers, and the grants under them, until the
// last of those is let go (orphans). An allocation the owner lets go so is marked eGone: the
// process may live on (cut off) with the buffer still allocated in its pool, and it takes in
// no retirement of such an entry (its pool frees only what it freed); the owner lets the entry
// go after the last release, free with eGone kept while the process lives. The process's Free
// of such a buffer succeeds: its pool frees the buffer at once if the owner let the entry go
// (the free entry's eGone says the owner did, no reference left), or else takes the entry back
// as one it freed itself (eGone cleared), retired by the last release and taken in as any.
//
// Every word here may be a peer's garbage: a reader checks an entry's generation, offset,
// length and holder against the handle (and the holder against its own records) before it
// trusts any of it, and a retirement is acted on only by a holder whose records agree.
const (
	eLive     = 1
	eAlloc    = 2
	eRetiring = 4
	eFlags    = eLive | eAlloc | eRetiring
	eGone     = 8 // the allocation let go by the owner as its holder left (not a flag of eFlags)
)

const (
	eState  = 0
	eOffset = 1
	eLength = 2
	eHolder = 3
	eRetain = 4
)

func entryGen(w uint64) uint32 { return uint32(w >> 32) }
func packState(gen uint32, flags uint64) uint64 {
	return uint64(gen)<<32 | flags
}
func packHolder(slot int, serial uint64) uint64 { return uint64(slot) | serial<<16 }

// retainWord returns the word of entry e holding slot s's retain bit, and the bit.
func (c *ctl) retainWord(e, s int) (int, uint64) {
	return c.entry(e) + eRetain + s/64, 1 << (s % 64)
}

// retained reports whether any process holds a retain of entry e.
func (c *ctl) retained(e int) bool {
	w := c.entry(e) + eRetain
	return c.load(w)|c.load(w+1)|c.load(w+2)|c.load(w+3) != 0
}

// setRetain sets (on) or clears slot s's retain bit of entry e, and reports whether it changed.
// A word that another process rewrites as often as this one tries (casTries) is left as it
// was: the error (ErrProtocol) says so.
func (c *ctl) setRetain(e, s int, on bool) (bool, error) {
	i, bit := c.retainWord(e, s)
	for range casTries {
		old := c.load(i)
		v := old &^ bit
		if on {
			v = old | bit
		}
		if v == old {
			return false, nil
		}
		if c.cas(i, old, v) {
			return true, nil
		}
	}
	return false, contended(fmt.Sprintf("the retain bits of entry %d", e))
}

// contended is the error of a compare-and-swap loop on the word(s) what names that lost
// casTries times in a row: another process rewrites them without end.
func contended(what string) error {
	return fmt.Errorf("%w: %s rewritten by another process as fast as this one changes them "+
		"(%d tries): nothing done", ErrProtocol, what, casTries)
}

// tryRetire retires entry e at generation gen if no reference to it is left, and reports
// whether this call did: the caller must then deliver it (Process.deliver). An entry another
// process rewrites as often as this one tries (casTries) is left unretired: its holder's scan
// (scanRetired), or the owner's round for a holder gone, retires it later.
func (c *ctl) tryRetire(e int, gen uint32) bool {
	i := c.entry(e) + eState
	for range casTries {
		w := c.load(i)
		if entryGen(w) != gen || w&eFlags != eLive || c.retained(e) {
			return false
		}
		if !c.cas(i, w, w|eRetiring) {
			continue
		}
		if !c.retained(e) {
			return true
		}
		// A retain landed between the check and the mark: it keeps the buffer. Back off; the
		// retain either sees eRetiring and lets go (then tries again itself) or has it.
		if !c.cas(i, w|eRetiring, w) {
			return false // changed meanwhile by someone's garbage: leave it to its holder's scan
		}
	}
	return false
}

// letGo frees entry e, live at state w0, for the owner, which lets it go in place of its
// holder (gone: it cannot take the entry in), as a tryRetire and the holder's take-in would,
// its allocation aside; the free entry has flags free (eGone: its holder, alive, still holds
// the buffer, and frees it in its pool at its Free: exports.go). It reports whether it did: not
// while a retain holds it, nor once the entry changed since w0 (a retain landing past
// another's mark backs that mark off). The free is a compare-and-swap from the entry's state,
// never a store over what a process alive wrote since: a retain that landed, or a buffer that
// the holder took in and shared again.
func (c *ctl) letGo(e int, w0, free uint64) bool {
	i := c.entry(e) + eState
	r := w0 | eRetiring
	if w0&eRetiring == 0 && (c.retained(e) || !c.cas(i, w0, r)) {
		return false
	}
	if c.retained(e) {
		// A retain landed between the check and the mark (it keeps the buffer), or, the entry
		// marked by another process's tryRetire, one landed that its retirer will back off for.
		if w0&eRetiring == 0 {
			c.cas(i, r, w0)
		}
		return false
	}
	return c.cas(i, r, packState(entryGen(w0)+1, free))
}
