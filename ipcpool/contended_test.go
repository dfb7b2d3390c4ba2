package ipcpool

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// A hostile peer may rewrite a word of the control region between every load of it and the
// compare-and-swap that follows (the ctl's peer hook plays it here). No loop on such a word
// may retry without end: each gives up after casTries, with ErrProtocol where a caller asked
// for something, leaving what it did consistent (nothing half done, nothing lost), and the
// owner's mutex is never held for as long as the peer likes. (Before, each of these loops
// spun for as long as the peer rewrote the word.)

// rewriter is a peer rewriting word `word` of c (its bits flip toggled) at each compare-and-
// swap on it once armed, until stopped; tries counts the rewrites.
type rewriter struct {
	armed, stopped atomic.Bool
	tries          atomic.Int64
}

func rewrite(c *ctl, word int, flip uint64) *rewriter {
	r := &rewriter{}
	r.armed.Store(true)
	c.peer = func(i int) {
		if i == word && r.armed.Load() && !r.stopped.Load() {
			r.tries.Add(1)
			c.store(i, c.load(i)^flip)
		}
	}
	return r
}

// bounded runs f, which must end on its own while r rewrites its word: past a deadline, the
// peer stops (so that f ends, and the test with it) and the test fails.
func bounded(t *testing.T, r *rewriter, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		r.stopped.Store(true)
		<-done
		t.Fatalf("%s retried without end (%d tries) while a peer rewrote its word", what,
			r.tries.Load())
	}
	if n := r.tries.Load(); n > casTries+1 {
		t.Errorf("%s retried %d times (casTries %d)", what, n, casTries)
	}
}

func TestSetRetainContendedGivesUp(t *testing.T) {
	l := letGoLayout
	c := newCtl(l, make([]uint64, l.words()))
	const e, slot, other = 2, 1, 2
	i, _ := c.retainWord(e, slot)
	_, otherBit := c.retainWord(e, other)
	r := rewrite(&c, i, otherBit)
	var err error
	bounded(t, r, "setRetain", func() { _, err = c.setRetain(e, slot, true) })
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("setRetain under a peer rewriting its word: %v, want ErrProtocol", err)
	}
	if _, bit := c.retainWord(e, slot); c.load(i)&bit != 0 {
		t.Fatalf("a contended setRetain set its bit")
	}
}

func TestTryRetireContendedGivesUp(t *testing.T) {
	l := letGoLayout
	c := newCtl(l, make([]uint64, l.words()))
	const e, holder = 2, 1
	shareEntry(&c, e, holder, 1, 1, eLive)
	st := c.entry(e) + eState
	r := rewrite(&c, st, eGone)
	var retired bool
	bounded(t, r, "tryRetire", func() { retired = c.tryRetire(e, 1) })
	if w := c.load(st); retired || w&eRetiring != 0 {
		t.Fatalf("a contended tryRetire: retired %v, the entry %#x", retired, w)
	}
	r.stopped.Store(true) // the peer stops: the holder's scan retires it
	if !c.tryRetire(e, 1) {
		t.Fatalf("tryRetire once the peer stopped: not retired")
	}
}

// bareProcess is a process of slot 1 of letGoLayout with no pool behind it, sharing one
// buffer (entry index 0, generation 1, live and allocated): its handle.
func bareProcess(t *testing.T) (*Process, Handle) {
	l := letGoLayout
	const slot = 1
	p := &Process{layout: l, slot: slot, serial: 1, c: newCtl(l, make([]uint64, l.words())),
		ex: newExportState(l.exports)}
	p.ex.recs = []exportRec{{addr: 0x1000, n: 4096, gen: 1}}
	p.ex.byAddr[0x1000] = 0
	e := slot * l.exports
	shareEntry(&p.c, e, slot, 1, 1, eLive|eAlloc)
	return p, Handle{Entry: uint32(e), Gen: 1, Offset: 0, Length: 4096}
}

