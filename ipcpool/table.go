package ipcpool

import (
	"context"
	"fmt"
	"math"
	"time"
)

// The owner's grant table. The owner keeps it in Go memory, where no peer can write, and
// publishes each change in the control region's grant words for the others to read. A grant
// is, in order of its life:
//
//	free     the owner may grant it
//	held     by the process in a slot (its arena's region, or part of one)
//	limbo    of a process gone from its socket without a detach (it died, or was cut off):
//	         it may still write its memory until it has exited (its watch says when)
//	orphan   of a process gone, under buffers it shared that others still retain: kept until
//	         the last of those is let go (Retain), then on as the rest
//	fenced   free once every process with a CUDA device has passed the fence: a copy one of
//	         them queued into a buffer of the process gone (got by handle) may still run
//
// A grant request that finds no room waits, at most its deadline, while memory may come back:
// fenced grants (a fence completes within a drain tick of every live process), grants in
// limbo, and the empty grants of the processes the owner asks for them (sAsk). It fails
// with ErrPoolFull at once when none of that can help: the pool is full of live buffers.

type grantState struct {
	state  int    // gFree, gFenced, gLimbo, gOrphan, or held (-1)
	slot   int    // the holder, when held
	serial uint64 // the holder's serial when held
	gone   *gone  // the process gone, in limbo or orphaned
	gen    uint64 // the grant's generation: bumped at each change of hands
}

const gHeld = -1

// gone is the owner's record of a process that left its slot with grants (or retained
// buffers of its own others hold) still to come back.
type gone struct {
	slot   int
	serial uint64
	watch  watch // until it has exited
	exited bool  // its watch said so (or it detached: it unmapped the pool first)
	// retains: it may hold retain bits (flagRetains), let go once it exits.
	retains bool
	// stuck: the entries whose retain bit of its slot stayed as its bits were let go (a word a
	// peer rewrote): the rounds after try those again, and only those (dropRetains); nil
	// while no look through every entry has been made since it exited.
	stuck []int
	// fromWords: what it holds, only the control region's words gave it (an adoption's
	// scan), or a process refused at its rejoin claimed: a rejoin may claim it (claim.go), and
	// once the process has exited it waits unclaimed while a process may still rejoin.
	fromWords bool
	// pins counts, per grant, the entries of the process's that others still retain.
	pins    map[int]int
	entries map[int]pinRec // entry -> the grants under its buffer, of those still retained
	place   int            // its place in goneList at the owner's last round (grantsOfGone)
}

// pinRec is what pins an entry of a process gone: the grants under its buffer, and the entry's
// generation then (once the entry is past it, it is no longer the buffer that pinned them).
type pinRec struct {
	sp  span
	gen uint32
}

// keeps reports whether g is the process its slot is kept for (procs' keeper): it left alive
// holding something (grants, buffers others retain, retains), and its slot is kept until it
// exits, marked so in the control region (serialGone), with the words of its grants in limbo or
// orphaned naming the slot, so that an owner that adopts the pool keeps them. Called with w.mu
// held.
func (w *Owner) keeps(g *gone) bool {
	return g != nil && g.slot > 0 && g.slot < len(w.procs) && w.procs[g.slot].keeper == g
}

// span is the grants [first, last] under one buffer (a buffer may be wider than a grant).
type span struct{ first, last int }

func newGone(slot int, serial uint64, wa watch, exited bool) *gone {
	return &gone{slot: slot, serial: serial, watch: wa, exited: exited, pins: map[int]int{},
		entries: map[int]pinRec{}}
}

// pin records entry e, retained by others at generation gen, as keeping the grants of sp.
func (g *gone) pin(e int, sp span, gen uint32) {
	for gr := sp.first; gr <= sp.last; gr++ {
		g.pins[gr]++
	}
	g.entries[e] = pinRec{sp, gen}
}

