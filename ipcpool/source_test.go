package ipcpool

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
)

// TestSourceReleaseTwice: a region of the pool given back twice, or one the source never lent,
// is refused, and its grants are given back to the owner once. Before, a second Release gave
// the run back again (the owner could have lent it to another process since) and counted the
// grants held below zero.
func TestSourceReleaseTwice(t *testing.T) {
	_, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{})
	before := p.src.grantsHeld()
	r, err := p.src.Reserve(p.src.grantSize, p.src.grantSize)
	must(t, "Reserve", err)
	must(t, "Release", p.src.Release(r))
	if err := p.src.Release(r); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("a second Release of a region: %v, want arena.ErrInvalid", err)
	}
	forged := &arena.Region{Base: r.Base, Size: r.Size, Handle: [2]int{-1, 2}}
	if err := p.src.Release(forged); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("a Release of a run out of range: %v, want arena.ErrInvalid", err)
	}
	if n := p.src.grantsHeld(); n != before {
		t.Errorf("grants held after the Releases: %d, want %d", n, before)
	}
}