func TestRetainFlagContendedGivesUp(t *testing.T) {
	p, h := bareProcess(t)
	c := &p.c
	r := rewrite(c, c.slotWord(p.slot, sFlags), flagDevice)
	var err error
	bounded(t, r, "Retain's flagRetains", func() { err = p.Retain(h) })
	if !errors.Is(err, ErrProtocol) || p.retainedEver || len(p.ex.retains) != 0 ||
		c.retained(int(h.Entry)) {
		t.Fatalf("Retain with its flag word rewritten: %v (retained ever %v, retains %v)", err,
			p.retainedEver, p.ex.retains)
	}
	r.stopped.Store(true)
	if err := p.Retain(h); err != nil || p.ex.retains[h] != 1 {
		t.Fatalf("Retain once the peer stopped: %v", err)
	}
}

func TestRetainBitContendedGivesUp(t *testing.T) {
	p, h := bareProcess(t)
	c := &p.c
	i, _ := c.retainWord(int(h.Entry), p.slot)
	_, otherBit := c.retainWord(int(h.Entry), 2)
	r := rewrite(c, i, otherBit)
	var err error
	bounded(t, r, "Retain", func() { err = p.Retain(h) })
	if !errors.Is(err, ErrProtocol) || len(p.ex.retains) != 0 || c.load(i)&^otherBit != 0 {
		t.Fatalf("Retain with its retain word rewritten: %v (retains %v, word %#x)", err,
			p.ex.retains, c.load(i))
	}
}

// A Retain that finds the buffer let go as its bit lands takes the bit back: contended, the bit
// stays this process's to clear (the drainer's scan does), never a retain that keeps the
// buffer for good.
func TestRetainTakeBackContendedGivesUp(t *testing.T) {
	p, h := bareProcess(t)
	c := &p.c
	e := int(h.Entry)
	i, bit := c.retainWord(e, p.slot)
	_, otherBit := c.retainWord(e, 2)
	r := rewrite(c, i, otherBit)
	r.armed.Store(false)
	first := true
	peer := c.peer
	c.peer = func(j int) {
		if j == i && first { // the bit lands as a retirer marks the entry: too late
			first = false
			c.store(c.entry(e)+eState, packState(1, eLive|eRetiring))
			r.armed.Store(true)
			return
		}
		peer(j)
	}
	var err error
	bounded(t, r, "Retain's take-back", func() { err = p.Retain(h) })
	if !errors.Is(err, ErrStaleHandle) || len(p.ex.retains) != 0 {
		t.Fatalf("Retain too late, its take-back contended: %v (retains %v)", err, p.ex.retains)
	}
	r.stopped.Store(true)
	if c.load(i)&bit == 0 {
		t.Fatalf("the bit taken back though the peer rewrote its word")
	}
	p.clearUntaken()
	if c.load(i)&bit != 0 {
		t.Fatalf("the bit left set once the peer stopped: the buffer kept for good")
	}
}

func TestReleaseContendedGivesUp(t *testing.T) {
	p, h := bareProcess(t)
	c := &p.c
	must(t, "Retain", p.Retain(h))
	i, bit := c.retainWord(int(h.Entry), p.slot)
	_, otherBit := c.retainWord(int(h.Entry), 2)
	r := rewrite(c, i, otherBit)
	var err error
	bounded(t, r, "Release", func() { err = p.Release(h) })
	if !errors.Is(err, ErrProtocol) || p.ex.retains[h] != 1 || c.load(i)&bit == 0 {
		t.Fatalf("Release with its retain word rewritten: %v (retains %v, word %#x)", err,
			p.ex.retains, c.load(i))
	}
	r.stopped.Store(true)
	if err := p.Release(h); err != nil || len(p.ex.retains) != 0 || c.load(i)&bit != 0 {
		t.Fatalf("Release once the peer stopped: %v", err)
	}
}

