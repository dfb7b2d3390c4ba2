package arena

import (
	"errors"
	"math"
	"testing"
)

// TestSpanCountOverflow hands Free and ReserveNext chunk counts whose sum with the span's first
// chunk overflows an int: each must be refused, and the arena's count of chunks in use stay
// what it was. ReserveNext took n = MaxInt chunks after a span (first+n wrapped negative and
// passed the bound check), and Free of a span starting past the region's first chunk with
// N = MaxInt passed its check the same way.
func TestSpanCountOverflow(t *testing.T) {
	a := newTestArena(t, Options{Capacity: 64 << 20})
	s0, err := a.Reserve(2<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.Reserve(2<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID == 0 {
		t.Fatalf("second span at chunk %d", s.ID)
	}
	for _, n := range []int{math.MaxInt, math.MaxInt - 1, math.MaxInt - int(s.ID)} {
		if x, err := a.ReserveNext(s, n); err == nil {
			t.Errorf("ReserveNext(%d chunks) = %+v, nil", n, x)
		}
		big := s
		big.N = n
		if x, err := a.ReserveNext(big, 1); err == nil {
			t.Errorf("ReserveNext after a span of %d chunks = %+v, nil", n, x)
		}
		if err := a.Free(big); !errors.Is(err, ErrInvalid) {
			t.Errorf("Free of a span of %d chunks: %v", n, err)
		}
	}
	if st := a.Stats(); st.ChunksInUse != 2 {
		t.Fatalf("chunks in use %d after refused calls, want 2", st.ChunksInUse)
	}
	for _, x := range []Span{s, s0} {
		if err := a.Free(x); err != nil {
			t.Fatal(err)
		}
	}
}
