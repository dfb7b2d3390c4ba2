package ipcpool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// A scribbler rewrites the grant words of two other processes while no owner runs: the
// innocent one's two grants are said to be the other's and free, the other's to be the
// innocent's. The new owner takes each process's grants from the process's own record (its
// claims at the rejoin), so nothing of either is given back or lent to a third process (the
// filler below, which takes every grant it can and writes all of it), and both stay
// connected and give their grants back later without being cut off. (Before, the rejoin
// trusted the words: the innocent's grants were freed, by the other's reconcile and by the
// adoption's scan, and lent to the filler, which wrote over the innocent's buffers.)
func TestRejoinIgnoresScribbledGrantWords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 16<<20)
	inn := startChild(t, path, childQuietEnv+"=1")
	oth := startChild(t, path, childQuietEnv+"=1")
	h1 := inn.alloc(t, 5000, 1)
	h2 := inn.alloc(t, 1<<20+5000, 2) // (a second grant, or more)
	h3 := oth.alloc(t, 5000, 3)
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	defer p.Close()
	c := &p.c
	var innGrants, othGrants []int
	for g := range p.grants() {
		switch _, _, slot := unpackGrant(c.load(c.grantWord(g))); slot {
		case inn.slot:
			innGrants = append(innGrants, g)
		case oth.slot:
			othGrants = append(othGrants, g)
		}
	}
	if len(innGrants) < 2 || len(othGrants) < 1 {
		t.Fatalf("the innocent holds grants %v, the other %v", innGrants, othGrants)
	}
	must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true
	// The scribbler (this process): the innocent's first grant is the other's, its others
	// free, the other's grants the innocent's.
	c.store(c.grantWord(innGrants[0]), packGrant(1, 0, oth.slot))
	for _, g := range innGrants[1:] {
		c.store(c.grantWord(g), packGrant(1, gFree, -1))
	}
	for _, g := range othGrants {
		c.store(c.grantWord(g), packGrant(1, 0, inn.slot))
	}
	startOwnerChild(t, path, 16<<20, ownerAdoptEnv+"=1")
	waitFor(t, func() bool { return p.Rejoined() == 1 })
	for _, k := range []*child{inn, oth} {
		waitFor(t, func() bool { return k.do(t, "J") == "J 1" })
	}
	waitFor(t, func() bool { // the adoption's scan done, every rejoin in
		ps := p.SharedStats().Pool
		return ps.Limbo == 0 && ps.Fenced == 0
	})
	filled := fillPool(t, p)
	for _, x := range []struct {
		k    *child
		h    Handle
		seed int
	}{{inn, h1, 1}, {inn, h2, 2}, {oth, h3, 3}} {
		if got := x.k.do(t, "C %s %d", fmtHandle(x.h), x.seed); got != "OK" {
			t.Fatalf("child %d's buffer after the filler: %s", x.k.slot, got)
		}
	}
	for _, b := range filled {
		must(t, "Free", p.Free(b))
	}
	// Both give their grants back (a release of a grant the owner thought another's cut
	// the giver off), and allocate again on the same connection.
	for _, x := range []struct {
		k *child
		h Handle
	}{{inn, h1}, {inn, h2}, {oth, h3}} {
		if got := x.k.do(t, "F %s", fmtHandle(x.h)); got != "OK" {
			t.Fatal(got)
		}
	}
	for _, k := range []*child{inn, oth} {
		if got := k.do(t, "T"); got != "OK" {
			t.Fatalf("child %d: Trim: %s", k.slot, got)
		}
		if got := k.do(t, "N"); got != "G 0" {
			t.Fatalf("child %d holds %s after its trim", k.slot, got)
		}
		h := k.alloc(t, 3000, 4)
		if got := k.do(t, "F %s", fmtHandle(h)); got != "OK" {
			t.Fatal(got)
		}
		if got := k.do(t, "J"); got != "J 1" {
			t.Fatalf("child %d was cut off after giving its grants back: %s", k.slot, got)
		}
		k.quit(t)
	}
}