func TestFreeHandleContendedGivesUp(t *testing.T) {
	p, h := bareProcess(t)
	p.serial = 2 // (a retirement, should FreeHandle go through, is delivered to no pool: none here)
	c := &p.c
	st := c.entry(int(h.Entry)) + eState
	r := rewrite(c, st, eGone)
	var err error
	bounded(t, r, "FreeHandle", func() { err = p.FreeHandle(h) })
	if !errors.Is(err, ErrProtocol) || c.load(st)&eAlloc == 0 {
		t.Fatalf("FreeHandle with its entry rewritten: %v (the entry %#x)", err, c.load(st))
	}
}

func TestDropSharedContendedGivesUp(t *testing.T) {
	p, h := bareProcess(t)
	c := &p.c
	st := c.entry(int(h.Entry)) + eState
	r := rewrite(c, st, eGone)
	var shared, last bool
	var err error
	bounded(t, r, "DropShared", func() { shared, last, err = sharer{p}.DropShared(0x1000) })
	if !errors.Is(err, ErrProtocol) || !shared || last || c.load(st)&eAlloc == 0 ||
		p.ex.recs[0].addr == 0 {
		t.Fatalf("DropShared with its entry rewritten: shared %v last %v %v (the entry %#x)",
			shared, last, err, c.load(st))
	}
}

// The owner lets go the retains of a process that left under w.mu: a retain word a peer
// rewrites keeps its slot (its bits are the slot's) until a later round clears them.
func TestDropRetainsContendedKeepsTheSlot(t *testing.T) {
	w, c := bareOwner(letGoLayout)
	const leaver, holder = 1, 2
	w.procs[leaver] = slotState{used: true, active: true, serial: 3}
	c.slotStore(leaver, sSerial, 3)
	c.slotStore(leaver, sFlags, flagRetains)
	e := holder * letGoLayout.exports
	shareEntry(c, e, holder, 1, 1, eLive) // freed by its holder: the retain keeps it
	c.setRetain(e, leaver, true)
	i, bit := c.retainWord(e, leaver)
	_, otherBit := c.retainWord(e, 0)
	r := rewrite(c, i, otherBit)
	bounded(t, r, "the owner's leave", func() { w.leave(leaver, true, watch{pidfd: -1}) })
	w.mu.Lock()
	kept := w.procs[leaver].keeper
	serial := c.slotLoad(leaver, sSerial)
	w.mu.Unlock()
	if c.load(i)&bit == 0 || kept == nil || serial != 3|serialGone {
		t.Fatalf("a leave with a retain word rewritten: word %#x, keeper %v, serial %#x", c.load(i),
			kept, serial)
	}
	r.stopped.Store(true)
	w.c.peer = nil
	w.tickLocked()
	if c.load(i)&bit != 0 || w.procs[leaver].keeper != nil || c.slotLoad(leaver, sSerial) != 0 {
		t.Fatalf("the round after the peer stopped: word %#x, slot %+v", c.load(i), w.procs[leaver])
	}
	if s := c.load(c.entry(e) + eState); s&eRetiring == 0 {
		t.Fatalf("the buffer the retain kept not retired once let go: %#x", s)
	}
}

