package heap

// The []byte view of a block, for callers outside the module (inside it, pinned uses
// internal/mem directly). It needs no lock: the block is found as Free finds it, and a live
// block's memory is committed for as long as it is live.

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// Bytes returns the live block that starts at p as a []byte whose len and cap are the size it
// was allocated with. The slice is valid until the block is freed. A heap over device memory
// gives an error wrapping arena.ErrNotHostAccessible; an address that is not the start of a
// live block of the group, the errors of Free (ErrNotOwned, ErrDoubleFree, ErrInteriorPointer).
// It makes no system call and takes no lock.
func (g *Group) Bytes(p uintptr) ([]byte, error) {
	if k := g.a.Kind(); !k.HostAccessible() {
		return nil, fmt.Errorf("heap: block %#x is %s memory: %w", p, k, arena.ErrNotHostAccessible)
	}
	pg, idx, err := g.locate(p)
	if err != nil {
		return nil, err
	}
	n := pg.liveSize(idx)
	if n == 0 {
		return nil, fmt.Errorf("%w: %#x is not a live block", ErrDoubleFree, p)
	}
	return mem.Bytes(p, n), nil
}

// Bytes is Group.Bytes for a block of any heap of h's group.
func (h *Heap) Bytes(p uintptr) ([]byte, error) { return h.g.Bytes(p) }