// The owner's decisions on a rejoin's claims, one case each: a grant the words gave to a
// process still to rejoin is the claimant's; one lent to a live process is refused and
// nothing changes; a grant the words gave the claimant that it does not claim waits,
// unclaimed, while a process may still rejoin, and is free once none may.
func TestClaimsDecide(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 16 << 20, GrantSize: 2 << 20, FallbackPageable: true, Slots: 4})
	must(t, "Serve", err)
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	b, err := p.Alloc(5000)
	must(t, "Alloc", err)
	live := p.slot
	w.mu.Lock()
	locked := true
	defer func() {
		if locked {
			w.mu.Unlock()
		}
	}()
	var lent int
	for g := range w.table {
		if w.holdsGrant(live, g) {
			lent = g
		}
	}
	// Two processes of a previous owner, still to rejoin: a holds grants 5 and 6 by the words.
	a, other := 2, 3
	w.procs[a] = slotState{used: true, rejoin: true, serial: 9}
	w.procs[other] = slotState{used: true, rejoin: true, serial: 4}
	give := func(g, slot int) {
		w.table[g] = grantState{state: gHeld, slot: slot, serial: w.procs[slot].serial}
	}
	give(5, a)
	give(6, a)
	give(7, other)
	claims := make([]bool, len(w.table))
	claims[5], claims[7], claims[lent] = true, true, true
	before := append([]grantState(nil), w.table...)
	if err := w.takeClaims(a, claims); !errors.Is(err, ErrProtocol) {
		t.Fatalf("a claim of grant %d, lent to a live process: %v", lent, err)
	}
	if !slices.Equal(before, w.table) {
		t.Fatal("a refused claim changed the table")
	}
	claims[lent] = false
	must(t, "takeClaims", w.takeClaims(a, claims))
	w.procs[a].rejoin = false
	switch {
	case !w.holdsGrant(a, 5) || !w.holdsGrant(a, 7):
		t.Fatalf("the claimed grants: %+v, %+v", w.table[5], w.table[7])
	case w.table[6].state != gLimbo || w.table[6].gone != w.unclaimed:
		t.Fatalf("the grant not claimed, with a process still to rejoin: %+v", w.table[6])
	case !w.holdsGrant(live, lent):
		t.Fatal("the live process lost its grant")
	}
	w.settleUnclaimed()
	if w.table[6].state != gLimbo {
		t.Fatal("an unclaimed grant freed while a process may still claim it")
	}
	// Claims of a process refused (grant 7 is the other's by the words, 8 is nobody's) are
	// kept until it exits, and the process the words name may claim them still.
	claims = make([]bool, len(w.table))
	claims[7], claims[lent] = true, true
	w.table[7] = grantState{state: gHeld, slot: other, serial: w.procs[other].serial}
	w.keepClaims(claims, os.Getpid())
	if w.table[7].state != gLimbo || w.table[7].gone == nil || !w.holdsGrant(live, lent) {
		t.Fatalf("a refused process's claims: grant 7 %+v, grant %d %+v", w.table[7], lent, w.table[lent])
	}
	claims[lent] = false
	must(t, "takeClaims", w.takeClaims(other, claims))
	if !w.holdsGrant(other, 7) {
		t.Fatalf("grant 7, kept for a process refused, not taken back by the one the words name: %+v", w.table[7])
	}
	w.goneList = w.goneList[:len(w.goneList)-1]
	w.procs[other].rejoin = false
	w.settleUnclaimed()
	if s := w.table[6].state; s != gFree && s != gFenced || w.unclaimed != nil {
		t.Fatalf("an unclaimed grant once no process may claim it: %+v", w.table[6])
	}
	for _, g := range []int{5, 7} {
		w.table[g] = grantState{state: gFree, gen: w.table[g].gen + 1}
	}
	w.procs[a], w.procs[other] = slotState{}, slotState{}
	locked = false
	w.mu.Unlock()
	must(t, "Free", p.Free(b))
	must(t, "Close", p.Close())
	must(t, "owner Close", w.Close())
}

