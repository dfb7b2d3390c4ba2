package ipcpool

import "time"

// What the owner does when a process leaves its slot: it detached (it synchronized its
// device and unmapped the pool first), died, or was cut off (garbage, a failed handshake).
// What it held comes back as it safely can (table.go): its buffers nobody retains are let go
// now, the grants under buffers others retain wait for them, and a process that did not detach
// keeps the rest (limbo) until it has exited. Its retains are let go now if it has exited (or
// detached); a process still alive keeps them until it exits, as its grants, since it may go on
// reading and writing what it retains. Its slot is free at once, but for a process alive that
// holds something (grants, buffers others retain, retains): the slot is kept (procs' keeper) until
// the process exits, and no process takes it meanwhile (its retain bits are the slot's). A
// process kept so is not attached, and no fence waits for it, as for any process gone from its
// socket. It may go on sharing buffers of its grants and retaining others' until it exits: at
// its exit those are let go as its leave let go the rest.
//
// The owner's record of it is in Go memory; the control region says as much for an owner that
// adopts the pool should this one die first (adopt.go): the slot's serial has serialGone added,
// its line keeps the pid and start time, and the words of its grants in limbo or orphaned name
// the slot (an orphan's too: the last release of its buffer may come while no owner runs, and
// the grant stays the process's after it).

// leave takes back what the process in slot left. wa watches the process (none: it has
// exited, or it detached); leave owns it.
func (w *Owner) leave(slot int, detached bool, wa watch) { w.leaveSlot(slot, detached, false, wa) }

// leaveSlot is leave; fromWords says that only the control region's words gave the process what
// it holds: a process of the previous owner given up for not rejoining in time (expireRejoins).
// A process still to rejoin may claim that, and once the process has exited it waits unclaimed
// while one may (claim.go), as what an adoption's scan keeps.
func (w *Owner) leaveSlot(slot int, detached, fromWords bool, wa watch) {
	w.mu.Lock()
	st := &w.procs[slot]
	g := newGone(slot, st.serial, wa, detached || wa.none())
	g.fromWords = fromWords
	if g.exited {
		g.watch.stop()
	}
	var retired []retirement
	if w.c.slotLoad(slot, sFlags)&flagRetains != 0 {
		// Until it exits (tick), or, its bits not all let go, until a round lets them go.
		g.retains = true
		if g.exited {
			retired, g.stuck = w.dropRetains(slot, nil)
			g.retains = len(g.stuck) > 0
		}
	}
	left := w.dropEntries(g)
	if g.retains || !g.exited && (len(g.entries) > 0 || left || w.heldBy(slot) > 0) {
		// Before the grant words change: an owner that adopts the pool reads a word of the
		// slot as the kept process's, in limbo or held (adopt.go).
		st.keeper = g
		w.c.slotStore(slot, sSerial, st.serial|serialGone)
	}
	var fenced []int
	pending := fromWords && w.rejoinsPending()
	for i := range w.table {
		t := &w.table[i]
		if t.state != gHeld || t.slot != slot {
			continue
		}
		switch {
		case g.pins[i] > 0:
			*t = grantState{state: gOrphan, gone: g, gen: t.gen + 1}
			w.publish(i)
		case !g.exited:
			*t = grantState{state: gLimbo, gone: g, gen: t.gen + 1}
			w.publish(i)
		case pending:
			w.unclaim(i)
		default:
			fenced = append(fenced, i)
		}
	}
	w.fence(fenced)
	if len(g.entries) > 0 || g.retains || st.keeper == g {
		w.goneList = append(w.goneList, g)
	} else {
		// Nothing to wait for, alive or not: no record of it, nor a watch (a process that
		// attached and hung up again and again, alive, would have grown them without end).
		g.watch.stop()
	}
	if st.keeper == nil {
		w.c.slotStore(slot, sSerial, 0)
	}
	st.used, st.active, st.conn = false, false, nil // its connection is its session's to close
	w.cond.Broadcast()
	w.mu.Unlock()
	for _, r := range retired {
		w.Process.deliver(r.e, r.gen)
	}
}

type retirement struct {
	e   int
	gen uint32
}

