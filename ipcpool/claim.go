package ipcpool

import (
	"fmt"
	"net"
	"time"
)

// Claims: how a new owner learns which grants a rejoining process holds. The grant words of
// the control region are the previous owner's record, but any process of the pool can write
// them: the owner rebuilds its table from them (it has nothing else), and holds what they say
// of each process in doubt until the process rejoins. The process then claims the grants it
// holds by its own record in Go memory, which no other process can write, and the owner makes
// its grants exactly those:
//
//   - a claimed grant the words gave to another process still to rejoin, to no process (kept
//     for the adoption's scan, or unclaimed since), or to a buffer the scan found retained
//     becomes the claimant's;
//   - a grant the words gave the process that it does not claim (lent by the previous owner
//     as it died, given back while no owner ran, or a forged word) goes to the scan or, after
//     it, stays unclaimed while another process may claim it (rejoinsPending); then it is
//     fenced and free; so does what the words gave a process given up for not rejoining in
//     time, once it has exited, and until then a process still to rejoin may claim it
//     (leaveSlot);
//   - a claim of a grant the owner knows another process holds (lent by this owner, or
//     claimed already) comes from a lying process or a broken owner, never from a word
//     forged: the claims are refused, nothing changes, and the process is orphaned.
//
// So a process that scribbles the grant words can make no other process lose a grant, nor
// have one lent to two processes, nor get one cut off.
//
// The process's identity is the control region's too: its slot's serial and pid, which a
// scribbler can rewrite so that the owner refuses the process (it is orphaned). Its claims
// are read all the same: the grants it claims that the words alone give away are kept, in
// limbo, until it has exited, since it may go on using them; its memory is never lent to
// another while it lives. Grant words that name no process the slots know (forged, the word
// or the slot's line) hold back what they name until the rejoins' deadline, for such a
// process to come and claim it (and, for a rejoin that connected by then, until its claims
// are read). A process the words do name may still claim what a refused
// one keeps: a process refused (any process of the pool may ask to rejoin as anything) takes
// no grant from one that rejoins.
//
// A process the previous owner had lost alive (leave.go) is not taken back: a rejoin of it is
// refused, and its claims take nothing from what its slot keeps (keptFor). Its slot's line and the
// words are all the record of it, so forged ones can give its grants back before it exits, or keep
// grants back until a process the line names exits. A process still to rejoin may claim what they
// keep (fromWords), and what the words alone gave a process gone (kept so, or refused) waits, once
// that one has exited, unclaimed while a process may still rejoin: a forged kept slot of a process
// that has exited gives none of its grants away.
//
// A process that lies in its own claims (on its own connection: it cannot speak for another)
// is another matter: the first claim of a grant stands, so a liar that rejoins before the
// grant's holder gets the holder refused.

// readClaims reads the claims of the process rejoining on c (after stClaims): ascending,
// disjoint runs of grants of l, each inside one region, ended by an empty one. It returns them
// by grant. Anything else is ErrProtocol.
func readClaims(c *net.UnixConn, l layout) ([]bool, error) {
	claims := make([]bool, l.grants())
	next := uint64(0)
	for {
		m, err := readMsg(c)
		if err != nil {
			return nil, err
		}
		first, end, err := l.checkClaim(next, m)
		if err != nil || end == 0 {
			return claims, err
		}
		for g := first; g < end; g++ {
			claims[g] = true
		}
		next = uint64(end)
	}
}

// checkClaim checks one message of a rejoin's claims, the previous run having ended at grant
// next: it returns the run [first, end), or end 0 for the last message.
func (l layout) checkClaim(next uint64, m msg) (first, end int, err error) {
	switch {
	case m.op != opClaim:
		return 0, 0, fmt.Errorf("%w: operation %d in a rejoin's claims", ErrProtocol, m.op)
	case m.a == 0 && m.b == 0:
		return 0, 0, nil
	case m.a < next || !l.validRun(m.a, m.b):
		return 0, 0, fmt.Errorf("%w: a claim of grants %d+%d after grant %d", ErrProtocol, m.a, m.b, next)
	}
	return int(m.a), int(m.a + m.b), nil
}

