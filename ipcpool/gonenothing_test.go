package ipcpool

import (
	"context"
	"errors"
	"os"
	"testing"
)

// A process that closes its socket and lives on holding nothing (no grant, no buffer shared,
// no retain) leaves nothing to wait for: the owner keeps no record of it. A peer that attaches
// and hangs up again and again, alive, grows nothing of the owner's (its records, the pidfds
// its watches hold, the work of every round). (Before, each hang-up left a record, with a
// pidfd, until the process exited: 40 of them here.)
func TestHungUpProcessHoldingNothingLeavesNoRecord(t *testing.T) {
	watchSelf = true // the owner watches this process as any other: alive
	defer func() { watchSelf = false }()
	w, path := serveTwoSlots(t)
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		must(t, "ReadDir", err)
		return len(ents)
	}
	const cycles = 40
	var before int
	for i := range cycles {
		p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
		must(t, "Attach", err)
		p.cl.hangUp() // alive, its socket closed
		waitFor(t, func() bool { return w.Attached() == 0 })
		if err := p.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Fatalf("Close after the hang-up: %v", err)
		}
		if i == 0 {
			before = fds()
		}
	}
	w.mu.Lock()
	n := len(w.goneList)
	w.mu.Unlock()
	if n != 0 {
		t.Errorf("%d hang-ups of a process alive holding nothing left %d records", cycles, n)
	}
	if after := fds(); after > before+cycles/2 {
		t.Errorf("%d hang-ups left %d descriptors open (%d after the first)", cycles, after, before)
	}
	p := attachTest(t, path, AttachOptions{}) // the slot is free
	must(t, "Close", p.Close())
}
