package debugpage

import (
	"cmp"
	"slices"
	"strings"
)

// Site is an allocation site with the live buffers it allocated, as the page and stats.json
// list the top ones.
type Site struct {
	// Frames is the stack that called Alloc, innermost first.
	Frames []string `json:"frames"`
	// Buffers is the number of live buffers allocated there, Bytes their bytes asked.
	Buffers int `json:"buffers"`
	Bytes   int `json:"bytes"`
}

// topSites sums the live buffers of bs by allocation site (the whole stack) and returns the
// topListed sites with the most bytes, most first; none when no site is recorded.
func topSites(bs []Buffer) []Site {
	by := map[string]*Site{}
	for _, b := range bs {
		if len(b.Site) == 0 {
			continue
		}
		k := strings.Join(b.Site, "\n")
		s := by[k]
		if s == nil {
			s = &Site{Frames: b.Site}
			by[k] = s
		}
		s.Buffers++
		s.Bytes += b.Size
	}
	out := make([]Site, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b Site) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), cmp.Compare(strings.Join(a.Frames, "\n"), strings.Join(b.Frames, "\n")))
	})
	return out[:min(len(out), topListed)]
}