// dropRetains clears slot's retain bit in the entries only (nil: every entry) and returns the
// entries that retires, and those whose bit stayed (a word another process rewrote without end:
// setRetain): the slot is not free then, the bits being its, and a later round tries those
// again, and only those (gone.stuck): the process has exited, and no other takes its slot
// meanwhile, so no bit of the slot's is set since but by a peer's forgery, which may come at any
// time anyway. (A round that looked through the whole table for every slot so kept would do the
// slots times the table's work under w.mu, every round, for as long as a peer rewrote one word.)
// Called with w.mu held.
func (w *Owner) dropRetains(slot int, only []int) (out []retirement, stuck []int) {
	c := &w.c
	n := w.slots * w.exports
	if only != nil {
		n = len(only)
	}
	for k := range n {
		e := k
		if only != nil {
			e = only[k]
		}
		w.looked++
		if changed, err := c.setRetain(e, slot, false); err != nil || !changed {
			if err != nil {
				stuck = append(stuck, e)
			}
			continue
		}
		gen := entryGen(c.load(c.entry(e) + eState))
		if c.tryRetire(e, gen) {
			out = append(out, retirement{e, gen})
		}
	}
	return out, stuck
}

// dropEntries lets go the allocations of g's process's entries: those no other process
// retains are free at once (their memory goes back with the grants), the others pin their
// grants (g.pins). Entries g pins already are left to settleOrphans. A buffer the process
// freed itself before it left is still in its pool until the entry retires, and a process
// alive (not g.exited) takes such an entry in itself (its scan), as any retirement: the owner
// leaves it to it (its entries otherwise move on under the owner's frees: the process would
// free the block never, or the owner a buffer it shared again); left says there is one. Called
// with w.mu held.
func (w *Owner) dropEntries(g *gone) (left bool) {
	for i := range w.exports {
		e := g.slot*w.exports + i
		if _, pinned := g.entries[e]; pinned {
			continue
		}
		left = w.dropEntry(g, e) || left
	}
	return left
}

// entrySpan returns the grants under the buffer entry e names (a peer's words: spanOf).
func (w *Owner) entrySpan(e int) (span, bool) {
	return w.spanOf(w.c.load(w.c.entry(e)+eOffset), w.c.load(w.c.entry(e)+eLength))
}

// dropEntry is dropEntries of entry e; it reports whether it left the entry to its process.
// Called with w.mu held.
func (w *Owner) dropEntry(g *gone, e int) (left bool) {
	c := &w.c
	st := c.entry(e) + eState
	for range casTries { // (an entry a peer rewrites without end is left as it is)
		w0 := c.load(st)
		if w0&eLive == 0 || c.load(c.entry(e)+eHolder) != packHolder(g.slot, g.serial) {
			return false
		}
		if w0&(eAlloc|eRetiring) == eAlloc {
			// eGone: the process may live on, its buffer allocated in its pool (exports.go).
			if !c.cas(st, w0, w0&^eAlloc|eGone) {
				continue
			}
			w0 = w0&^eAlloc | eGone
		}
		gen := entryGen(w0)
		if !g.exited && w0&eGone == 0 {
			// Freed by the process, alive: retired (here, or by the last release), it takes the
			// entry in; retained, it waits for the last release, pinned.
			if w0&eRetiring != 0 || c.tryRetire(e, gen) {
				return true
			}
			if !c.retained(e) {
				continue // changed meanwhile: look again
			}
			if sp, ok := w.entrySpan(e); ok && w.allBelong(sp, g) {
				g.pin(e, sp, gen)
			}
			return true
		}
		free := g.freeFlags()
		if c.letGo(e, w0, free) {
			return false
		}
		if !c.retained(e) {
			continue // changed meanwhile: look again
		}
		// Retained by others: the buffer stays, and every grant under it, if they are the
		// process's (the entry's place is a peer's words: grants it did not hold pin nothing).
		if sp, ok := w.entrySpan(e); ok && w.allBelong(sp, g) {
			g.pin(e, sp, gen)
			return false
		}
		if now := c.load(st); entryGen(now) == gen {
			c.cas(st, now, packState(gen+1, free))
		}
		return false
	}
	return false
}

// watch runs the owner's round every interval until stopWatch.
func (w *Owner) watch(every time.Duration) {
	defer close(w.watched)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-w.watchEnd:
			return
		case <-t.C:
			w.expireRejoins()
			w.tick()
			w.rounds.Add(1)
		}
	}
}

func (w *Owner) stopWatch() {
	close(w.watchEnd)
	<-w.watched
}

