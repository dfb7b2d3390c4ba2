package ipcpool

import (
	"context"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A process the owner lost while it lives on (it closed its connection: it may still read and
// write what it held and retained) keeps its memory until it exits, and its slot with it, across
// the owner's death: the owner that adopts the pool finds the slot kept in its control region,
// holds back from every other process while it lives its grants, its buffer others retain
// (after their last release too) and the buffer it retains (a filler that takes every free
// grant writes none of them), lends its slot to no other process, and gives all of it back
// once it has exited.
func TestAdoptionKeepsWhatAProcessGoneAliveHolds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 16<<20)
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	c := startChild(t, path, childQuietEnv+"=1")
	shared := c.alloc(t, 3000, 5) // retained by p: an orphan when c goes
	big := c.alloc(t, 3<<20, 6)   // grants of its own: in limbo when c goes
	theirs := a.alloc(t, 3000, 7) // the owner's: an orphan once it dies, retained by c only
	must(t, "Retain", p.Retain(shared))
	if got := c.do(t, "R %s", fmtHandle(theirs)); got != "OK" {
		t.Fatalf("c retains the owner's buffer: %s", got)
	}
	if got := c.do(t, "X"); got != "OK" { // gone from its socket, alive
		t.Fatal(got)
	}
	waitFor(t, func() bool { ps := p.SharedStats().Pool; return ps.Limbo > 0 && ps.Orphaned > 0 })

	must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true
	b := startOwnerChild(t, path, 16<<20, ownerAdoptEnv+"=1")
	if b.pool != a.pool {
		t.Fatalf("pool %x after the restart, %x before", b.pool, a.pool)
	}
	waitFor(t, func() bool { return p.Rejoined() == 1 })
	if got := b.do(t, "SETTLED"); got != "OK" { // its scan done, its wait for rejoins over
		t.Fatalf("the new owner settling: %s", got)
	}

	d := startChild(t, path, childQuietEnv+"=1")
	if d.slot == c.slot {
		t.Fatalf("the new owner lent slot %d, kept for a process alive, to another", d.slot)
	}
	check := func(when string) {
		t.Helper()
		// The grants the last filler gave back (Trim) are back with the owner.
		waitFor(t, func() bool { return p.SharedStats().Pool.Free > 0 })
		filled := fillPool(t, p)
		for _, k := range []struct {
			cmd  string
			h    Handle
			seed int
		}{{"K", shared, 5}, {"K", big, 6}, {"C", theirs, 7}} {
			if got := c.do(t, "%s %s %d", k.cmd, fmtHandle(k.h), k.seed); got != "OK" {
				t.Fatalf("%s, the buffer of seed %d of the process gone alive: %s", when, k.seed, got)
			}
		}
		for _, x := range filled {
			must(t, "Free", p.Free(x))
		}
		must(t, "Trim", p.Pool.Trim()) // back to the owner now, not after the purge delay
	}
	check("after a filler took every free grant")
	must(t, "Release", p.Release(shared))
	if got := b.do(t, "ROUNDS 3"); got != "OK" { // the owner's rounds after the release
		t.Fatalf("the owner's rounds: %s", got)
	}
	check("after its last release by another, and a filler")

	c.kill() // it exits: what it kept comes back, and its slot
	waitFor(t, func() bool {
		ps := p.SharedStats().Pool
		return ps.Limbo == 0 && ps.Orphaned == 0 && ps.Fenced == 0 && ps.Processes == 3
	})
	e := startChild(t, path, childQuietEnv+"=1")
	if e.slot != c.slot {
		t.Fatalf("a process attaching after the kept slot's process exited got slot %d, not %d", e.slot, c.slot)
	}
	if got := b.do(t, "C %s 7", fmtHandle(theirs)); got != "E stale" {
		t.Fatalf("the dead owner's buffer after its last retainer exited: %s", got)
	}
	e.quit(t)
	d.quit(t)
	must(t, "Close", p.Close())
}

