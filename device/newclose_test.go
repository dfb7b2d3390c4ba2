package device

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeNewSaysArenaCloseRefused: New that fails after it made its arena (a capacity beyond
// the heap's 128 TiB) closes the arena, which gives back what its provider kept
// (arena.KeptReleaser): here a provider given in Options, shared with another heap, that keeps
// a granule whose release the driver refused when a commit failed. When the driver refuses that
// release again, New's error says so, once, besides its own. Before, New dropped the arena's
// Close error.
func TestFakeNewSaysArenaCloseRefused(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	// The commit of a small block's segment (one granule, one Commit: no other commit releases
	// the handle first) whose cuMemSetAccess fails is undone; the undo's release, refused,
	// strands the granule's handle in the provider.
	f.FailAfter(fakecuda.CallAccess, 0, fakecuda.ResultInvalidValue)
	f.FailAfter(fakecuda.CallRelease, 0, fakecuda.ResultInvalidValue)
	if _, err := h.Alloc(4096, 0); err == nil {
		t.Fatal("Alloc with cuMemSetAccess refused: no error")
	}
	f.FailAfter(fakecuda.CallRelease, 0, fakecuda.ResultInvalidValue)
	h2, err := New(public(dev), Options{Provider: h.a.Provider(), Capacity: 1 << 48})
	if h2 != nil {
		t.Fatal("New with a capacity beyond the heap's returned a heap")
	}
	if !errors.Is(err, heap.ErrInvalidArgument) || !errors.Is(err, arena.ErrCommit) ||
		strings.Count(err.Error(), "cuMemRelease") != 1 {
		t.Fatalf("New, its arena's Close refused: %v; want its own error and the refusal "+
			"(arena.ErrCommit)", err)
	}
}