// expireRejoins gives up the processes of the previous owner that did not rejoin in time: a
// process still alive keeps its memory until it exits (limbo), a dead one's comes back. A
// slot whose rejoin began in time (rejoining) waits for that handshake to end, within its own
// deadline, and no slot is given up while a connection that came in time has not said yet
// which it names (unnamed: its session ran late), within that connection's deadline: the
// rounds after look again.
func (w *Owner) expireRejoins() {
	w.mu.Lock()
	if w.rejoinBy.IsZero() || time.Now().Before(w.rejoinBy) {
		w.mu.Unlock()
		return
	}
	if w.unnamedInTime() {
		w.mu.Unlock()
		return
	}
	var late []int
	waiting := w.claiming > 0 // (rejoinsPending: what the words hold back waits for its claims)
	for s := range w.procs {
		st := &w.procs[s]
		switch {
		case !st.rejoin:
		case st.rejoining > 0:
			waiting = true
		default:
			st.rejoin = false
			late = append(late, s)
		}
	}
	if !waiting {
		w.rejoinBy = time.Time{}
	}
	w.mu.Unlock()
	for _, s := range late {
		w.leaveSlot(s, false, true, watchSlot(&w.c, s))
	}
}

// watchSlot watches the process the line of slot s names by its pid and start time (a peer's
// words: a pid out of range, dead, or reused since names a process that has exited).
func watchSlot(c *ctl, s int) watch {
	pid, start := c.slotLoad(s, sPid), c.slotLoad(s, sStart)
	if pid > 0 && pid < 1<<22 && startTime(int(pid)) == start {
		return watchProcess(int(pid))
	}
	return watch{pidfd: -1}
}

// belongs reports whether grant gr is the memory of g's process: held by it, or kept for it
// (an adoption's scan: adopt.go). Called with w.mu held.
func (w *Owner) belongs(gr int, g *gone) bool {
	t := &w.table[gr]
	return t.state == gHeld && t.slot == g.slot && t.serial == g.serial || t.gone == g && t.state != gFree
}

// allBelong reports whether every grant of sp belongs to g's process. Called with w.mu held.
func (w *Owner) allBelong(sp span, g *gone) bool {
	for gr := sp.first; gr <= sp.last; gr++ {
		if !w.belongs(gr, g) {
			return false
		}
	}
	return true
}

// tick is the owner's round: processes gone that have exited (their retains let go, their
// slots free), orphans whose last retain went, fences passed; and it wakes the grant requests
// waiting, which look again (a fence word or an answer to an ask changes in the control
// region, where nothing signals it).
func (w *Owner) tick() {
	if w.scan != nil {
		w.finishAdoption()
	}
	for _, r := range w.tickLocked() {
		w.Process.deliver(r.e, r.gen) // not under w.mu: the owner's own frees take it
	}
}

// tickLocked is tick's round under w.mu; it returns the entries retired by the retains of the
// processes gone that exited, to deliver.
func (w *Owner) tickLocked() []retirement {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.cond.Broadcast()
	w.settleUnclaimed()
	// What only the words gave a process gone (fromWords) a process still to rejoin may claim:
	// once that one has exited, it waits unclaimed while one may (claim.go), as the scan's.
	pending := w.rejoinsPending()
	var retired []retirement
	w.lookForExits()
	grants := w.grantsOfGone()
	kept := w.goneList[:0]
	for k, g := range w.goneList {
		if g.exited && w.keeps(g) {
			// Its retains are those its slot's line says it may hold now: it lived on after it
			// left, and may have taken its first retain since.
			if g.retains || w.c.slotLoad(g.slot, sFlags)&flagRetains != 0 {
				// Before settleOrphans: what it retained of its own buffers settles in this
				// round.
				// Every entry the first time (it may have retained anything until it exited),
				// then the entries whose bit stayed.
				r, stuck := w.dropRetains(g.slot, g.stuck)
				retired = append(retired, r...)
				g.stuck = stuck
				if len(stuck) > 0 {
					// A bit of its stayed (a peer rewrote the word): the slot stays kept,
					// and the next round tries again.
					g.retains = true
					kept = append(kept, g)
					continue
				}
				g.retains = false
			}
			// The buffers it shared since it left, let go as its leave let go those it had
			// shared before.
			w.dropEntries(g)
			// Its grants in limbo are fenced below, in this round (w.mu held throughout), but
			// for those under a buffer others retain (orphaned); the words of those orphaned
			// name the slot no more (the next process's).
			w.procs[g.slot].keeper = nil
			w.c.slotStore(g.slot, sSerial, 0)
			for _, i := range grants[k] {
				if t := &w.table[i]; t.gone == g {
					if t.state == gLimbo && g.pins[i] > 0 {
						*t = grantState{state: gOrphan, gone: g, gen: t.gen + 1}
					}
					w.publish(i)
				}
			}
		}
		w.settleOrphans(g)
		var fenced []int
		for _, i := range grants[k] {
			if t := w.table[i]; t.gone == g && (t.state == gLimbo || t.state == gOrphan) && g.exited && g.pins[i] == 0 {
				if pending && g.fromWords {
					w.unclaim(i)
				} else {
					fenced = append(fenced, i)
				}
			}
		}
		w.fence(fenced)
		if len(g.entries) > 0 || !g.exited {
			kept = append(kept, g)
		}
	}
	clear(w.goneList[len(kept):])
	w.goneList = kept
	w.unfence()
	return retired
}