// FuzzClaims: a rejoin's claims of any words are refused or name ascending, disjoint runs of
// the pool, each inside one region.
func FuzzClaims(f *testing.F) {
	enc := func(ms ...msg) []byte {
		var b []byte
		for _, m := range ms {
			e := m.encode()
			b = append(b, e[:]...)
		}
		return b
	}
	f.Add(enc(msg{op: opClaim, a: 0, b: 2}, msg{op: opClaim, a: 3, b: 1}, msg{op: opClaim}))
	f.Add(enc(msg{op: opClaim, a: 1, b: 2}, msg{op: opClaim}))
	f.Add(enc(msg{op: opClaim, a: 2, b: 1}, msg{op: opClaim, a: 2, b: 1}))
	f.Add(enc(msg{op: opClaim, a: 1 << 63, b: 1 << 63}))
	l := fuzzLayout
	f.Fuzz(func(t *testing.T, b []byte) {
		next := uint64(0)
		for len(b) >= msgSize {
			m, err := decodeMsg(b[:msgSize])
			b = b[msgSize:]
			if err != nil {
				return
			}
			first, end, err := l.checkClaim(next, m)
			if err != nil || end == 0 {
				return
			}
			per := l.grantsPerRegion()
			if uint64(first) < next || end <= first || end > l.grants() || first/per != (end-1)/per {
				t.Fatalf("accepted a claim of [%d, %d) after %d", first, end, next)
			}
			next = uint64(end)
		}
	})
}

// Owners killed one after another, the grant words scribbled at random while no owner runs,
// and processes churning buffers of their own all along (each checks its own bytes): after
// each restart every process is still connected, and no buffer's bytes changed though a
// filler took and wrote every free grant. (Before the claims, every run of five failed in its
// first round: a churning child found the filler's bytes in a buffer of its own.)
func TestRestartsAfterScribbledGrantWords(t *testing.T) {
	rounds := 2
	if long() {
		rounds = 12
	}
	path := filepath.Join(t.TempDir(), "pool.sock")
	owner := startOwnerChild(t, path, 32<<20)
	kids := []*child{startChild(t, path), startChild(t, path)}
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	defer p.Close()
	type shared struct {
		k    *child
		h    Handle
		seed int
	}
	var bufs []shared
	for i, k := range kids {
		for j := range 2 {
			seed := 10*i + j + 1
			bufs = append(bufs, shared{k, k.alloc(t, 3000+j<<20, uint64(seed)), seed})
		}
	}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	c := &p.c
	for round := 1; round <= rounds; round++ {
		must(t, "kill the owner", owner.cmd.Process.Signal(syscall.SIGKILL))
		_ = owner.cmd.Wait()
		owner.dead = true
		for g := range p.grants() {
			if r.IntN(2) == 0 {
				c.store(c.grantWord(g), packGrant(r.Uint64N(1<<20), r.IntN(5), r.IntN(p.slots+1)-1))
			}
		}
		owner = startOwnerChild(t, path, 32<<20, ownerAdoptEnv+"=1")
		want := fmt.Sprintf("J %d", round)
		for _, k := range kids {
			waitFor(t, func() bool { return k.do(t, "J") == want })
		}
		waitFor(t, func() bool {
			ps := p.SharedStats().Pool
			return p.Rejoined() == round && ps.Limbo == 0 && ps.Fenced == 0
		})
		filled := fillPool(t, p)
		for _, b := range bufs {
			if got := b.k.do(t, "C %s %d", fmtHandle(b.h), b.seed); got != "OK" {
				t.Fatalf("round %d: child %d's buffer after the filler: %s", round, b.k.slot, got)
			}
		}
		for _, b := range filled {
			must(t, "Free", p.Free(b))
		}
		must(t, "Trim", p.Pool.Trim())
	}
	for _, b := range bufs {
		if got := b.k.do(t, "F %s", fmtHandle(b.h)); got != "OK" {
			t.Fatal(got)
		}
	}
	for _, k := range kids {
		if got := k.do(t, "J"); got != fmt.Sprintf("J %d", rounds) {
			t.Fatalf("child %d was cut off: %s", k.slot, got)
		}
		k.quit(t)
	}
	must(t, "Close", p.Close())
}

