package uvm

import "fmt"

// Victims: which blocks an eviction takes, and how many. makeRoom evicts what a restore needs
// beyond the budget; pickVictims walks the Policy's order, coldest first: clean blocks among the
// evictWindow coldest, then any, then blocks under thrash protection when nothing else will do.

// evictWindow is how many of the coldest blocks an eviction looks at for clean ones before it
// takes any in policy order.
const evictWindow = 4

// makeRoom evicts until need more bytes fit in the budget. t.mu is held.
func (t *Tier) makeRoom(need uintptr) error {
	if err := t.poll(); err != nil {
		return err
	}
	if t.acct.device+need <= t.mem.budget {
		return nil
	}
	want := t.acct.device + need - t.mem.budget
	if got := t.pickVictims(want); got < want {
		t.unchoose(t.scratch.victims)
		return fmt.Errorf("%w: %d bytes needed, %d evictable, %d of the budget %d acquired", ErrAllPinned,
			need, got, t.acct.pinned, t.mem.budget)
	}
	return t.evict(t.scratch.victims, CausePressure)
}

// pickVictims fills t.scratch.victims with evictable blocks worth at least want bytes, if there are
// so many, and returns their bytes: clean blocks among the evictWindow coldest first, then
// any in policy order, then, if still short, blocks under thrash protection. The victims stay
// marked chosen until evict is done with them.
func (t *Tier) pickVictims(want uintptr) uintptr {
	t.scratch.victims = t.scratch.victims[:0]
	var got uintptr
	now := t.nowNanos()
	take := func(id BlockID) {
		b := &t.blocks[id]
		b.chosen = true
		t.scratch.victims = append(t.scratch.victims, id)
		got += b.size
	}
	seen := 0
	t.policy.Walk(func(id BlockID) bool {
		seen++
		if b := t.candidate(id); b != nil && b.clean() && !t.protected(b, now) {
			take(id)
		}
		return got < want && seen < evictWindow
	})
	for pass := 0; pass < 2 && got < want; pass++ {
		t.policy.Walk(func(id BlockID) bool {
			if b := t.candidate(id); b != nil && (pass == 1 || !t.protected(b, now)) {
				if pass == 1 {
					t.st.ThrashOverrides++
				}
				take(id)
			}
			return got < want
		})
	}
	return got
}

// candidate returns the block id names when it may be taken for an eviction: a live block on
// the device, acquired nowhere, not taken already. A block taken already is passed over
// uncounted: pickVictims walks the order up to three times, and each walk of a Policy that keeps
// its contract yields again the blocks an earlier one took. A Policy that breaks its contract
// (Walk yields a block acquired, evicted, freed, or no block of the tier's) costs itself its
// order, never an acquired block's bytes nor a crash: the tier passes over such a block and
// counts it (Stats.PolicyErrors). t.mu is held.
func (t *Tier) candidate(id BlockID) *block {
	if int(id) < len(t.blocks) {
		b := &t.blocks[id]
		if b.chosen {
			return nil
		}
		if b.live && b.dev != 0 && b.pins == 0 {
			return b
		}
	}
	t.st.PolicyErrors++
	return nil
}

// unchoose clears the chosen marks of ids.
func (t *Tier) unchoose(ids []BlockID) {
	for _, id := range ids {
		t.blocks[id].chosen = false
	}
}