// grantsOfGone returns the grants that name each process of goneList that has exited
// (grantState.gone), by its place there, in order; none for one alive, whose grants the round
// does not touch (only an exited process's grants are fenced, orphaned or unclaimed). One pass
// over the table for them all keeps the round's cost that of the table, not of the table times
// the processes gone, and none is made while every process gone lives on (16 processes left
// alive in a pool of 32,768 grants cost 2 ms a round with a pass each, every millisecond, 75 µs
// with one, 4 – 5 µs with none: BenchmarkOwnerRound). No
// grant comes to name one of them during the round (it moves away only: an orphan's, fenced,
// unclaimed). The slices are reused at the next round. Called with w.mu held.
func (w *Owner) grantsOfGone() [][]int {
	n := len(w.goneList)
	for len(w.ofGone) < n {
		w.ofGone = append(w.ofGone, nil)
	}
	of := w.ofGone[:n]
	exited := false
	for k, g := range w.goneList {
		g.place = k
		of[k] = of[k][:0]
		exited = exited || g.exited
	}
	if !exited {
		return of
	}
	for i := range w.table {
		if g := w.table[i].gone; g != nil && g.exited && g.place < n && w.goneList[g.place] == g {
			of[g.place] = append(of[g.place], i)
		}
	}
	return of
}

// settleOrphans frees the entries of g's process that were retired since (their last retain
// let go, delivered to no one: the holder is gone) and unpins their grants. An entry past the
// generation it was pinned at was let go since, and one the process freed itself while alive
// is its to take in (dropEntries): neither is the owner's to free. Called with w.mu held.
func (w *Owner) settleOrphans(g *gone) {
	c := &w.c
	var stale [4]uint64
	if len(g.entries) > 0 {
		stale = w.staleRetainBits()
	}
	for e, r := range g.entries {
		w0 := c.load(c.entry(e) + eState)
		if w0&eLive == 0 || entryGen(w0) != r.gen {
			g.unpin(e) // let go since: by its holder alive, which took it in, or by garbage
			continue
		}
		// A bit of a slot no process holds is no retain: its process left with its
		// flagRetains cleared (dropRetains skipped it), or a peer forged it. Cleared, the entry
		// retires here if no other bit is left (as tryRetire, its allocation aside: its holder
		// is gone), or the buffer and its grants would wait for a Release that never comes.
		stale, left := stale, false
		if i, bit := c.retainWord(e, 0); c.load(i)&bit != 0 && !w.Process.retainsEntry(e, r.gen) {
			stale[0] |= bit // the owner's own bit, which its Process does not hold: forged
		}
		for j, m := range stale {
			if m == 0 {
				continue
			}
			if !c.clearBits(c.entry(e)+eRetain+j, m) {
				left = true
			}
		}
		if left {
			continue // a word a peer rewrites without end: the entry stays pinned, to a later round
		}
		if w0&eGone == 0 && !g.exited {
			// Freed by its process, alive: retired now if no retain is left, for it to take in.
			c.tryRetire(e, r.gen)
			continue
		}
		free := g.freeFlags()
		if c.letGo(e, w0, free) {
			g.unpin(e)
		}
	}
}

// staleRetainBits returns, word by word of an entry's retain bits, the bits of slots no process
// holds, nor keeps (past the slots too): no retain can be held by them, and no process can
// take such a slot while w.mu is held. Called with w.mu held.
func (w *Owner) staleRetainBits() (m [4]uint64) {
	m = [4]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)} // past the slots: all
	for s := range min(len(w.procs), 4*64) {
		if w.procs[s].used || w.procs[s].keeper != nil {
			m[s/64] &^= 1 << (s % 64)
		}
	}
	return m
}

// retainsEntry reports whether this process holds a retain of entry e at generation gen (its
// record in Go memory: a Retain sets its bit and records it under ex.mu).
func (p *Process) retainsEntry(e int, gen uint32) bool {
	p.ex.mu.Lock()
	defer p.ex.mu.Unlock()
	for h := range p.ex.retains {
		if int(h.Entry) == e && h.Gen == gen {
			return true
		}
	}
	return false
}

// clearBits clears bits m of word i, and reports whether it did (not when another process
// rewrites the word as often as this one tries: casTries).
func (c *ctl) clearBits(i int, m uint64) bool {
	for range casTries {
		old := c.load(i)
		if old&m == 0 || c.cas(i, old, old&^m) {
			return true
		}
	}
	return false
}
