// Package bitset is a plain bit set over [0, n), operated a word at a time: the arena's per-chunk
// and per-granule maps, and the VMM providers' map of mapped granules. It has no lock: each
// owner serializes its writers (the arena's lock, a provider's).
package bitset

import "math/bits"

// Set is a set of indexes in [0, n) for the n it was made with.
type Set []uint64

// New returns an empty Set of n indexes.
func New(n int) Set { return make(Set, (n+63)/64) }

// Get reports whether i is in the set.
func (b Set) Get(i int) bool { return b[i>>6]&(1<<(uint(i)&63)) != 0 }

// masks returns the first and last word of the non-empty range [lo, hi) and the masks of the
// range's bits in them (the same word when wlo == whi: use first&last). Callers loop over the
// words between with the full mask, about a cycle a word for a huge object's granules.
func masks(lo, hi int) (wlo, whi int, first, last uint64) {
	return lo >> 6, (hi - 1) >> 6, ^uint64(0) << (uint(lo) & 63), ^uint64(0) >> (63 - uint(hi-1)&63)
}

// SetRange sets (v true) or clears bits [lo, hi).
func (b Set) SetRange(lo, hi int, v bool) {
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

// Count returns the number of set bits in [lo, hi).
func (b Set) Count(lo, hi int) int {
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

// AnyAndNot reports whether some index in [lo, hi) is set in b and clear in c.
func (b Set) AnyAndNot(c Set, lo, hi int) bool {
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

// Runs calls f for each maximal run [s, e) inside [lo, hi) whose bits equal v; it stops at the
// first error f returns and returns it.
func (b Set) Runs(lo, hi int, v bool, f func(s, e int) error) error {
	for i := lo; i < hi; {
		if b.Get(i) != v {
			i = b.Next(i, hi, v)
			continue
		}
		j := b.Next(i, hi, !v)
		if err := f(i, j); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// Next returns the first index in [i, hi) whose bit equals v, or hi.
func (b Set) Next(i, hi int, v bool) int {
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
