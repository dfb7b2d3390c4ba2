package arena

import "github.com/pinmalloc/pinmalloc/internal/align"

// # Placement
//
// A span goes first fit, in the first region with room (place), unless memory freed earlier
// waits for the purge: then at the place of the most such memory, so that a span reuses what
// is committed (no provider call, no new memory) rather than committing new memory beside
// memory about to be decommitted. On the serving trace replayed without its pauses, whose
// frees come faster than the purge delay, first fit took fresh chunks while up to 146 MiB of
// freed ones waited (1.25 to 1.33 times the peak live bytes held; issue 38). The search looks
// at the free runs that hold a stale chunk (marked for the purge) only, at most
// placeCandidates of them, in address order.

// placeCandidates bounds the free runs placeCommitted weighs for one span.
const placeCandidates = 64

// placeAny finds a free run for size bytes in the regions there are: where the most memory
// waiting for the purge lies, if any does, else first fit.
func (a *Arena) placeAny(size, alignment uintptr) (*region, Span, bool) {
	if r, s, ok := a.placeCommitted(size, alignment); ok {
		return r, s, true
	}
	for _, r := range *a.regions.Load() {
		if s, ok := a.place(r, size, alignment); ok {
			return r, s, true
		}
	}
	return nil, Span{}, false
}

// placeCommitted finds the free run, among those holding a stale chunk, where a span of size
// bytes covers the most committed granules, and places the span at its start (aligned); ok is
// false when no such run fits it, or none holds committed memory.
func (a *Arena) placeCommitted(size, alignment uintptr) (best *region, span Span, ok bool) {
	most, seen := 0, 0
	for _, r := range *a.regions.Load() {
		if r.r.Committed {
			continue
		}
		for i := r.stale.Next(0, r.nchunks, true); i < r.nchunks && seen < placeCandidates; i = r.stale.Next(i+1, r.nchunks, true) {
			if r.used.Get(i) {
				continue
			}
			seen++
			// The free run around stale chunk i: [s, e).
			s := i
			for s > 0 && !r.used.Get(s-1) {
				s--
			}
			e := r.used.Next(i, r.nchunks, true)
			lo := r.grid + uintptr(s)<<a.shift
			hi := min(r.grid+uintptr(e)<<a.shift, r.end)
			base, err := align.Up(lo, alignment)
			if err != nil || base >= hi || size > hi-base {
				i = e
				continue
			}
			glo, ghi := r.granules(base, size)
			if n := r.commit.Count(glo, ghi); n > most {
				first := int((base - r.grid) >> a.shift)
				last := int((base + size - 1 - r.grid) >> a.shift)
				best, span, most = r, Span{Base: base, Size: size, ID: r.firstID + ChunkID(first), N: last - first + 1}, n
			}
			i = e // the rest of this run is weighed
		}
	}
	return best, span, best != nil
}
