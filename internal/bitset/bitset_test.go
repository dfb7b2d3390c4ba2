package bitset

import (
	"math/rand/v2"
	"testing"
)

// TestSet checks the word-at-a-time operations against a plain []bool model.
func TestSet(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 300
	b, c := New(n), New(n)
	mb, mc := make([]bool, n), make([]bool, n)
	for step := range 5000 {
		lo := r.IntN(n)
		hi := lo + r.IntN(n-lo+1)
		v := r.IntN(2) == 0
		if step%2 == 0 {
			b.SetRange(lo, hi, v)
			for i := lo; i < hi; i++ {
				mb[i] = v
			}
		} else {
			c.SetRange(lo, hi, v)
			for i := lo; i < hi; i++ {
				mc[i] = v
			}
		}
		lo = r.IntN(n)
		hi = lo + r.IntN(n-lo+1)
		count, andNot := 0, false
		for i := lo; i < hi; i++ {
			if mb[i] {
				count++
				andNot = andNot || !mc[i]
			}
		}
		if got := b.Count(lo, hi); got != count {
			t.Fatalf("step %d: count(%d,%d) = %d, want %d", step, lo, hi, got, count)
		}
		if got := b.AnyAndNot(c, lo, hi); got != andNot {
			t.Fatalf("step %d: anyAndNot(%d,%d) = %v, want %v", step, lo, hi, got, andNot)
		}
		seen := lo
		_ = b.Runs(lo, hi, true, func(s, e int) error {
			for i := seen; i < s; i++ {
				if mb[i] {
					t.Fatalf("step %d: set bit %d outside every run", step, i)
				}
			}
			for i := s; i < e; i++ {
				if !mb[i] {
					t.Fatalf("step %d: run [%d,%d) has a clear bit %d", step, s, e, i)
				}
			}
			seen = e
			return nil
		})
	}
}
