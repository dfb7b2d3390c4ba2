package pinned_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFreeSharedHeldNeverShared: FreeShared of a buffer never shared that a Hold keeps (a
// transfer under way) is refused with ErrNotOwned, as for any buffer never shared, in a pool
// without stream order, where a shared buffer's tag tells it from a held one. It took the
// Hold's hold bit for a Share's, deferred the free to the Release, and the Release freed the
// caller's buffer under it.
func TestFreeSharedHeldNeverShared(t *testing.T) {
	for _, o := range []pinned.Options{{Backend: pinned.Pageable}, {Backend: pinned.Pageable, ZeroOnFree: true}} {
		p, _ := newSharedPool(t, o)
		c, err := p.Alloc(4096)
		ok(t, "Alloc", err)
		c[0] = 9
		h, err := p.Hold(c)
		ok(t, "Hold", err)
		if err := p.FreeShared(c); !errors.Is(err, pinned.ErrNotOwned) {
			t.Errorf("zero %v: FreeShared of a held buffer never shared: %v, want ErrNotOwned", o.ZeroOnFree, err)
		}
		ok(t, "Release", h.Release())
		if c[0] != 9 || live(t, p) != 1 {
			t.Fatalf("zero %v: FreeShared of a held buffer never shared scrubbed it (%d) or freed it at the Release (%d live)",
				o.ZeroOnFree, c[0], live(t, p))
		}
		ok(t, "Free", p.Free(c))
		ok(t, "Close", p.Close())
	}
}
