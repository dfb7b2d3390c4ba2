package ipcpool

import "github.com/pinmalloc/pinmalloc/internal/mem"

// A process the owner lost alive (it closed its socket, or was cut off) still holds the buffers
// it shared, allocated in its pool; the owner let their allocations go as it left (eGone,
// exports.go), and lets each entry go once no other process retains it, free with eGone kept
// while the process lives. The process's Free of such a buffer is no error: it takes the
// buffer back in its pool once no reference to it is left, as it takes back any buffer it
// freed (retain.go):
//
//	free at gen+1 with eGone   the owner let it go, no reference left: back at once
//	live at gen, eGone         retained by others: the entry is the process's again (eGone
//	                           cleared), retired by the last release and taken in as any
//	retiring at gen, eGone     the last release came: taken in here, once no retain landed
//
// Anything else (a generation further on, eGone lost) is no state the owner writes: the buffer
// stays in the pool, as for an entry a peer rewrote.

// allocGone reports whether the owner let go the allocation of the buffer of r, whose entry's
// state is w (see above).
func allocGone(r exportRec, w uint64) bool {
	return w == packState(r.gen+1, eGone) ||
		entryGen(w) == r.gen && w&(eLive|eAlloc|eGone) == eLive|eGone
}

// takeGone takes back the buffer of entry i, which this process freed after the owner let its
// allocation go (dropped), once no reference to it is left: it reports whether it did (the
// caller frees the block). Called with ex.mu held.
func (p *Process) takeGone(i int) bool {
	ex := &p.ex
	r := ex.recs[i]
	c := &p.c
	e := p.slot*p.exports + i
	st := c.entry(e) + eState
	for range 64 { // (an entry a peer rewrites without end is left to the next scan)
		w := c.load(st)
		switch {
		case w == packState(r.gen+1, eGone):
		case entryGen(w) != r.gen || w&(eLive|eAlloc|eGone) != eLive|eGone:
			return false // no state the owner writes: the buffer stays
		case w&eRetiring == 0:
			// Retained by others: the entry is this process's again, a buffer it freed itself.
			if !c.cas(st, w, w&^eGone) {
				continue
			}
			ex.recs[i].dropped = false
			if !c.tryRetire(e, r.gen) {
				return false // taken in at the last release (scanRetired)
			}
			c.store(st, packState(r.gen+1, 0))
		default:
			if c.retained(e) {
				return false // a release's mark, which a retain landing backs off: the next scan
			}
			if !c.cas(st, w, packState(r.gen+1, 0)) {
				continue
			}
		}
		delete(ex.byAddr, r.addr)
		ex.recs[i] = exportRec{}
		ex.free = append(ex.free, i)
		return true
	}
	return false
}

// freeTaken frees in the pool the buffer of r, taken back by takeGone.
func (p *Process) freeTaken(r exportRec) {
	if err := p.Pool.FreeShared(mem.Bytes(r.addr, r.n)); err != nil {
		p.st.freeErrors.Add(1)
		return
	}
	p.st.retiredIn.Add(1)
}