// settleOrphans clears the retain bits of slots no process holds: a word a peer rewrites is left
// to a later round (the buffer stays pinned meanwhile), under w.mu for a bounded time.
func TestSettleOrphansContendedGivesUp(t *testing.T) {
	w, c := bareOwner(letGoLayout)
	const retainer, holder, stale = 1, 2, 0
	w.procs[0] = slotState{used: true, active: true, serial: 1}
	w.procs[retainer] = slotState{used: true, active: true, serial: 1}
	e := holder * letGoLayout.exports
	shareEntry(c, e, holder, 5, 1, eLive)
	c.setRetain(e, stale, true) // the owner's slot, which its Process does not hold: forged
	w.Process.ex = newExportState(letGoLayout.exports)
	g := newGone(holder, 5, watch{pidfd: -1}, true)
	g.pin(e, span{0, 0}, 1)
	w.goneList = []*gone{g}
	w.table[0] = grantState{state: gOrphan, gone: g, gen: 1}
	i, _ := c.retainWord(e, stale)
	_, otherBit := c.retainWord(e, retainer)
	r := rewrite(c, i, otherBit)
	bounded(t, r, "the owner's round", func() { w.tickLocked() })
	if _, pinned := g.entries[e]; !pinned || w.table[0].state != gOrphan {
		t.Fatalf("an orphan let go with a forged retain bit still set: %+v", w.table[0])
	}
	r.stopped.Store(true)
	c.store(i, 0) // the peer stops, its bits let go
	w.tickLocked()
	if _, pinned := g.entries[e]; pinned {
		t.Fatalf("the orphan still pinned once the peer stopped: %#x", c.load(c.entry(e)+eState))
	}
}

// A process that leaves before it is ready has its slot freed at once, its retain bits let go:
// a bit that stays (its word rewritten by a peer) keeps the slot until a round lets it go.
func TestFreeSlotContendedKeepsTheSlot(t *testing.T) {
	w, c := bareOwner(letGoLayout)
	const leaver, holder = 1, 2
	w.procs[leaver] = slotState{used: true, serial: 3}
	c.slotStore(leaver, sSerial, 3)
	c.slotStore(leaver, sFlags, flagRetains)
	e := holder * letGoLayout.exports
	shareEntry(c, e, holder, 1, 1, eLive)
	c.setRetain(e, leaver, true)
	i, bit := c.retainWord(e, leaver)
	_, otherBit := c.retainWord(e, 0)
	r := rewrite(c, i, otherBit)
	bounded(t, r, "the owner's freeSlot", func() { w.freeSlot(leaver, watch{pidfd: -1}) })
	if c.load(i)&bit == 0 || w.procs[leaver].keeper == nil ||
		c.slotLoad(leaver, sSerial) != 3|serialGone {
		t.Fatalf("a freeSlot with a retain word rewritten: word %#x, slot %+v, serial %#x",
			c.load(i), w.procs[leaver], c.slotLoad(leaver, sSerial))
	}
	r.stopped.Store(true)
	w.tickLocked()
	if c.load(i)&bit != 0 || w.procs[leaver].keeper != nil || c.slotLoad(leaver, sSerial) != 0 {
		t.Fatalf("the round after the peer stopped: word %#x, slot %+v", c.load(i), w.procs[leaver])
	}
}

// An owner that adopts the pool lets go the previous owner's retains (slot 0's, its own): a bit
// that stays (its word rewritten by a peer) is its drainer's to take back, as a Retain's too
// late.
func TestAdoptionContendedLeavesTheBitToTheDrainer(t *testing.T) {
	w, c := bareOwner(letGoLayout)
	w.Process.ex = newExportState(letGoLayout.exports)
	const holder = 2
	w.procs[holder] = slotState{used: true, active: true, serial: 1}
	e := holder * letGoLayout.exports
	shareEntry(c, e, holder, 1, 1, eLive)
	c.setRetain(e, 0, true) // the previous owner's
	w.scan = newGone(0, 1, watch{pidfd: -1}, true)
	i, bit := c.retainWord(e, 0)
	_, otherBit := c.retainWord(e, 1)
	r := rewrite(c, i, otherBit)
	bounded(t, r, "the adoption's end", func() { w.finishAdoption() })
	if c.load(i)&bit == 0 || len(w.Process.ex.untaken) != 1 {
		t.Fatalf("an adoption with a retain word rewritten: word %#x, untaken %v", c.load(i),
			w.Process.ex.untaken)
	}
	r.stopped.Store(true)
	w.Process.clearUntaken()
	s := c.load(c.entry(e) + eState)
	if c.load(i)&bit != 0 || s&eRetiring == 0 || len(w.Process.ex.untaken) != 0 {
		t.Fatalf("the drainer's pass after the peer stopped: word %#x, entry %#x", c.load(i), s)
	}
}

