package arena

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestFreeSaysWhatIsWrong: Free of a span none of whose chunks is in use says double free; of
// a span only some of whose chunks are (two spans' chunks as one, one freed) says how many are
// free and which first, and does not call it a double free. Neither frees anything.
func TestFreeSaysWhatIsWrong(t *testing.T) {
	a := newTestArena(t, Options{Capacity: 64 << 20})
	s1, err := a.Alloc(DefaultChunkSize, DefaultChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := a.Alloc(2*DefaultChunkSize, DefaultChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	if s2.ID != s1.ID+1 {
		t.Fatalf("spans at chunks %d and %d: want adjacent", s1.ID, s2.ID)
	}
	if err := a.Free(s1); err != nil {
		t.Fatal(err)
	}
	err = a.Free(s1)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "double free") {
		t.Errorf("second Free: %v, want ErrInvalid, a double free", err)
	}
	both := Span{Base: s1.Base, Size: s1.Size + s2.Size, ID: s1.ID, N: 3}
	err = a.Free(both)
	if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "double free") ||
		!strings.Contains(err.Error(), fmt.Sprintf("1 of its chunks free, chunk %d first", s1.ID)) {
		t.Errorf("Free of a span partly in use: %v", err)
	}
	if st := a.Stats(); st.ChunksInUse != 2 {
		t.Errorf("%d chunks in use after the refused frees, want s2's 2", st.ChunksInUse)
	}
	if err := a.Free(s2); err != nil {
		t.Errorf("Free of the span still in use: %v", err)
	}
}