// freeFlags returns the flags of an entry of g's process that the owner lets go (letGo):
// eGone while the process lives (the entry's eGone: it holds the buffer still, exports.go), 0
// once it has exited, or for no process (g nil).
func (g *gone) freeFlags() uint64 {
	if g != nil && !g.exited {
		return eGone
	}
	return 0
}

// unpin forgets entry e: its grants are no longer kept for it.
func (g *gone) unpin(e int) {
	sp := g.entries[e].sp
	delete(g.entries, e)
	for gr := sp.first; gr <= sp.last; gr++ {
		if g.pins[gr]--; g.pins[gr] <= 0 {
			delete(g.pins, gr)
		}
	}
}

// spanOf returns the grants under the buffer [off, off+n) named by an export entry (a peer's
// words), or false when it is not inside one region of the pool.
func (l layout) spanOf(off, n uint64) (span, bool) {
	if !l.sameRegion(off, n) {
		return span{}, false
	}
	return span{l.grantOf(uintptr(off)), l.grantOf(uintptr(off + n - 1))}, true
}

// publish writes grant g's word.
func (w *Owner) publish(g int) {
	t := &w.table[g]
	slot, state := -1, t.state
	switch {
	case state == gHeld:
		slot, state = t.slot, 0
	case (state == gLimbo || state == gOrphan) && w.keeps(t.gone):
		slot = t.gone.slot
	}
	w.c.store(w.c.grantWord(g), packGrant(t.gen, state, slot))
}

// grantRun gives slot n contiguous free grants of one region and returns the first, or false.
// Called with w.mu held.
func (w *Owner) grantRun(slot, n int) (int, bool) {
	per := w.grantsPerRegion()
	if n <= 0 || n > per {
		return 0, false
	}
	for r := range w.regions {
		run := 0
		for g := r * per; g < (r+1)*per; g++ {
			if w.table[g].state != gFree {
				run = 0
				continue
			}
			if run++; run == n {
				first := g - n + 1
				for i := first; i <= g; i++ {
					w.table[i] = grantState{state: gHeld, slot: slot, serial: w.procs[slot].serial, gen: w.table[i].gen + 1}
					w.publish(i)
				}
				return first, true
			}
		}
	}
	return 0, false
}

