package ipcpool

import (
	"os"
	"testing"
	"time"
)

// A grant the words gave a process that does not rejoin in time goes back only once no other
// process still to rejoin may claim it: a process whose rejoin connected before the rejoins'
// deadline, its claims read after the other was given up, gets the grant it claims, as when
// the words give it to a process still to rejoin (a word forged to give one process's grant to
// another makes no process lose it, nor lends it twice, nor cuts anyone off). (The owner gave
// the grant back with the slot given up, whatever rejoin was under way: the claim was refused,
// the claimant orphaned, and the grant it still used was free to lend.)
func TestClaimOfAGrantOfASlotGivenUp(t *testing.T) {
	w, path := serveTest(t, Options{Slots: 4, Timeout: 5 * time.Second})
	// As an adoption leaves two processes to rejoin, slots 1 and 2, the words giving grant g to
	// slot 2 (forged: slot 1's process holds it); no deadline yet.
	w.mu.Lock()
	g := len(w.table) - 1
	if w.table[g].state != gFree || w.procs[1].used || w.procs[2].used {
		w.mu.Unlock()
		t.Fatalf("grant %d or slots 1 and 2 not free", g)
	}
	const serial1, serial2 = 3, 4
	w.procs[1] = slotState{used: true, serial: serial1, rejoin: true}
	w.procs[2] = slotState{used: true, serial: serial2, rejoin: true}
	w.c.slotStore(1, sSerial, serial1)
	w.c.slotStore(1, sPid, uint64(os.Getpid())) // slot 1's process is this one
	w.c.slotStore(2, sSerial, serial2)
	w.c.slotStore(2, sPid, 0) // slot 2's has exited
	w.table[g] = grantState{state: gHeld, slot: 2, serial: serial2, gen: w.table[g].gen + 1}
	w.publish(g)
	w.rejoinBy = time.Now().Add(time.Hour)
	pool := w.hello.pool
	w.mu.Unlock()

	c := dialOwner(t, path)
	sendRejoin(t, c, pool, 1, serial1)
	if m, err := readMsg(c); err != nil || m.op != opReply || m.a != stClaims {
		t.Fatalf("the owner's answer to the rejoin: %+v, %v", m, err)
	}
	// The rejoins' deadline passes: slot 2, whose process did not come, is given up; slot 1's
	// rejoin, under way, is not.
	w.mu.Lock()
	w.rejoinBy = time.Now()
	w.mu.Unlock()
	waitFor(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.procs[2].used
	})
	w.waitRounds(2)
	must(t, "claim", writeMsg(c, msg{op: opClaim, a: uint64(g), b: 1}, 0))
	must(t, "end", writeMsg(c, msg{op: opClaim}, 0))
	m, err := readMsg(c)
	w.mu.Lock()
	st := w.table[g]
	w.mu.Unlock()
	if err != nil || m.op != opReply || m.a != stOK {
		t.Fatalf("the answer to the claims of grant %d, given by the words to a slot given up meanwhile: %+v, %v "+
			"(the grant now in state %d); want the rejoin taken, the grant its", g, m, err, st.state)
	}
	if st.state != gHeld || st.slot != 1 || st.serial != serial1 {
		t.Fatalf("grant %d claimed by slot 1's process is %+v: want it held by slot 1", g, st)
	}
	c.Close()
	waitFor(t, func() bool { return w.Attached() == 0 })
}
