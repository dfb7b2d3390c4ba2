package ipcpool

import (
	"testing"
	"time"
)

// Grant words that name no process the slots know (a scribbler rewrote the slot's line while
// no owner ran) hold back what they name, for that process to claim, until the rejoins'
// deadline; a rejoin that connected before it, refused as a process the owner does not know,
// keeps the grants it claims until it exits, since it may still use them, even when the
// owner reads its claims after the deadline, on a loaded machine. (The owner's round settled
// the grants held back at the deadline whatever rejoin was under way: the claims read after
// it found them free, kept nothing, and the memory of a process alive was lent again.)
func TestLateClaimsOfARefusedRejoinKept(t *testing.T) {
	watchSelf = true // the refused process is this one: watched as another, alive
	t.Cleanup(func() { watchSelf = false })
	w, path := serveTest(t, Options{Slots: 4, Timeout: 5 * time.Second})
	// As an adoption leaves a grant whose word named a slot it found free (suspect), held
	// back for a process that may rejoin and claim it; no deadline yet.
	w.mu.Lock()
	g := len(w.table) - 1
	if w.table[g].state != gFree {
		w.mu.Unlock()
		t.Fatalf("grant %d is not free", g)
	}
	w.suspect = true
	w.rejoinBy = time.Now().Add(time.Hour)
	w.unclaim(g)
	pool := w.hello.pool
	w.mu.Unlock()

	c := dialOwner(t, path)
	sendRejoin(t, c, pool, 2, 5) // a slot the owner finds free
	if m, err := readMsg(c); err != nil || m.op != opReply || m.a != stClaims {
		t.Fatalf("the owner's answer to the rejoin: %+v, %v", m, err)
	}
	// The rejoins' deadline passes, and the owner's rounds after it run, before the owner
	// reads the claims.
	w.mu.Lock()
	w.rejoinBy = time.Now()
	w.mu.Unlock()
	w.waitRounds(2)
	must(t, "claim", writeMsg(c, msg{op: opClaim, a: uint64(g), b: 1}, 0))
	must(t, "end", writeMsg(c, msg{op: opClaim}, 0))
	if m, err := readMsg(c); err != nil || m.op != opReply || m.a != stRefused || m.b != refusedPool {
		t.Fatalf("the answer to a rejoin of a slot the owner finds free: %+v, %v; want refusedPool", m, err)
	}
	w.waitRounds(2)
	w.mu.Lock()
	st := w.table[g]
	w.mu.Unlock()
	if st.state != gLimbo {
		t.Fatalf("grant %d, claimed by a process alive whose rejoin connected before the rejoins' "+
			"deadline, is in state %d after its refusal: want it kept (limbo, %d) until it exits", g, st.state, gLimbo)
	}
}