// What an adopting owner reads of the slots and grant words a previous owner left: a slot
// marked kept for a process alive stays kept, and every grant word naming it, in limbo or
// still held (the owner died as the process left), is that process's limbo until it exits; a
// word that names the slot with another state, or a slot free, is held back for the scan; a
// marked slot whose process has exited is let go at the first round, and its grants once no
// process is still to rejoin (one may claim them: the words are all that gave them).
func TestRebuildReadsSlotsKeptForProcessesGoneAlive(t *testing.T) {
	sleeper := exec.Command("sleep", "60")
	must(t, "start a process to watch", sleeper.Start())
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	pid := sleeper.Process.Pid
	waitFor(t, func() bool { return startTime(pid) != 0 })

	l := layout{regions: 1, regionSize: 16 << 20, grantSize: 2 << 20, slots: 5, ringCap: 4, exports: 2}
	c := newCtl(l, make([]uint64, l.words()))
	w := &Owner{Process: &Process{c: c}, table: make([]grantState, l.grants()), procs: make([]slotState, l.slots), scanned: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	const rejoining, alive, exited, free = 1, 2, 3, 4
	c.slotStore(rejoining, sSerial, 3)
	c.slotStore(alive, sSerial, 5|serialGone)
	c.slotStore(alive, sPid, uint64(pid))
	c.slotStore(alive, sStart, startTime(pid))
	c.slotStore(exited, sSerial, 7|serialGone) // its pid 0: a process that has exited
	words := []uint64{
		packGrant(1, 0, rejoining),   // 0: held by a process to rejoin
		packGrant(1, gLimbo, alive),  // 1: the kept process's limbo
		packGrant(1, 0, alive),       // 2: the kept process's still, by the words
		packGrant(1, gFenced, alive), // 3: a state no owner writes with a slot: the scan's
		packGrant(1, gLimbo, exited), // 4: of a kept process that has exited
		packGrant(1, gLimbo, free),   // 5: naming a free slot: the scan's
		packGrant(1, gOrphan, -1),    // 6: an orphan: the scan's
		packGrant(1, gFree, -1),      // 7: free: the scan's
	}
	for g, v := range words {
		c.store(c.grantWord(g), v)
	}
	w.mu.Lock()
	w.rebuild(0, 1, readSlots(&w.c))
	kept := w.procs[alive].keeper
	switch {
	case w.procs[alive].keeper == nil || w.procs[alive].used || w.procs[alive].serial != 5:
		t.Fatalf("the kept slot rebuilt as %+v", w.procs[alive])
	case kept == nil || kept.exited || !kept.fromWords:
		t.Fatalf("the kept process's record: %+v", kept)
	case !w.procs[rejoining].used || !w.procs[rejoining].rejoin:
		t.Fatalf("the slot of a process to rejoin: %+v", w.procs[rejoining])
	case w.procs[free].used || w.procs[free].keeper != nil:
		t.Fatalf("a free slot: %+v", w.procs[free])
	case !w.holdsGrant(rejoining, 0):
		t.Fatalf("grant 0: %+v", w.table[0])
	case !w.suspect:
		t.Fatal("grant words naming no process, and the adoption not suspicious")
	}
	for _, g := range []int{1, 2} {
		if t0 := w.table[g]; t0.state != gLimbo || t0.gone != kept {
			t.Fatalf("grant %d, of the process kept: %+v", g, t0)
		}
		if _, state, slot := unpackGrant(c.load(c.grantWord(g))); state != gLimbo || slot != alive {
			t.Fatalf("grant %d published as state %d of slot %d", g, state, slot)
		}
	}
	for _, g := range []int{3, 5, 6, 7} {
		if w.table[g].gone != w.scan {
			t.Fatalf("grant %d, for the scan: %+v", g, w.table[g])
		}
	}
	if g := w.table[4].gone; g == nil || !g.exited || !w.keeps(g) {
		t.Fatalf("grant 4, of a kept process that has exited: %+v", w.table[4])
	}
	w.scan = nil // (no scan here: the round below is the exits')
	w.mu.Unlock()
	w.tickLocked()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.procs[exited].keeper != nil || c.slotLoad(exited, sSerial) != 0 || w.table[4].state != gLimbo || w.table[4].gone != w.unclaimed {
		t.Fatalf("a kept process that has exited, after a round: slot %+v, grant 4 %+v", w.procs[exited], w.table[4])
	}
	if w.procs[alive].keeper == nil || c.slotLoad(alive, sSerial) != 5|serialGone || w.table[1].gone != kept {
		t.Fatalf("a kept process alive, after a round: slot %+v, grant 1 %+v", w.procs[alive], w.table[1])
	}
	w.procs[rejoining].rejoin = false // it rejoined (claiming grant 0 only)
	w.mu.Unlock()
	w.tickLocked()
	w.mu.Lock()
	if w.table[4].state != gFree {
		t.Fatalf("grant 4 of a kept process that has exited, once no process is to rejoin: %+v", w.table[4])
	}
	kept.watch.stop()
}

// A buffer of a process gone alive that others retained stays its memory after their last
// release (it may still read and write it: TestAdoptionKeepsWhatAProcessGoneAliveHolds), also
// when that release comes while no owner runs (the entry retires with no one to tell), and
// across a second adoption: the grant words of its orphans name its slot as its limbo's do,
// so that an owner that adopts the pool finds them by the words, not by an entry let go.
func TestAdoptionKeepsReleasedOrphansOfAProcessGoneAlive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 24<<20)
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	c := startChild(t, path, childQuietEnv+"=1")
	small := c.alloc(t, 3000, 5) // a grant of its arena: released while no owner runs
	big := c.alloc(t, 3<<20, 6)  // grants of its own: released before the second adoption
	must(t, "Retain", p.Retain(small))
	must(t, "Retain", p.Retain(big))
	if got := c.do(t, "X"); got != "OK" { // gone from its socket, alive
		t.Fatal(got)
	}
	waitFor(t, func() bool { return p.SharedStats().Pool.Orphaned >= 3 })
	adopt := func(dead *ownerChild, rejoins int) *ownerChild {
		t.Helper()
		must(t, "kill the owner", dead.cmd.Process.Signal(syscall.SIGKILL))
		_ = dead.cmd.Wait()
		dead.dead = true
		if rejoins == 1 {
			must(t, "Release while no owner runs", p.Release(small))
		}
		b := startOwnerChild(t, path, 24<<20, ownerAdoptEnv+"=1")
		waitFor(t, func() bool { return p.Rejoined() == rejoins })
		if got := b.do(t, "SETTLED"); got != "OK" { // its scan done, its wait for rejoins over
			t.Fatalf("the new owner settling: %s", got)
		}
		return b
	}
	check := func(when string) {
		t.Helper()
		// The grants the last filler gave back (Trim) are back with the owner.
		waitFor(t, func() bool { return p.SharedStats().Pool.Free > 0 })
		filled := fillPool(t, p)
		for _, k := range []struct {
			h    Handle
			seed int
		}{{small, 5}, {big, 6}} {
			if got := c.do(t, "K %s %d", fmtHandle(k.h), k.seed); got != "OK" {
				t.Fatalf("%s, the buffer of seed %d of the process gone alive: %s", when, k.seed, got)
			}
		}
		for _, x := range filled {
			must(t, "Free", p.Free(x))
		}
		must(t, "Trim", p.Pool.Trim()) // back to the owner now, not after the purge delay
	}
	b := adopt(a, 1)
	check("released while no owner ran, after an adoption and a filler")
	must(t, "Release", p.Release(big))
	if got := b.do(t, "ROUNDS 3"); got != "OK" { // the owner's rounds after the release
		t.Fatalf("the owner's rounds: %s", got)
	}
	check("released, and a filler")
	b2 := adopt(b, 2)
	check("after a second adoption and a filler")

	c.kill() // it exits: what it kept comes back
	waitFor(t, func() bool {
		ps := p.SharedStats().Pool
		return ps.Limbo == 0 && ps.Orphaned == 0 && ps.Fenced == 0
	})
	_ = b2
	must(t, "Close", p.Close())
}