// Slots whose retain bits a peer keeps in a word it rewrites stay kept, round after round
// (TestDropRetainsContendedKeepsTheSlot): each round tries those bits again, and only those. A
// round that looked through the whole export table again for every such slot did work the
// slots times the table under w.mu, every drain interval: a peer rewriting one word held the
// owner's mutex for as long as it liked. (Before, each round did: 8 slots × 1024 entries.)
func TestDropRetainsStuckRetriesOnlyTheStuck(t *testing.T) {
	l := layout{regions: 1, regionSize: 16 << 20, grantSize: 2 << 20, slots: 16, ringCap: 4, exports: 64}
	w, c := bareOwner(l)
	const holder, leavers, rounds = 15, 8, 10
	e := holder * l.exports
	shareEntry(c, e, holder, 1, 1, eLive) // freed by its holder: the retains keep it
	for s := 1; s <= leavers; s++ {
		w.procs[s] = slotState{used: true, active: true, serial: 3}
		c.slotStore(s, sSerial, 3)
		c.slotStore(s, sFlags, flagRetains)
		c.setRetain(e, s, true)
	}
	i, _ := c.retainWord(e, 1)
	_, otherBit := c.retainWord(e, 0)
	r := rewrite(c, i, otherBit) // one word, every leaver's bit in it
	for s := 1; s <= leavers; s++ {
		w.leave(s, true, watch{pidfd: -1})
		if w.procs[s].keeper == nil {
			t.Fatalf("slot %d, its retain bit stuck, not kept", s)
		}
	}
	w.looked = 0
	for range rounds {
		w.tickLocked()
	}
	if max := rounds * leavers; w.looked > max {
		t.Fatalf("%d rounds with %d slots' bits stuck in one word looked at %d entries (at most %d: "+
			"the stuck ones)", rounds, leavers, w.looked, max)
	}
	r.stopped.Store(true)
	w.c.peer = nil
	w.tickLocked()
	for s := 1; s <= leavers; s++ {
		if w.procs[s].keeper != nil || c.slotLoad(s, sSerial) != 0 {
			t.Fatalf("slot %d kept once the peer stopped: %+v", s, w.procs[s])
		}
	}
	if c.retained(e) || c.load(c.entry(e)+eState)&eRetiring == 0 {
		t.Fatalf("the buffer the retains kept: bits left or not retired (state %#x)", c.load(c.entry(e)+eState))
	}
}

// TestFreeEntryFlippedGivesUp: Share's freeEntry, every index of its part of the table used,
// looks again for entries let go, then takes one if its state still says free. A peer that
// writes the entry free before each look and busy before each take kept it looking without end,
// ex.mu held. It gives up after casTries looks now, finding none.
func TestFreeEntryFlippedGivesUp(t *testing.T) {
	l := letGoLayout
	c := newCtl(l, make([]uint64, l.words()))
	const slot = 1
	p := &Process{layout: l, slot: slot, c: c}
	p.ex.recs = make([]exportRec, l.exports) // every index used once; index 0 let go since
	for i := 1; i < l.exports; i++ {
		p.ex.recs[i].addr = uintptr(i) << 12
	}
	st := p.c.entry(slot*l.exports) + eState
	p.c.store(st, eLive)
	r := &rewriter{}
	r.armed.Store(true)
	took := false // the next load of the entry is the take's: the peer makes it busy
	p.c.peer = func(i int) {
		if i != st || r.stopped.Load() {
			return
		}
		if took { // a take foiled: what bounded counts
			r.tries.Add(1)
			p.c.store(i, eLive)
		} else {
			p.c.store(i, 0)
		}
		took = !took
	}
	var ok bool
	bounded(t, r, "freeEntry", func() { _, _, ok = p.freeEntry() })
	if ok {
		t.Fatal("freeEntry took an entry a peer keeps busy at every take")
	}
}
