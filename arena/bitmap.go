package arena

import "math/bits"

// bitmap is a plain (single-writer, under the arena's lock) bit set.
type bitmap []uint64

func newBitmap(n int) bitmap { return make(bitmap, (n+63)/64) }

func (b bitmap) get(i int) bool { return b[i>>6]&(1<<(uint(i)&63)) != 0 }

// setRange sets (v true) or clears bits [lo, hi).
func (b bitmap) setRange(lo, hi int, v bool) {
	for i := lo; i < hi; {
		w, off := i>>6, uint(i)&63
		n := min(64-int(off), hi-i)
		m := ^uint64(0)
		if n < 64 {
			m = (1<<uint(n) - 1) << off
		}
		if v {
			b[w] |= m
		} else {
			b[w] &^= m
		}
		i += n
	}
}

// count returns the number of set bits in [lo, hi).
func (b bitmap) count(lo, hi int) int {
	c := 0
	for i := lo; i < hi; {
		w, off := i>>6, uint(i)&63
		n := min(64-int(off), hi-i)
		m := ^uint64(0)
		if n < 64 {
			m = (1<<uint(n) - 1) << off
		}
		c += bits.OnesCount64(b[w] & m)
		i += n
	}
	return c
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

// anyAndNot reports whether some index in [lo, hi) is set in b and clear in c.
func (b bitmap) anyAndNot(c bitmap, lo, hi int) bool {
	for i := lo; i < hi; {
		w, off := i>>6, uint(i)&63
		n := min(64-int(off), hi-i)
		m := ^uint64(0)
		if n < 64 {
			m = (1<<uint(n) - 1) << off
		}
		if b[w]&^c[w]&m != 0 {
			return true
		}
		i += n
	}
	return false
}