// The words of the orphans of a process gone alive name its slot while it is kept (an owner
// that adopts the pool reads them as its: rebuild), and no more once it has exited: its slot
// goes to the next process, which the word of a buffer still retained must not name.
func TestOrphanWordsNameTheKeptSlotUntilExit(t *testing.T) {
	l := layout{regions: 1, regionSize: 16 << 20, grantSize: 2 << 20, slots: 3, ringCap: 4, exports: 2}
	c := newCtl(l, make([]uint64, l.words()))
	w := &Owner{Process: &Process{c: c}, table: make([]grantState, l.grants()), procs: make([]slotState, l.slots), scanned: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	const retainer, kept = 1, 2
	w.procs[retainer] = slotState{used: true, active: true, serial: 1}
	c.slotStore(kept, sSerial, 5|serialGone)
	e := kept * l.exports
	c.store(c.entry(e)+eState, packState(1, eLive))
	c.store(c.entry(e)+eHolder, packHolder(kept, 5))
	c.setRetain(e, retainer, true)
	g := newGone(kept, 5, watch{pidfd: -1}, false)
	w.procs[kept] = slotState{keeper: g, serial: 5}
	g.pin(e, span{0, 0}, 1)
	w.goneList = []*gone{g}
	w.table[0] = grantState{state: gOrphan, gone: g, gen: 1}
	w.publish(0)
	if _, state, slot := unpackGrant(c.load(c.grantWord(0))); state != gOrphan || slot != kept {
		t.Fatalf("an orphan of a process kept published as state %d of slot %d", state, slot)
	}
	g.exited = true // it exits: the round frees its slot, the buffer still retained
	w.tickLocked()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.procs[kept].keeper != nil || w.table[0].state != gOrphan || w.table[0].gone != g {
		t.Fatalf("after its exit: slot %+v, grant 0 %+v", w.procs[kept], w.table[0])
	}
	if _, state, slot := unpackGrant(c.load(c.grantWord(0))); state != gOrphan || slot != -1 {
		t.Fatalf("an orphan of a process that has exited published as state %d of slot %d", state, slot)
	}
}

// A process of the previous owner that does not rejoin before the adoption's scan (a Timeout
// shorter than the owner's round) is given up alive: its buffer others retain is pinned by
// its leave, and the scan, finding the slot kept for it, pins it no second time, so that the
// buffer's grant comes back once the retain is let go and the process has exited.
func TestExpiredRejoinBeforeScanPinsOnce(t *testing.T) {
	sleeper := exec.Command("sleep", "60")
	must(t, "start a process to watch", sleeper.Start())
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	pid := sleeper.Process.Pid
	waitFor(t, func() bool { return startTime(pid) != 0 })

	l := layout{regions: 1, regionSize: 16 << 20, grantSize: 2 << 20, slots: 3, ringCap: 4, exports: 2}
	c := newCtl(l, make([]uint64, l.words()))
	w := &Owner{Process: &Process{layout: l, c: c}, table: make([]grantState, l.grants()), procs: make([]slotState, l.slots), scanned: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	const late, retainer = 1, 2
	c.slotStore(late, sSerial, 3)
	c.slotStore(late, sPid, uint64(pid))
	c.slotStore(late, sStart, startTime(pid))
	c.slotStore(retainer, sSerial, 4)
	c.store(c.grantWord(0), packGrant(1, 0, late))
	e := late * l.exports
	c.store(c.entry(e)+eState, packState(1, eLive|eAlloc))
	c.store(c.entry(e)+eOffset, 0)
	c.store(c.entry(e)+eLength, 4096)
	c.store(c.entry(e)+eHolder, packHolder(late, 3))
	c.setRetain(e, retainer, true)
	w.mu.Lock()
	w.rebuild(0, 1, readSlots(&w.c))
	w.procs[retainer].rejoin, w.procs[retainer].active = false, true // it rejoined
	w.rejoinBy = time.Now().Add(-time.Millisecond)                   // the late one's time is up
	w.mu.Unlock()

	w.expireRejoins() // before the scan: its first round came after Timeout
	w.finishAdoption()
	w.mu.Lock()
	g := w.procs[late].keeper
	if g == nil || w.table[0].state != gOrphan || w.table[0].gone != g || g.pins[0] != 1 {
		w.mu.Unlock()
		t.Fatalf("the buffer others retain of a process given up alive: grant 0 %+v, its record %+v", w.table[0], g)
	}
	w.mu.Unlock()

	c.setRetain(e, retainer, false) // its last retain let go
	_ = sleeper.Process.Kill()      // and the process exits
	_ = sleeper.Wait()
	waitFor(t, func() bool {
		w.tickLocked()
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.table[0].state == gFree
	})
	if w.procs[late].keeper != nil || len(w.goneList) != 0 {
		t.Fatalf("after the process exited: slot %+v, %d records of processes gone", w.procs[late], len(w.goneList))
	}
}

// A scribbler that forges a slot kept for a process gone alive, one that has exited (its pid
// 0), and words saying the grants of a process still to rejoin are that one's limbo, has them
// given back at the new owner's first round only if nothing waits for the rejoins: they stay
// unclaimed while a process may still claim them, so the process, rejoining after the round,
// claims them and no other process (the filler) is lent any of its memory.
func TestForgedKeptSlotGivesNoRejoiningProcessGrantAway(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 16<<20)
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	q := startChild(t, path, childQuietEnv+"=1")
	h := q.alloc(t, 5000, 4)
	c := &p.c
	var held []int
	for g := range p.grants() {
		if _, state, slot := unpackGrant(c.load(c.grantWord(g))); state == 0 && slot == q.slot {
			held = append(held, g)
		}
	}
	if len(held) == 0 {
		t.Fatal("the process holds no grant")
	}
	const forged = 7 // a slot no process holds (Slots 8)
	if forged == p.Slot() || forged == q.slot {
		t.Fatalf("slots %d and %d taken", p.Slot(), q.slot)
	}
	must(t, "stop the process", q.cmd.Process.Signal(syscall.SIGSTOP)) // it rejoins late
	must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true
	c.slotStore(forged, sSerial, 1|serialGone) // its pid 0: a process that has exited
	for _, g := range held {
		c.store(c.grantWord(g), packGrant(1, gLimbo, forged))
	}
	startOwnerChild(t, path, 16<<20, ownerAdoptEnv+"=1")
	waitFor(t, func() bool { return p.Rejoined() == 1 })
	// The new owner's round let the forged slot go (its process has exited), well within its
	// Timeout (300 ms): the process is still to rejoin.
	waitFor(t, func() bool { return c.slotLoad(forged, sSerial) == 0 })
	// The filler takes every grant free now (none: all wait for the rejoin).
	var filled [][]byte
	for p.SharedStats().Pool.Free > 0 {
		b, err := p.Alloc(1 << 20)
		must(t, "Alloc", err)
		fill(b, 9)
		filled = append(filled, b)
	}
	must(t, "resume the process", q.cmd.Process.Signal(syscall.SIGCONT))
	if got := q.do(t, "K %s 4", fmtHandle(h)); got != "OK" {
		t.Fatalf("the buffer of the process that rejoins late, after a filler: %s", got)
	}
	waitFor(t, func() bool { return q.do(t, "J") == "J 1" }) // (refused, it never rejoins)
	if got := q.do(t, "C %s 4", fmtHandle(h)); got != "OK" {
		t.Fatalf("the buffer of the process that rejoined late, by its handle: %s", got)
	}
	for _, x := range filled {
		must(t, "Free", p.Free(x))
	}
	if got := q.do(t, "F %s", fmtHandle(h)); got != "OK" {
		t.Fatalf("F: %s", got)
	}
	q.quit(t)
	must(t, "Close", p.Close())
}
