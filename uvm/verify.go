package uvm

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// verify checks the tier's accounting against its block table (t.mu held, between calls): the
// byte counts of t.acct equal the sums over the live blocks by state, every live block is in
// exactly one state, an acquired block is on the device, the policy holds exactly the
// evictable blocks, the free slots are the dead ones, and the spare VRAM's byte count is the
// sum of its blocks. It costs a walk of the table, so the tier calls it only when
// internal/invariants says a check is due (checkInvariants); tests call it through Verify.
func (t *Tier) verify() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	var a accounts
	var held heldBack
	evictable := map[BlockID]bool{}
	free := map[uint32]bool{}
	for _, id := range t.free {
		if free[id] || int(id) >= len(t.blocks) || t.blocks[id].live {
			bad("free slot %d is listed twice, out of the table or live", id)
		}
		free[id] = true
	}
	for i := range t.blocks {
		b := &t.blocks[i]
		id := BlockID(i)
		if !b.live {
			if !free[uint32(i)] {
				bad("slot %d is dead and not free", i)
			}
			continue
		}
		a.live += b.size
		states := 0
		switch {
		case b.fresh:
			states++
			a.fresh += b.size
			if b.dev != 0 || b.host != nil {
				bad("block %d is fresh with storage (device %#x, host %v)", i, b.dev, b.host != nil)
			}
		case b.dev != 0:
			states++
			a.device += b.size
		case b.host != nil && b.hostValid:
			states++
			a.hostOnly += b.size
		}
		if states != 1 {
			bad("block %d is in no state: device %#x, host %v (valid %v)", i, b.dev, b.host != nil, b.hostValid)
		}
		if b.host != nil {
			a.hostHeld += b.size
			if uintptr(len(b.host)) != b.size {
				bad("block %d: host buffer of %d bytes for a block of %d", i, len(b.host), b.size)
			}
		}
		if b.pins > 0 {
			a.pinned += b.size
			a.pinnedBlocks++
			if b.dev == 0 {
				bad("block %d is acquired %d times and not on the device", i, b.pins)
			}
		}
		if b.hostWrite && (b.hostPins == 0 || b.dev != 0) {
			bad("block %d is acquired on the host for writing with %d host acquisitions, device %#x", i, b.hostPins, b.dev)
		}
		var pins int32
		for _, u := range b.uses {
			pins += u.n
		}
		if pins != b.pins {
			bad("block %d: %d acquisitions, %d counted by stream", i, b.pins, pins)
		}
		if b.dev != 0 && b.pins == 0 {
			evictable[id] = true
		}
		if b.hostRead {
			held.reads++
			if b.dev != 0 || b.host == nil {
				bad("block %d: host buffer read by a failed restore, device %#x, host %v", i, b.dev, b.host != nil)
			}
		}
	}
	if a != t.acct {
		bad("accounts %+v, the blocks sum to %+v", t.acct, a)
	}
	if t.builtinPolicy() { // a user's Policy's mistakes are its own (candidate, PolicyErrors)
		t.policy.Walk(func(id BlockID) bool {
			if !evictable[id] {
				bad("the policy holds block %d, which is not evictable", id)
			}
			delete(evictable, id)
			return true
		})
		for id := range evictable {
			bad("evictable block %d is not in the policy", id)
		}
	}
	var spare uintptr
	for _, run := range t.spare.runs {
		for _, d := range run {
			spare += d.size
		}
	}
	for _, l := range t.spare.lists {
		spare += uintptr(len(l.ps)) * l.size
	}
	if spare != t.spare.bytes {
		bad("spare VRAM counts %d bytes, its blocks %d", t.spare.bytes, spare)
	}
	for _, c := range t.held.list {
		for _, d := range c.dev {
			held.dev += d.size
		}
		for _, b := range c.host {
			held.host += uintptr(len(b))
		}
	}
	if held.dev != t.held.dev || held.host != t.held.host {
		bad("memory held back counts %d bytes of VRAM and %d of host buffers, its list %d and %d", t.held.dev, t.held.host, held.dev, held.host)
	}
	if held.reads != t.held.reads {
		bad("%d blocks counted with host buffers read by a failed restore, %d marked",
			t.held.reads, held.reads)
	}
	if err := t.verifyBatches(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// verifyBatches checks the batches in flight (t.mu held): the lists are sound (streamq's
// Verify), and each direction's batches are on its stream, each with its event, numbered in a
// row, oldest first, from the one after the newest completed (pending) to the newest issued.
func (t *Tier) verifyBatches() error {
	var errs []error
	var n [2]uint64 // the batches in flight seen, per direction
	check := func(s streamq.Stream, c completion) {
		if c.dir != dirH2D && c.dir != dirD2H {
			errs = append(errs, fmt.Errorf("a batch of direction %d is in flight", c.dir))
			return
		}
		stream := t.engine.stream(c.dir)
		n[c.dir]++
		switch want := t.batches.done[c.dir] + n[c.dir]; {
		case uintptr(stream) != s:
			errs = append(errs, fmt.Errorf("batch %d of direction %d waits on stream %#x, not its own %#x", c.seq, c.dir, s, stream))
		case c.ev == 0:
			errs = append(errs, fmt.Errorf("batch %d of direction %d is in flight with no event", c.seq, c.dir))
		case c.seq != want:
			errs = append(errs, fmt.Errorf("batch %d of direction %d is in flight where batch %d should be (%d completed)", c.seq, c.dir, want, t.batches.done[c.dir]))
		}
	}
	err := t.batches.lists.Verify(func(s streamq.Stream, marked, open []completion) {
		for _, c := range marked {
			check(s, c)
		}
		for _, c := range open {
			check(s, c)
		}
	})
	if err != nil {
		errs = append(errs, err)
	}
	for dir := range n {
		if t.batches.done[dir]+n[dir] != t.batches.issued[dir] {
			errs = append(errs, fmt.Errorf("direction %d: %d batches issued, %d completed, %d in flight", dir, t.batches.issued[dir], t.batches.done[dir], n[dir]))
		}
	}
	return errors.Join(errs...)
}

// unlock checks the tier's accounting (checkInvariants, in builds with invariants.Enabled
// only: in others the check is compiled out) and lets go of t.mu. The exported calls that
// change the tier defer it in place of t.mu.Unlock: one deferred call, not two, on hot paths
// such as Release.
func (t *Tier) unlock(where string) {
	if invariants.Enabled {
		t.checkInvariants(where)
	}
	t.mu.Unlock()
}

// checkInvariants panics when verify finds the accounting broken, when internal/invariants says
// a check is due (every call with the tag invariants; one in invariants.RaceEvery under -race
// alone). t.mu is held.
func (t *Tier) checkInvariants(where string) {
	if t.closed || !invariants.Due(&t.checks) {
		return
	}
	if err := t.verify(); err != nil {
		panic(fmt.Sprintf("uvm: invariant broken after %s: %v", where, err))
	}
}

// builtinPolicy reports whether the tier's Policy is one of the package's (LRU, TwoQ), whose
// order verify checks against the blocks.
func (t *Tier) builtinPolicy() bool {
	switch t.policy.(type) {
	case *lru, *twoQ:
		return true
	}
	return false
}
