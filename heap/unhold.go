package heap

import (
	"fmt"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// Unhold clears the hold of the live, held block that starts at p, allocated with n bytes, and
// leaves it live: for a holder whose outside use of the block ended before anyone freed it (a
// network transfer from a buffer still in use), so that the block's next free takes it as it
// takes any live block. It is the one way a hold ends other than FreeHeld. It refuses, and
// changes nothing, a block that is not live and held (ErrInvalidArgument; ErrDoubleFree for one
// not live), or not of n bytes (ErrSizeMismatch). Any goroutine may call it; a free racing it
// either finds the block held (and is refused, as before) or finds it live and frees it.
func (g *Group) Unhold(p, n uintptr) error {
	if invariants.Enabled {
		g.foreignBegun.Add(1) // see checkInvariants
		defer g.foreignEnded.Add(1)
	}
	pg, idx, ok := g.find(p)
	if !ok {
		return g.whyNot(p)
	}
	want := stateOf(n)
	if n == 0 || want == stateMax && pg.objSize.Load() != n {
		return fmt.Errorf("%w: %#x unheld with %d bytes", ErrSizeMismatch, p, n)
	}
	pg.enterHold() // the page is shared already (the hold shared it): no owner's plain store races
	defer pg.leave(true)
	w := &pg.state[idx]
	for {
		old := atomic.LoadUint32(w)
		if old == 0 || old&freedRemote != 0 || old&^held != want {
			return pg.freeError(idx, old, p, n, old&held) // not live, or of another size
		}
		if old&held == 0 {
			return fmt.Errorf("%w: Unhold of %#x, which is not held", ErrInvalidArgument, p)
		}
		if atomic.CompareAndSwapUint32(w, old, old&^held) {
			return nil
		}
	}
}