// grantWait is a grant request of slot for n grants, waiting until d passes while memory may
// come back (see above).
func (w *Owner) grantWait(slot, n int, d time.Duration) (int, error) {
	deadline := time.Now().Add(d)
	t := time.AfterFunc(d, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer t.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	asked := false
	for {
		if w.closed || !w.procs[slot].active {
			return 0, ErrClosed
		}
		w.unfence()
		if first, ok := w.grantRun(slot, n); ok {
			return first, nil
		}
		if !asked {
			w.ask(slot)
			asked = true
		} else if !w.mayComeBack(slot) {
			return 0, fmt.Errorf("%w: no run of %d free grants", ErrPoolFull, n)
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%w: no run of %d free grants within %v: %w", ErrPoolFull, n, d, context.DeadlineExceeded)
		}
		w.cond.Wait()
	}
}

// ask asks every process but slot that holds grants to give its empty ones back now.
// Called with w.mu held.
func (w *Owner) ask(slot int) {
	w.askedAt = make(map[int]uint64)
	for s := range w.procs {
		st := &w.procs[s]
		if s == slot || !st.used || !st.active || w.heldBy(s) == 0 {
			continue
		}
		w.askedAt[s] = w.c.add(w.c.slotWord(s, sAsk), 1)
	}
}

// mayComeBack reports whether memory may yet come back for a request of slot: fenced grants
// (unless at the last epoch), limbo grants, or a process asked that has not answered. Called
// with w.mu held.
func (w *Owner) mayComeBack(slot int) bool {
	for g := range w.table {
		if s := w.table[g].state; s == gFenced && !w.lastEpoch() || s == gLimbo {
			return true
		}
	}
	for s, a := range w.askedAt {
		if w.procs[s].used && w.c.slotLoad(s, sAnswer) < a {
			return true
		}
	}
	return false
}

// heldBy counts the grants slot holds. Called with w.mu held.
func (w *Owner) heldBy(slot int) int {
	n := 0
	for g := range w.table {
		if w.table[g].state == gHeld && w.table[g].slot == slot {
			n++
		}
	}
	return n
}

// releaseRun takes back grants [first, first+n) from slot, which must hold them all.
// Called with w.mu held.
func (w *Owner) releaseRun(slot, first, n int) error {
	if first < 0 || n <= 0 || first >= len(w.table) || n > len(w.table)-first {
		return fmt.Errorf("%w: release of grants %d+%d", ErrProtocol, first, n)
	}
	for g := first; g < first+n; g++ {
		if t := w.table[g]; t.state != gHeld || t.slot != slot || t.serial != w.procs[slot].serial {
			return fmt.Errorf("%w: release of grant %d, not the process's", ErrProtocol, g)
		}
	}
	for g := first; g < first+n; g++ {
		w.table[g] = grantState{state: gFree, gen: w.table[g].gen + 1}
		w.publish(g)
	}
	w.cond.Broadcast()
	return nil
}

// fence fences grants: they become free once every process with a device attached now has
// passed the new epoch (or left). Called with w.mu held.
func (w *Owner) fence(gs []int) {
	if len(gs) == 0 {
		return
	}
	devices := false
	for s := range w.procs {
		st := &w.procs[s]
		st.need = 0
		if st.used && w.c.slotLoad(s, sFlags)&flagDevice != 0 {
			st.need, devices = st.serial, true
		}
	}
	for _, g := range gs {
		w.table[g] = grantState{state: gFenced, gen: w.table[g].gen + 1}
		if !devices {
			w.table[g].state = gFree // no process can have a copy queued: nothing to wait for
		}
		w.publish(g)
	}
	if devices {
		// The epoch reaches 2^64-1 only from a fence word forged before an adoption (adopt.go
		// takes the word as it finds it): no later epoch exists, and a process may have written
		// that one as passed, so no fence can be told passed. The grants stay fenced (unfence):
		// lost to the pool, never handed out while a stream may still use them.
		if !w.lastEpoch() {
			w.epoch++
			w.c.store(hFence, w.epoch)
		}
		w.fenced = true
	}
	w.cond.Broadcast()
}

// lastEpoch reports whether the epoch is 2^64-1, where no fence can be told passed (fence):
// its fenced grants never come back. Called with w.mu held.
func (w *Owner) lastEpoch() bool { return w.epoch == math.MaxUint64 }

// unfence frees the fenced grants once every process that had to pass the fence has passed
// it or left its slot. Called with w.mu held.
func (w *Owner) unfence() {
	if !w.fenced || w.lastEpoch() {
		return
	}
	for s := range w.procs {
		st := &w.procs[s]
		if st.need != 0 && st.used && st.serial == st.need && w.c.slotLoad(s, sFence) < w.epoch {
			return
		}
	}
	for g := range w.table {
		if w.table[g].state == gFenced {
			w.table[g].state = gFree
			w.publish(g)
		}
	}
	w.fenced = false
	w.cond.Broadcast()
}

// ownerGranter is the owner's own process's granter: the table, in process.
type ownerGranter struct {
	w *Owner
	d time.Duration
}

func (g ownerGranter) grant(n int) (int, error) { return g.w.grantWait(0, n, g.d) }

func (g ownerGranter) refuse([]int) {} // the owner's own table: never lends a held grant

// release gives the run back to the table, unless the owner has left: the pool, its control
// region with it, is unmapped then (a buffer given up at Close, freed after it, ends its
// arena here), and nothing is left to give back to.
func (g ownerGranter) release(first, n int) {
	p := g.w.Process
	p.leaveMu.Lock() // before w.mu, as the leave takes it with no w.mu held
	defer p.leaveMu.Unlock()
	if p.left {
		return
	}
	g.w.mu.Lock()
	_ = g.w.releaseRun(0, first, n)
	g.w.mu.Unlock()
}
