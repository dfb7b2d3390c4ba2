package copyengine

// The checks of a batch before anything is queued: every job on its own (ErrInvalidJob), then
// the batch's ranges against each other (ErrOverlap), in one radix sort and one sweep.

import (
	"fmt"
	"slices"
)

// span is a job's range [lo, hi&^dstBit) for the overlap check; dstBit in hi marks a
// destination (no address reaches the top bit: user space ends far below it).
type span struct{ lo, hi uintptr }

const dstBit = ^(^uintptr(0) >> 1)

// check refuses invalid and overlapping jobs, and returns the bytes of the batch (the sum
// saturates).
func (b *Batcher) check(jobs []Job) (uintptr, error) {
	var total uintptr
	for i, j := range jobs {
		d, s, n := uintptr(j.Dst), uintptr(j.Src), uintptr(j.Len)
		if j.Len <= 0 || d == 0 || s == 0 || d+n < d || s+n < s || (d+n)&dstBit != 0 || (s+n)&dstBit != 0 {
			return 0, fmt.Errorf("%w: job %d of %d: %d bytes from %#x to %#x", ErrInvalidJob, i, len(jobs), j.Len, j.Src, j.Dst)
		}
		total += min(n, ^uintptr(0)-total)
	}
	if b.trust {
		return total, nil
	}
	b.spans = b.spans[:0]
	for _, j := range jobs {
		d, s, n := uintptr(j.Dst), uintptr(j.Src), uintptr(j.Len)
		b.spans = append(b.spans, span{d, (d + n) | dstBit}, span{s, s + n})
	}
	b.spare = slices.Grow(b.spare[:0], len(b.spans))[:len(b.spans)]
	sorted := sortSpans(b.spans, b.spare)
	// Sweep in address order: a range overlaps an earlier one exactly when it starts below the
	// highest end seen so far; it is a conflict when either range is a destination.
	var dstEnd, srcEnd uintptr // the highest ends of the destinations and sources seen
	for _, sp := range sorted {
		dst, hi := sp.hi&dstBit != 0, sp.hi&^dstBit
		if sp.lo < dstEnd || (dst && sp.lo < srcEnd) {
			return 0, fmt.Errorf("%w: [%#x, %#x) overlaps an earlier range of the batch", ErrOverlap, sp.lo, hi)
		}
		if dst {
			dstEnd = max(dstEnd, hi)
		} else {
			srcEnd = max(srcEnd, hi)
		}
	}
	return total, nil
}

// sortSpans sorts s by lo with a least-significant-digit radix sort over the bits in which the
// spans' starts differ, 8 bits a pass, with tmp (as long as s) as scratch, and returns the
// sorted slice: s or tmp. A batch's 2n ranges sort in O(n) (at most four passes for ranges
// within 4 GiB of each other), where a comparison sort cost 190 ns per job at 4096 jobs on an
// H100's host.
func sortSpans(s, tmp []span) []span {
	if len(s) == 0 {
		return s
	}
	var differ uintptr
	for _, x := range s {
		differ |= x.lo ^ s[0].lo
	}
	var count [256]int
	for shift := uint(0); shift < 64 && differ>>shift != 0; shift += 8 {
		if byte(differ>>shift) == 0 {
			continue
		}
		clear(count[:])
		for _, x := range s {
			count[byte(x.lo>>shift)]++
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for _, x := range s {
			d := byte(x.lo >> shift)
			tmp[count[d]] = x
			count[d]++
		}
		s, tmp = tmp, s
	}
	return s
}