// fillPool is a filler: p takes every free grant of the pool, MiB by MiB, and writes all of it
// with pattern(9).
func fillPool(t *testing.T, p *Process) [][]byte {
	t.Helper()
	var filled [][]byte
	for len(filled) < 64 && p.SharedStats().Pool.Free > 0 { // (a full pool's Alloc waits)
		b, err := p.Alloc(1 << 20)
		if err != nil {
			break
		}
		fill(b, 9)
		filled = append(filled, b)
	}
	if len(filled) == 0 {
		t.Fatalf("the filler got nothing: %+v", p.SharedStats().Pool)
	}
	return filled
}

// Claims forged on a rejoin's connection (this process speaks for its own slot, as only it
// can: the owner checks the pid): garbage (a run out of order, past the pool, of no grant,
// another message) cuts the connection off with nothing changed, and a claim of a grant a
// rejoined process holds is refused, its holder keeping it and staying connected.
func TestForgedClaimsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 16<<20)
	k := startChild(t, path, childQuietEnv+"=1")
	h := k.alloc(t, 5000, 1)
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	held := -1
	for g := range p.grants() {
		if _, _, slot := unpackGrant(p.c.load(p.c.grantWord(g))); slot == k.slot {
			held = g
		}
	}
	if held < 0 {
		t.Fatal("the child holds no grant")
	}
	must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true
	// This process stops rejoining on its own: the test speaks for its slot.
	p.cl.mu.Lock()
	p.cl.closing = true
	p.cl.mu.Unlock()
	p.cl.readers.Wait()
	startOwnerChild(t, path, 16<<20, ownerAdoptEnv+"=1")
	waitFor(t, func() bool { return k.do(t, "J") == "J 1" })
	claim := func(ms ...msg) (msg, error) {
		nc, err := net.Dial("unix", path)
		must(t, "dial", err)
		c := nc.(*net.UnixConn)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		must(t, "intro", writeMsg(c, msg{op: opIntro, flags: introRejoin, seq: wireVersion, a: ctlMagic, b: p.id}, 0))
		must(t, "rejoin", writeMsg(c, msg{op: opRejoin, a: uint64(p.slot), b: p.serial}, 0))
		if m, err := readMsg(c); err != nil || m.op != opReply || m.a != stClaims {
			t.Fatalf("the owner's answer to the rejoin: %+v, %v", m, err)
		}
		for _, m := range ms {
			if err := writeMsg(c, m, 0); err != nil {
				return msg{}, err // cut off already
			}
		}
		return readMsg(c)
	}
	n := uint64(p.grants())
	for _, ms := range [][]msg{
		{{op: opClaim, a: 3, b: 1}, {op: opClaim, a: 1, b: 1}, {op: opClaim}}, // out of order
		{{op: opClaim, a: n, b: 1}, {op: opClaim}},                            // past the pool
		{{op: opClaim, a: 1, b: 0}, {op: opClaim}},                            // no grant
		{{op: opClaim, a: 0, b: n + 1}, {op: opClaim}},                        // across regions, past the pool
		{{op: opClaim, a: 1, b: 1 << 63}, {op: opClaim}},                      // overflowing
		{{op: opGrant, a: 1, b: 1}},                                           // another message
	} {
		if m, err := claim(ms...); err == nil {
			t.Fatalf("claims %+v answered %+v, want the connection cut", ms, m)
		}
	}
	m, err := claim(msg{op: opClaim, a: uint64(held), b: 1}, msg{op: opClaim})
	if err != nil || m.op != opReply || m.a != stRefused || m.b != refusedClaim {
		t.Fatalf("a claim of another's grant: %+v, %v", m, err)
	}
	// The holder keeps it: in the owner's table, its bytes, its free and trim (a release the
	// owner would refuse cuts it off), its connection.
	if _, _, slot := unpackGrant(p.c.load(p.c.grantWord(held))); slot != k.slot {
		t.Fatalf("grant %d is slot %d's after the forged claim, not the holder's (%d)", held, slot, k.slot)
	}
	if got := k.do(t, "C %s 1", fmtHandle(h)); got != "OK" {
		t.Fatal(got)
	}
	if got := k.do(t, "F %s", fmtHandle(h)); got != "OK" {
		t.Fatal(got)
	}
	if got := k.do(t, "T"); got != "OK" {
		t.Fatal(got)
	}
	if got := k.do(t, "N"); got != "G 0" {
		t.Fatalf("the holder after its trim: %s", got)
	}
	h = k.alloc(t, 5000, 2) // a grant of the owner, on the same connection
	if got := k.do(t, "F %s", fmtHandle(h)); got != "OK" {
		t.Fatal(got)
	}
	if got := k.do(t, "J"); got != "J 1" {
		t.Fatalf("the holder after the forged claim: %s", got)
	}
	k.quit(t)
	_ = p.Close()
}

