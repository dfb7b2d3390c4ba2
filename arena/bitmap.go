package arena

import "math/bits"

// bitmap is a plain (single-writer, under the arena's lock) bit set.
type bitmap []uint64

func newBitmap(n int) bitmap { return make(bitmap, (n+63)/64) }

func (b bitmap) get(i int) bool { return b[i>>6]&(1<<(uint(i)&63)) != 0 }

// masks returns the first and last word of the non-empty range [lo, hi) and the masks of the
// range's bits in them (the same word when wlo == whi: use first&last). Callers loop over the
// words between with the full mask, about a cycle a word for a huge object's granules.
func masks(lo, hi int) (wlo, whi int, first, last uint64) {
	return lo >> 6, (hi - 1) >> 6, ^uint64(0) << (uint(lo) & 63), ^uint64(0) >> (63 - uint(hi-1)&63)
}

// setRange sets (v true) or clears bits [lo, hi).
func (b bitmap) setRange(lo, hi int, v bool) {
	if lo >= hi {
		return
	}
	wlo, whi, first, last := masks(lo, hi)
	if wlo == whi {
		first &= last
	}
	set := func(w int, m uint64) {
		if v {
			b[w] |= m
		} else {
			b[w] &^= m
		}
	}
	set(wlo, first)
	if wlo == whi {
		return
	}
	fill := uint64(0)
	if v {
		fill = ^uint64(0)
	}
	mid := b[wlo+1 : whi]
	for i := range mid {
		mid[i] = fill
	}
	set(whi, last)
}

// count returns the number of set bits in [lo, hi).
func (b bitmap) count(lo, hi int) int {
	if lo >= hi {
		return 0
	}
	wlo, whi, first, last := masks(lo, hi)
	if wlo == whi {
		return bits.OnesCount64(b[wlo] & first & last)
	}
	c := bits.OnesCount64(b[wlo]&first) + bits.OnesCount64(b[whi]&last)
	for _, w := range b[wlo+1 : whi] {
		c += bits.OnesCount64(w)
	}
	return c
}

// anyAndNot reports whether some index in [lo, hi) is set in b and clear in c.
func (b bitmap) anyAndNot(c bitmap, lo, hi int) bool {
	if lo >= hi {
		return false
	}
	wlo, whi, first, last := masks(lo, hi)
	if wlo == whi {
		return b[wlo]&^c[wlo]&first&last != 0
	}
	if b[wlo]&^c[wlo]&first != 0 || b[whi]&^c[whi]&last != 0 {
		return true
	}
	cm := c[wlo+1 : whi]
	for i, w := range b[wlo+1 : whi] {
		if w&^cm[i] != 0 {
			return true
		}
	}
	return false
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