// takeClaims makes the grants of the process rejoining in slot those it claims, or, when it
// claims a grant the owner knows another process holds, changes nothing and says so.
// Called with w.mu held.
func (w *Owner) takeClaims(slot int, claims []bool) error {
	for g, claimed := range claims {
		if claimed && !w.holdsGrant(slot, g) && !w.claimable(g) {
			return fmt.Errorf("%w: a claim of grant %d, which another process holds", ErrProtocol, g)
		}
	}
	serial := w.procs[slot].serial
	for g, claimed := range claims {
		t := &w.table[g]
		switch mine := w.holdsGrant(slot, g); {
		case claimed && !mine:
			// (An orphan's record keeps counting the buffer's pin: it frees only grants
			// still its own.)
			*t = grantState{state: gHeld, slot: slot, serial: serial, gen: t.gen + 1}
			w.publish(g)
		case !claimed && mine:
			w.unclaim(g)
		}
	}
	return nil
}

// keepClaims keeps the grants claimed by process pid, whose rejoin is refused, that nothing
// but the control region's words gives away, until it has exited. Called with w.mu held.
func (w *Owner) keepClaims(claims []bool, pid int) {
	var g *gone
	for gr, claimed := range claims {
		if !claimed || !w.claimable(gr) || w.keptFor(gr) {
			continue
		}
		if g == nil {
			g = newGone(-1, 0, watchProcess(pid), false)
			g.fromWords = true // (a process that rejoins as the words say wins them back)
			w.goneList = append(w.goneList, g)
		}
		t := &w.table[gr]
		*t = grantState{state: gLimbo, gone: g, gen: t.gen + 1}
		w.publish(gr)
	}
}

// keptFor reports whether grant g is kept already for more than the words: an orphan, for a
// buffer others retain (its gone's pins), or in the limbo of another process refused, until
// that one exits. A refused claim (keepClaims) leaves it there: moved to the claimant's limbo,
// it would be freed once the claimant exits (any process may ask to rejoin as anything),
// however long the buffer stays retained or the other process lives, and every refused rejoin
// would add a record and a pidfd for the same grants. Called with w.mu held.
func (w *Owner) keptFor(g int) bool {
	t := &w.table[g]
	return t.state == gOrphan || t.state == gLimbo && t.gone != w.scan && t.gone != w.unclaimed
}

// holdsGrant reports whether the owner's table gives grant g to the process in slot.
// Called with w.mu held.
func (w *Owner) holdsGrant(slot, g int) bool {
	t := &w.table[g]
	return t.state == gHeld && t.slot == slot && t.serial == w.procs[slot].serial
}

// claimable reports whether grant g is one a rejoining process may claim: the control
// region's words are all that says who holds it. Called with w.mu held.
func (w *Owner) claimable(g int) bool {
	t := &w.table[g]
	switch t.state {
	case gHeld:
		return w.procs[t.slot].rejoin
	case gLimbo:
		return t.gone != nil && (t.gone == w.scan || t.gone == w.unclaimed || t.gone.fromWords)
	case gOrphan:
		return t.gone != nil && t.gone.fromWords
	}
	return false
}

// unclaim takes back grant g, which the words gave a process that does not claim it: for the
// adoption's scan, or unclaimed while a process may still claim it. Called with w.mu held.
func (w *Owner) unclaim(g int) {
	t := &w.table[g]
	gone := w.scan
	if gone == nil {
		if w.unclaimed == nil {
			w.unclaimed = newGone(0, 0, watch{pidfd: -1}, false)
		}
		gone = w.unclaimed
	}
	*t = grantState{state: gLimbo, gone: gone, gen: t.gen + 1}
	w.publish(g)
}

// settleUnclaimed fences the grants no process claimed, once no process is still to rejoin.
// Called with w.mu held.
func (w *Owner) settleUnclaimed() {
	if w.unclaimed == nil || w.rejoinsPending() {
		return
	}
	var free []int
	for g := range w.table {
		if w.table[g].gone == w.unclaimed {
			free = append(free, g)
		}
	}
	w.unclaimed = nil
	w.fence(free)
}

// rejoinsPending reports whether a process of the previous owner may still rejoin. While
// grant words name a process the slots do not know (a word or a slot's line forged), that
// process may yet come and claim them (refused, it keeps them: keepClaims) until the
// processes are given up (rejoinBy), or later, when its connection came by then, until its
// claims are read (claiming, unnamed). Called with w.mu held.
func (w *Owner) rejoinsPending() bool {
	if w.suspect && (time.Now().Before(w.rejoinBy) || w.claiming > 0 || w.unnamedInTime()) {
		return true
	}
	for s := range w.procs {
		if w.procs[s].rejoin {
			return true
		}
	}
	return false
}
