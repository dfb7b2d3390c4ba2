package ipcpool

import (
	"os"
	"testing"
	"time"
)

// A rejoin whose connection the owner accepted before the rejoins' deadline keeps its slot
// even when the goroutine of its session starts only after the deadline and the rounds after
// it, on a loaded machine: the connection came in time. (The session put its connection among
// those not yet named (unnamed) only once its goroutine ran, so the rounds in between saw no
// connection to wait for, gave the slot up, and the rejoin was refused: orphaned for good.
// Made here every time by a session that starts late.)
func TestRejoinKeepsItsSlotWhenItsSessionStartsLate(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	sessionStarts = func() {
		entered <- struct{}{}
		<-release
	}
	t.Cleanup(func() { sessionStarts = nil }) // after the owner's Close: its sessions are done
	w, path := serveTest(t, Options{Slots: 4, Timeout: 5 * time.Second})
	// Slot 1 as an adoption leaves it: a process of the previous owner (this one), still to
	// rejoin; no deadline yet.
	const slot, serial = 1, 7
	w.mu.Lock()
	w.procs[slot] = slotState{used: true, serial: serial, rejoin: true}
	w.c.slotStore(slot, sSerial, serial)
	w.c.slotStore(slot, sPid, uint64(os.Getpid()))
	w.c.slotStore(slot, sStart, startTime(os.Getpid()))
	w.rejoinBy = time.Now().Add(time.Hour)
	pool := w.hello.pool
	w.mu.Unlock()

	c := dialOwner(t, path)
	<-entered // accepted: its session's goroutine has not run yet
	// The rejoins' deadline passes now, after the accept, and the owner's rounds run.
	w.mu.Lock()
	w.rejoinBy = time.Now()
	w.mu.Unlock()
	w.waitRounds(2)
	close(release)

	sendRejoin(t, c, pool, slot, serial)
	m, err := readMsg(c)
	if err == nil && m.op == opReply && m.a == stClaims {
		must(t, "claims", writeMsg(c, msg{op: opClaim}, 0))
		m, err = readMsg(c)
	}
	if err != nil || m.op != opReply || m.a != stOK {
		t.Fatalf("a rejoin accepted before the rejoins' deadline, its session started after it, "+
			"answered %+v, %v: want it taken back", m, err)
	}
	if !w.slotUsed(slot) {
		t.Fatalf("slot %d is free after its process rejoined", slot)
	}
	c.Close()
	waitFor(t, func() bool { return w.Attached() == 0 })
}
