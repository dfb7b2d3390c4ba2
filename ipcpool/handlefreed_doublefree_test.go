package ipcpool

import (
	"errors"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFreeAfterFreeHandleIsDoubleFree: the holder's Free of a buffer a peer freed by its handle
// is a double free, whenever it comes. It used to match ErrStaleHandle alone (kind ErrNotOwned)
// while the retirement waited in the holder's ring, and pinned.ErrDoubleFree once the holder's
// drainer had taken it in: a caller that tests pinmalloc.ErrDoubleFree missed the first. The
// owner's drainer is held off (an interval of an hour, no Collect) so that the Free meets the
// retirement still in the ring; the pool stays usable.
func TestFreeAfterFreeHandleIsDoubleFree(t *testing.T) {
	w, path := serveTest(t, Options{DrainInterval: time.Hour})
	p := attachTest(t, path, AttachOptions{})
	b, err := w.Alloc(64)
	must(t, "owner Alloc", err)
	h, err := w.Handle(b)
	must(t, "Handle", err)
	must(t, "FreeHandle", p.FreeHandle(h))
	err = w.Free(b)
	if !errors.Is(err, pinned.ErrDoubleFree) || !errors.Is(err, pinmalloc.ErrDoubleFree) || !errors.Is(err, ErrStaleHandle) {
		t.Errorf("the holder's Free after a peer's FreeHandle, not taken in yet: %v; want pinned.ErrDoubleFree (and ErrStaleHandle)", err)
	}
	w.Collect()
	if err := w.Free(b); !errors.Is(err, pinmalloc.ErrDoubleFree) {
		t.Errorf("the holder's Free after a peer's FreeHandle, taken in: %v; want pinned.ErrDoubleFree", err)
	}
	if live := w.Pool.Stats().Live; live != 0 {
		t.Errorf("%d buffers live after the take-in", live)
	}
	c, err := w.Alloc(64)
	must(t, "Alloc after", err)
	must(t, "Free after", w.Free(c))
}
