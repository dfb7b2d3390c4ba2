package arena

import (
	"errors"
	"testing"
)

// TestMadeUpSpanRefused: Free and ReserveNext take only a span as Alloc or Reserve made it. A
// span whose Base was moved into another chunk was freed as the chunks its ID names (the
// span at its Base stayed in use, the one named freed: a Free of the wrong memory, no error);
// and ReserveNext of a made-up span whose chunks are not in use reserved the chunks after it.
func TestMadeUpSpanRefused(t *testing.T) {
	a := newTestArena(t, Options{Capacity: 64 << 20, PurgeDelay: -1})
	s, err := a.Alloc(a.ChunkSize(), 1)
	if err != nil {
		t.Fatal(err)
	}
	u, err := a.Alloc(a.ChunkSize(), 1)
	if err != nil {
		t.Fatal(err)
	}
	moved := s
	moved.Base = u.Base // u's memory, s's chunk
	if err := a.Free(moved); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Free of span %d with the Base of span %d: %v, want ErrInvalid", s.ID, u.ID, err)
	}
	grown := s
	grown.Size = 2 * a.ChunkSize() // past its one chunk
	if err := a.Free(grown); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Free of a span of one chunk grown to two chunks' size: %v, want ErrInvalid", err)
	}
	if st := a.Stats(); st.ChunksInUse != 2 {
		t.Fatalf("%d chunks in use after two refused frees, want 2", st.ChunksInUse)
	}
	free := Span{Base: u.Base + a.ChunkSize(), Size: a.ChunkSize(), ID: u.ID + 1, N: 1} // not in use
	if r, err := a.ReserveNext(free, 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ReserveNext after a span whose chunk is free: %+v, %v; want ErrInvalid", r, err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(u); err != nil {
		t.Fatal(err)
	}
}
