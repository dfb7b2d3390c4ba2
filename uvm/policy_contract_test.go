package uvm_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// liar is a Policy that breaks the contract: its Walk yields, before LRU's order, a BlockID no
// block has, then every block it was ever told of, acquired or not.
type liar struct {
	uvm.Policy
	seen []uvm.BlockID
}

func (p *liar) note(id uvm.BlockID) {
	for _, s := range p.seen {
		if s == id {
			return
		}
	}
	p.seen = append(p.seen, id)
}

func (p *liar) Used(id uvm.BlockID)   { p.note(id); p.Policy.Used(id) }
func (p *liar) Pinned(id uvm.BlockID) { p.note(id); p.Policy.Pinned(id) }

func (p *liar) Walk(yield func(uvm.BlockID) bool) {
	if !yield(1 << 30) {
		return
	}
	for _, id := range p.seen {
		if !yield(id) {
			return
		}
	}
	p.Policy.Walk(yield)
}

// TestPolicyBreakingContract: a Policy whose Walk yields an acquired block, a block twice and a
// BlockID out of range gets no acquired block evicted and crashes nothing: the tier passes
// over those and counts them. Before, the BlockID out of range panicked, and without it the
// acquired block was evicted under its user, its VRAM reused while the user's kernel ran.
func TestPolicyBreakingContract(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 16 * kib
	var pinnedOut int
	var held uvm.Handle
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 4 * size, Policy: &liar{Policy: uvm.LRU()},
		OnMigrate: func(m uvm.Migration) {
			if !m.ToDevice && m.Handle == held {
				pinnedOut++
			}
		}})
	var err error
	held, err = tr.Alloc(size)
	must(t, err)
	_, err = tr.Acquire(held, 0, uvm.Write)
	must(t, err)
	for range 16 { // each needs room: evictions under pressure
		h, err := tr.Alloc(size)
		must(t, err)
		_, err = tr.Acquire(h, 0, uvm.Write)
		must(t, err)
		must(t, tr.Release(h, 0))
	}
	if pinnedOut != 0 {
		t.Errorf("the acquired block was evicted %d times", pinnedOut)
	}
	if st := tr.Stats(); st.PolicyErrors == 0 {
		t.Error("Stats.PolicyErrors = 0: the tier counted none of the policy's mistakes")
	}
	must(t, tr.Release(held, 0))
	must(t, tr.Sync())
}
