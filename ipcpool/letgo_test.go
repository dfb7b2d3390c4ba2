package ipcpool

import (
	"os/exec"
	"sync"
	"testing"
)

// The owner lets go the entries of processes gone (dropEntries, settleOrphans, adoptOrphans)
// from the state it read, never by a store over what a process alive wrote since: a retain
// that landed, or the holder, alive, taking its entry in and sharing a buffer there again.

// bareOwner is an owner of a control region of geometry l in Go memory, with no process or
// socket: the tests below call its rounds themselves.
func bareOwner(l layout) (*Owner, *ctl) {
	c := newCtl(l, make([]uint64, l.words()))
	w := &Owner{Process: &Process{layout: l, c: c}, table: make([]grantState, l.grants()),
		procs: make([]slotState, l.slots), scanned: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	return w, &w.c
}

// shareEntry writes entry e as a buffer of 4096 bytes at the pool's start, of holder (slot,
// serial), at generation gen with flags.
func shareEntry(c *ctl, e, slot int, serial uint64, gen uint32, flags uint64) {
	c.store(c.entry(e)+eOffset, 0)
	c.store(c.entry(e)+eLength, 4096)
	c.store(c.entry(e)+eHolder, packHolder(slot, serial))
	c.store(c.entry(e)+eState, packState(gen, flags))
}

var letGoLayout = layout{regions: 1, regionSize: 16 << 20, grantSize: 2 << 20, slots: 3, ringCap: 4,
	exports: 2}

// A release's tryRetire marks an orphan retiring, and a retain lands before it looks again
// (it then backs the mark off: the retain keeps the buffer). The owner's round between the two
// lets the entry go no more than the release does. (Before, it freed any entry it found
// retiring: the retain held a handle of a buffer let go, and its grant went back to the pool.)
func TestOwnerRoundSparesARetainLanding(t *testing.T) {
	w, c := bareOwner(letGoLayout)
	const retainer, holder = 1, 2
	w.procs[retainer] = slotState{used: true, active: true, serial: 1}
	e := holder * letGoLayout.exports
	st := c.entry(e) + eState
	shareEntry(c, e, holder, 5, 1, eLive|eGone)
	g := newGone(holder, 5, watch{pidfd: -1}, true) // its holder has exited
	g.pin(e, span{0, 0}, 1)
	w.goneList = []*gone{g}
	w.table[0] = grantState{state: gOrphan, gone: g, gen: 1}
	marked := packState(1, eLive|eRetiring|eGone)
	c.store(st, marked) // a release's mark
	c.setRetain(e, retainer, true)
	w.tickLocked()
	if got := c.load(st); got != marked {
		t.Fatalf("the owner's round over an entry marked as a retain lands: state %#x, want %#x",
			got, marked)
	}
	if !c.cas(st, marked, packState(1, eLive|eGone)) { // the release backs its mark off
		t.Fatal("the release could not back its mark off")
	}
	w.tickLocked()
	if got := c.load(st); got != packState(1, eLive|eGone) || w.table[0].state != gOrphan {
		t.Fatalf("an orphan retained: state %#x, grant %+v", got, w.table[0])
	}
	c.setRetain(e, retainer, false) // its last release
	if !c.tryRetire(e, 1) {
		t.Fatal("the last release did not retire the entry")
	}
	w.tickLocked()
	if got := c.load(st); got != packState(2, 0) || w.table[0].state == gOrphan {
		t.Fatalf("an orphan let go: state %#x, grant %+v", got, w.table[0])
	}
}

// A process gone alive freed a buffer before it left, which another retained: the entry pins
// its grant. The last release retires it and the process (its scan) takes it in and shares
// another buffer in the same entry. The owner's round forgets the pin and leaves the new
// buffer alone. (Before, it retired and freed whatever live entry it found there: the process's
// Free of its new buffer was refused as stale and the buffer stayed in its pool.)
func TestOwnerRoundSparesAnEntrySharedAgain(t *testing.T) {
	w, c := bareOwner(letGoLayout)
	const holder = 2
	e := holder * letGoLayout.exports
	st := c.entry(e) + eState
	g := newGone(holder, 5, watch{pidfd: -1}, false) // alive
	g.pin(e, span{0, 0}, 1)
	w.table[0] = grantState{state: gOrphan, gone: g, gen: 1}
	shareEntry(c, e, holder, 5, 2, eLive|eAlloc) // taken in, and shared again
	w.mu.Lock()
	w.settleOrphans(g)
	w.mu.Unlock()
	if got := c.load(st); got != packState(2, eLive|eAlloc) {
		t.Fatalf("the buffer the process shared again: state %#x, want %#x",
			got, packState(2, eLive|eAlloc))
	}
	if len(g.entries) != 0 || g.pins[0] != 0 {
		t.Fatalf("still pinned: %+v", g.entries)
	}
}

// A process leaves its socket alive with a buffer it freed itself already retired (the last
// release's delivery not taken in yet): the process takes it in (its scan) and frees the
// buffer in its pool. The owner's leave leaves it to it, and keeps the slot. (Before, the leave
// freed the entry: the process then found it past the generation it recorded, took nothing in,
// and the buffer stayed in its pool until it exited.)
func TestLeaveSparesARetirementOfAProcessAlive(t *testing.T) {
	w, c := bareOwner(letGoLayout)
	const holder = 2
	e := holder * letGoLayout.exports
	st := c.entry(e) + eState
	retired := packState(1, eLive|eRetiring)
	shareEntry(c, e, holder, 5, 1, eLive|eRetiring)
	g := newGone(holder, 5, watch{pidfd: -1}, false) // alive
	w.mu.Lock()
	left := w.dropEntries(g)
	w.mu.Unlock()
	if got := c.load(st); got != retired || !left {
		t.Fatalf("a retirement of a process alive, after its leave: state %#x (want %#x), left %v",
			got, retired, left)
	}
	g.exited = true // it exits without taking it in: the owner lets it go then
	w.mu.Lock()
	w.dropEntries(g)
	w.mu.Unlock()
	if got := c.load(st); got != packState(2, 0) {
		t.Fatalf("a retirement of a process that has exited: state %#x", got)
	}
}

// A process the previous owner lost alive shared a buffer after it left (its own: the owner
// let go none of its allocation). The owner that adopts the pool leaves it to the process,
// which may free it while it lives, and lets it go once the process exits. (Before, the
// adoption's scan freed the entry: the process's Free of the buffer was refused as stale.)
func TestAdoptionSparesABufferOfAProcessGoneAlive(t *testing.T) {
	sleeper := exec.Command("sleep", "60")
	must(t, "start a process to watch", sleeper.Start())
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	pid := sleeper.Process.Pid
	waitFor(t, func() bool { return startTime(pid) != 0 })
	w, c := bareOwner(letGoLayout)
	const kept = 2
	c.slotStore(kept, sSerial, 5|serialGone)
	c.slotStore(kept, sPid, uint64(pid))
	c.slotStore(kept, sStart, startTime(pid))
	c.store(c.grantWord(0), packGrant(1, gLimbo, kept))
	e := kept * letGoLayout.exports
	st := c.entry(e) + eState
	shareEntry(c, e, kept, 5, 1, eLive|eAlloc)
	w.mu.Lock()
	w.rebuild(0, 1, readSlots(c))
	w.mu.Unlock()
	w.finishAdoption()
	if got := c.load(st); got != packState(1, eLive|eAlloc) {
		t.Fatalf("the buffer of a process gone alive, after an adoption: state %#x", got)
	}
	_ = sleeper.Process.Kill() // it exits
	_ = sleeper.Wait()
	waitFor(t, func() bool { w.tickLocked(); return c.load(st) == packState(2, 0) })
}
