package debugpage

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// The map of one source is bounded, however large the pool: drawn whole, a pool of 16 GiB of
// small buffers (8192 chunks of 32 pages each) made 62 MB of HTML and 259 MB of JSON; bounded,
// about 3 MB of HTML and 9 MB of JSON (TestHugePoolBounded). A view draws chunks in address
// order, region by region: in detail (each page a column) while the chunks and pages drawn so
// far stay within detailBudget, then flat (one column per chunk, filled as far as its blocks
// are live, its details in its hover title) up to mapBudget chunks, and then stops, saying
// what it left out, in the map and above it (stats.json: map_note). stats.json's map holds
// the chunks drawn, without the pages of those drawn flat. The figures, size classes, sites
// and buffers are of the whole source.
const (
	// detailBudget is the chunks and pages a view draws in detail.
	detailBudget = 4096
	// mapBudget is the chunks a view draws (each chunk of a run of free chunks drawn as one
	// cell counts: stats.json lists them one by one).
	mapBudget = 8192
)

// mapPlan is what a view draws of a map within its budget.
type mapPlan struct {
	// regions are the regions drawn, the first ones of the map.
	regions []regionPlan
	// flat is the chunks drawn flat; cut the chunks not drawn, free those of them with
	// nothing committed, and cutRegions the regions of which nothing was drawn.
	flat, cut, free, cutRegions int
}

// regionPlan is what a view draws of one region: the first detail of its cells in detail, the
// cells after them up to drawn flat.
type regionPlan struct {
	cells         []cell
	detail, drawn int
}

// planMap plans what a view draws of m.
func planMap(m heap.Map) mapPlan {
	var p mapPlan
	items, chunks, detailing, cutting := 0, 0, true, false
	for ri, r := range m.Arena.Regions {
		rp := regionPlan{cells: cells(r)}
		for k, c := range rp.cells {
			if cutting = cutting || chunks+c.n > mapBudget; cutting {
				break
			}
			pages := 0
			if c.n == 1 && ri < len(m.Chunks) {
				pages = len(m.Chunks[ri][c.i].Pages)
			}
			if detailing = detailing && items+c.n+pages <= detailBudget; detailing {
				items += c.n + pages
				rp.detail = k + 1
			} else {
				p.flat += c.n
			}
			chunks += c.n
			rp.drawn = k + 1
		}
		if rp.drawn > 0 || len(rp.cells) == 0 && !cutting {
			p.regions = append(p.regions, rp)
		}
		for _, c := range rp.cells[rp.drawn:] {
			p.cut += c.n
			for _, st := range r.Chunks[c.i : c.i+c.n] {
				if !st.InUse && st.Committed == 0 {
					p.free++
				}
			}
		}
		if rp.drawn == 0 && len(rp.cells) > 0 {
			p.cutRegions++
		}
	}
	return p
}

// note says what the view left out of the map, "" when nothing.
func (p mapPlan) note(chunkSize uintptr) string {
	s := ""
	if p.flat > 0 {
		s = fmt.Sprintf("%d chunks drawn flat, without their pages", p.flat)
	}
	if p.cut > 0 {
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("%d chunks (%s", p.cut, units.Bytes(uint64(p.cut)*uint64(chunkSize)))
		if p.free > 0 {
			s += fmt.Sprintf(", %d of them free with nothing committed", p.free)
		}
		s += ") not drawn"
		switch {
		case p.cutRegions == 1:
			s += ", 1 region not at all"
		case p.cutRegions > 1:
			s += fmt.Sprintf(", %d regions not at all", p.cutRegions)
		}
	}
	if s == "" {
		return ""
	}
	return fmt.Sprintf("the map is bounded (%d chunks and pages in detail, %d chunks in all): %s",
		detailBudget, mapBudget, s)
}

// bounded returns the part of m that p draws, for stats.json: the regions drawn, each with
// the chunks drawn, without the pages of those drawn flat. m is left as it is.
func (p mapPlan) bounded(m heap.Map) heap.Map {
	out := heap.Map{Arena: m.Arena}
	out.Arena.Regions = nil
	for ri, rp := range p.regions {
		end := 0
		if rp.drawn > 0 {
			last := rp.cells[rp.drawn-1]
			end = last.i + last.n
		}
		r := m.Arena.Regions[ri]
		r.Chunks = r.Chunks[:end]
		out.Arena.Regions = append(out.Arena.Regions, r)
		if ri >= len(m.Chunks) {
			continue
		}
		infos := append([]heap.ChunkInfo(nil), m.Chunks[ri][:end]...)
		for _, c := range rp.cells[rp.detail:rp.drawn] {
			infos[c.i].Pages = nil
		}
		out.Chunks = append(out.Chunks, infos)
	}
	return out
}