// A scribbler rewrites another process's slot line while no owner runs (its pid, or its serial to
// say the slot is free): the new owner cannot know the process and refuses its rejoin (it is
// orphaned: ErrClosed from then on), but keeps the grants it claims until it has exited, since it
// may still use them: a filler taking every free grant gets none of its buffers' memory. (Before,
// its grants were freed, given up with a slot whose pid named no process or scanned as nobody's,
// and lent to the filler.)
func TestRefusedRejoinKeepsClaimedGrants(t *testing.T) {
	for _, forge := range []string{"pid", "serial"} {
		t.Run(forge, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "pool.sock")
			a := startOwnerChild(t, path, 16<<20)
			inn := startChild(t, path, childQuietEnv+"=1")
			h := inn.alloc(t, 5000, 1)
			p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
			must(t, "Attach", err)
			defer p.Close()
			must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
			_ = a.cmd.Wait()
			a.dead = true
			c := &p.c
			if forge == "pid" {
				c.slotStore(inn.slot, sPid, uint64(a.cmd.Process.Pid)) // a process that has exited
			} else {
				c.slotStore(inn.slot, sSerial, 0)
			}
			b := startOwnerChild(t, path, 16<<20, ownerAdoptEnv+"=1")
			waitFor(t, func() bool { return p.Rejoined() == 1 })
			waitFor(t, func() bool { // refused: orphaned, its requests closed
				return strings.Contains(inn.do(t, "A 3000000 2"), "closed")
			})
			if got := b.do(t, "SETTLED"); got != "OK" { // its wait for rejoins over
				t.Fatalf("the new owner settling: %s", got)
			}
			filled := fillPool(t, p)
			for _, b := range filled { // (its handle is stale: its entries went with its slot)
				if off := uint64(mem.Addr(b) - p.sp.base); off < h.Offset+h.Length && h.Offset < off+uint64(len(b)) {
					t.Fatalf("the filler got [%#x, +%d), over the refused process's buffer [%#x, +%d)", off, len(b), h.Offset, h.Length)
				}
			}
			for _, b := range filled {
				must(t, "Free", p.Free(b))
			}
			inn.kill()
			// Its grants come back once it has exited.
			waitFor(t, func() bool {
				ps := p.SharedStats().Pool
				return ps.Limbo == 0 && ps.Fenced == 0 && ps.Held == p.src.grantsHeld()
			})
		})
	}
}

