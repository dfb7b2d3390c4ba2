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
// record is taking then: the caller frees the block and forgets the record). Called with ex.mu
// held.
func (p *Process) takeGone(i int) bool {
	ex := &p.ex
	r := ex.recs[i]
	c := &p.c
	e := p.slot*p.exports + i
	st := c.entry(e) + eState
	for range casTries { // (an entry a peer rewrites without end is left to the next scan)
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
		ex.recs[i].taking = true
		return true
	}
	return false
}

// giveBack frees in the pool the buffer of entry i, record r, which a take-in marked taking
// (takeRetired, takeGone's scan), and then forgets the record. Until the FreeShared returns,
// the block at r.addr is the buffer let go; after it, another allocation may be: a call that
// finds the record by its address meanwhile waits (waitTake), and a second free of the buffer
// is refused (the pool finds it free), never a free that leaves the FreeShared a new buffer
// to free.
//
// The locks: w.mu is taken before ex.mu (settleOrphans calls retainsEntry), and the pool's
// FreeShared may take w.mu (after Close, the arena's Release), so ex.mu is not held across it.
// A call waiting for a take-in holds no lock then (ex.mu is let go while it waits): it is a
// user's call (Handle, the pool's Free asking DropShared, which the pool asks with no lock of
// its own held), and nothing under w.mu, drainMu or a lock of the pool looks a buffer up by
// its address. So the take-in, which waits for none of the calls, always ends, and wakes them.
func (p *Process) giveBack(i int, r exportRec, pause func(bool)) {
	if pause != nil {
		pause(false)
	}
	err := p.Pool.FreeShared(mem.Bytes(r.addr, r.n))
	if pause != nil {
		pause(true)
	}
	p.ex.mu.Lock()
	p.forget(i)
	p.ex.mu.Unlock()
	if err != nil {
		p.st.freeErrors.Add(1)
		return
	}
	p.st.retiredIn.Add(1)
}

// forget drops the record of entry i, whose buffer goes back to the pool, and wakes the calls
// waiting for a take-in (waitTake): the index is free again. Called with ex.mu held.
func (p *Process) forget(i int) {
	ex := &p.ex
	delete(ex.byAddr, ex.recs[i].addr)
	ex.recs[i] = exportRec{}
	ex.free = append(ex.free, i)
	if ex.forgot != nil {
		close(ex.forgot)
		ex.forgot = nil
	}
}

// waitTake waits until a take-in forgets a record (any: the caller looks again). Called with
// ex.mu held, which it lets go while it waits.
func (p *Process) waitTake() {
	ex := &p.ex
	if p.waiting != nil {
		p.waiting()
	}
	if ex.forgot == nil {
		ex.forgot = make(chan struct{})
	}
	ch := ex.forgot
	ex.mu.Unlock()
	<-ch
	ex.mu.Lock()
}
