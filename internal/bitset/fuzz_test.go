package bitset

import "testing"

// FuzzOps runs the operations the fuzzer's bytes spell, three bytes an operation, on a set of
// n bits and on a []bool model: SetRange, then Count, AnyAndNot, Next and Runs of set and of
// clear bits over another range, which must agree with the model, runs maximal and in order.
func FuzzOps(f *testing.F) {
	f.Add(uint16(130), []byte{0, 5, 200, 1, 64, 128, 2, 0, 130})
	f.Add(uint16(64), []byte{0, 0, 64, 3, 63, 64})
	f.Add(uint16(1), []byte{1, 0, 1})
	f.Fuzz(func(t *testing.T, size uint16, ops []byte) {
		n := int(size%1000) + 1
		b, c := New(n), New(n)
		mb, mc := make([]bool, n), make([]bool, n)
		for len(ops) >= 3 {
			op, x, y := ops[0], int(ops[1])*n/256, int(ops[2])*n/255
			ops = ops[3:]
			lo, hi := min(x, y), max(x, y)
			s, m := b, mb
			if op&4 != 0 {
				s, m = c, mc
			}
			v := op&1 != 0
			if op&2 == 0 {
				s.SetRange(lo, hi, v)
				for i := lo; i < hi; i++ {
					m[i] = v
				}
				continue
			}
			count, andNot, next := 0, false, hi
			for i := lo; i < hi; i++ {
				if mb[i] {
					count++
					andNot = andNot || !mc[i]
				}
				if mb[i] == v && next == hi {
					next = i
				}
			}
			if got := b.Count(lo, hi); got != count {
				t.Fatalf("Count(%d, %d) = %d, want %d", lo, hi, got, count)
			}
			if got := b.AnyAndNot(c, lo, hi); got != andNot {
				t.Fatalf("AnyAndNot(%d, %d) = %v, want %v", lo, hi, got, andNot)
			}
			if got := b.Next(lo, hi, v); got != next {
				t.Fatalf("Next(%d, %d, %v) = %d, want %d", lo, hi, v, got, next)
			}
			seen := lo
			_ = b.Runs(lo, hi, v, func(s, e int) error {
				if s < seen || s >= e || e > hi || s > lo && s == seen || e < hi && mb[e] == v {
					t.Fatalf("Runs(%d, %d, %v): run [%d, %d) after %d", lo, hi, v, s, e, seen)
				}
				for i := seen; i < e; i++ {
					if (mb[i] == v) != (i >= s) {
						t.Fatalf("Runs(%d, %d, %v): bit %d misplaced by run [%d, %d)", lo, hi, v, i, s, e)
					}
				}
				seen = e
				return nil
			})
			for i := seen; i < hi; i++ {
				if mb[i] == v {
					t.Fatalf("Runs(%d, %d, %v): bit %d in no run", lo, hi, v, i)
				}
			}
		}
	})
}
