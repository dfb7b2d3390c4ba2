package pinned

import (
	"bytes"
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/alloctrace"
)

// TestTraceWrittenAtRelease: the frees that release a closed pool's memory after Close (the
// last buffer's Free after ErrLiveBlocks) are written out with the release, as Close writes
// out what came before: the trace ended with those buffers live, and a Close after the
// release (ErrClosed) wrote nothing either.
func TestTraceWrittenAtRelease(t *testing.T) {
	var out bytes.Buffer
	p, err := New(Options{Backend: Pageable, Capacity: 64 << 20, Trace: &out})
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); !errors.Is(err, ErrLiveBlocks) {
		t.Fatalf("Close with a live buffer: %v", err)
	}
	if err := p.Free(a); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); !st.Released {
		t.Fatalf("not released by the last Free: %+v", st)
	}
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Close after the release: %v", err)
	}
	evs, err := alloctrace.Read(&out)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Free || !evs[1].Free || evs[1].ID != evs[0].ID {
		t.Fatalf("trace after the release: %+v, want the allocation and its free", evs)
	}
}