// A slot's serial is a word of the control region: a scribbler gives a slot a serial no owner
// wrote (2^45: a hello carries at most maxPoolSize, decodeHello) while no owner runs. The
// owner that adopts the pool takes it, gives the slot up at the rejoins' deadline, and lends
// it again with the serial after it: every process that attaches is sent a hello it must
// refuse (ErrProtocol), and the slot, still the lowest free, is lent again at the next
// attach: no attach succeeds while it is the lowest free slot.
func TestForgedSlotSerialBlocksNoAttach(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 8<<20)
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	forged := p.slot + 1
	must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true
	p.c.slotStore(forged, sSerial, 1<<45) // the scribbler (this process)
	w, err := Serve(path, Options{Size: 8 << 20, Adopt: 5 * time.Second, Timeout: 300 * time.Millisecond, FallbackPageable: true})
	must(t, "Serve adopting", err)
	t.Cleanup(func() {
		_ = p.Close()
		_ = w.Close()
	})
	waitFor(t, func() bool { return p.Rejoined() == 1 })
	for i := range 3 {
		// Given up at the rejoins' deadline; then each failed attach frees it again.
		waitFor(t, func() bool { return !w.slotUsed(forged) })
		q, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true, Timeout: time.Second})
		if err != nil {
			t.Errorf("attach %d after a forged serial in slot %d: %v", i, forged, err)
			continue
		}
		if q.Slot() == forged {
			t.Errorf("attach %d lent slot %d, whose serial is past what a hello carries", i, forged)
		}
		must(t, "Close", q.Close())
	}
}

// adoptAfterScribble starts an owner in a child process, attaches this process, kills the
// owner (SIGKILL), lets scribble write the control region as this process may while no owner
// runs, and returns the owner that adopts the pool once this process has rejoined it and the
// previous owner's grants are free (or fenced) after it.
func adoptAfterScribble(t *testing.T, scribble func(p *Process)) *Owner {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 8<<20)
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true
	scribble(p)
	w, err := Serve(path, Options{Size: 8 << 20, Adopt: 5 * time.Second, Timeout: 300 * time.Millisecond,
		FallbackPageable: true})
	must(t, "Serve adopting", err)
	t.Cleanup(func() {
		_ = p.Close()
		_ = w.Close()
	})
	waitFor(t, func() bool { return p.Rejoined() == 1 })
	<-w.scanned
	return w
}

// The previous owner's serial, slot 0's word, is any process's to write: a scribbler sets it to
// 2^64-1 while no owner runs. The owner that adopts the pool takes a serial a hello carries,
// not 0 (the previous one plus one wrapped: 0 is a free slot's serial, and a fence waits for
// no process whose serial is 0, the owner's own device skipped), nor past 2^48 (its handles'
// holder word would cut it short).
func TestForgedOwnerSerialAtAdoption(t *testing.T) {
	w := adoptAfterScribble(t, func(p *Process) { p.c.slotStore(0, sSerial, ^uint64(0)) })
	w.mu.Lock()
	defer w.mu.Unlock()
	serial := w.procs[0].serial
	word := w.c.slotLoad(0, sSerial)
	if serial == 0 || serial >= maxPoolSize || w.Process.serial != serial || word != serial {
		t.Fatalf("the adopting owner's serial %#x (its process's %#x, its slot's word %#x), "+
			"want one a hello carries", serial, w.Process.serial, word)
	}
	// A fence made now, were the owner's process to have a device, waits for it.
	g := slices.IndexFunc(w.table, func(t grantState) bool {
		return t.state == gFree || t.state == gFenced
	})
	if g < 0 {
		t.Fatal("no free grant to fence")
	}
	flags := w.c.slotLoad(0, sFlags)
	w.c.slotStore(0, sFlags, flags|flagDevice)
	w.fence([]int{g})
	if w.procs[0].need != serial {
		t.Errorf("a fence waits for serial %#x of the owner's slot, want %#x", w.procs[0].need, serial)
	}
	w.c.slotStore(0, sFlags, flags)
	w.c.slotStore(0, sFence, w.epoch)
	w.unfence()
}
