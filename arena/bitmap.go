package arena

import "math/bits"

// bitmap is a plain (single-writer, under the arena's lock) bit set.
type bitmap []uint64

func newBitmap(n int) bitmap { return make(bitmap, (n+63)/64) }

func (b bitmap) get(i int) bool { return b[i>>6]&(1<<(uint(i)&63)) != 0 }

// words calls f with each word index of [lo, hi) and the mask of the range's bits in it; f
// returns false to stop.
func words(lo, hi int, f func(w int, m uint64) bool) {
	for i := lo; i < hi; {
		off := uint(i) & 63
		n := min(64-int(off), hi-i)
		m := ^uint64(0)
		if n < 64 {
			m = (1<<uint(n) - 1) << off
		}
		if !f(i>>6, m) {
			return
		}
		i += n
	}
}

// setRange sets (v true) or clears bits [lo, hi).
func (b bitmap) setRange(lo, hi int, v bool) {
	words(lo, hi, func(w int, m uint64) bool {
		if v {
			b[w] |= m
		} else {
			b[w] &^= m
		}
		return true
	})
}

// count returns the number of set bits in [lo, hi).
func (b bitmap) count(lo, hi int) (c int) {
	words(lo, hi, func(w int, m uint64) bool {
		c += bits.OnesCount64(b[w] & m)
		return true
	})
	return c
}

// anyAndNot reports whether some index in [lo, hi) is set in b and clear in c.
func (b bitmap) anyAndNot(c bitmap, lo, hi int) (found bool) {
	words(lo, hi, func(w int, m uint64) bool {
		found = b[w]&^c[w]&m != 0
		return !found
	})
	return found
}

// runs calls f for each maximal run [s, e) inside [lo, hi) whose bits equal v.
func (b bitmap) runs(lo, hi int, v bool, f func(s, e int) error) error {
	for i := lo; i < hi; {
		if b.get(i) != v {
			i = b.next(i, hi, v)
			continue
		}
		j := b.next(i, hi, !v)
		if err := f(i, j); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// next returns the first index in [i, hi) whose bit equals v, or hi.
func (b bitmap) next(i, hi int, v bool) int {
	for i < hi {
		w := b[i>>6]
		if !v {
			w = ^w
		}
		w >>= uint(i) & 63
		if w != 0 {
			return min(i+bits.TrailingZeros64(w), hi)
		}
		i = (i | 63) + 1
	}
	return hi
}
