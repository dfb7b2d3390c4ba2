package debugpage

import (
	"fmt"
	"html"
	"io"
	"strings"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// Geometry of the map: one pixel column per 32 KiB slice, so a 2 MiB chunk is 64 pixels wide.
const (
	cellW      = 64
	cellH      = 40
	gap        = 3
	perRow     = 16
	headH      = 22 // a region's caption
	titleH     = 26 // a source's caption
	bandH      = 5  // the purge band of a chunk in use
	mapWidth   = perRow*(cellW+gap) + gap
	fontFamily = "font-family:monospace;font-size:12px"
)

// The colours of chunk states. Flat fills, no opacity: the test finds them in a screenshot.
var colours = map[string]string{
	"free":      "#d9d9d9",
	"idle":      "#edc948",
	"purge":     "#f28e2b",
	"spare":     "#9c755f",
	"huge":      "#e15759",
	"huge-kept": "#ff9da7",
	"small":     "#4e79a7",
	"medium":    "#59a14f",
	"large":     "#76b7b2",
	"object":    "#b07aa1",
	"packed":    "#8c8c3c",
}

// tints are the pale backgrounds of segments, by kind.
var tints = map[heap.ChunkKind]string{
	heap.ChunkSmall:  "#dbe4ee",
	heap.ChunkMedium: "#deecdc",
	heap.ChunkLarge:  "#e4f1f0",
	heap.ChunkObject: "#efe4ec",
	heap.ChunkPacked: "#eeeedd",
}

// legend explains the colours, in groups; each colour appears once.
var legend = []struct {
	group, note string
	entries     []legendEntry
}{
	{"free chunks", "", []legendEntry{
		{"free", "nothing committed (a run of 3 or more is one cell, with its count)", "nothing committed"},
		{"idle", "committed, kept for reuse, no purge scheduled", "committed, kept"},
		{"purge", "committed, waiting for the purge (a band at the bottom of a chunk in use: part of it waits)", "waiting for the purge"},
	}},
	{"heap segments", "a page is a column, filled from the bottom as far as its blocks are live", []legendEntry{
		{"small", "small pages (blocks ≤ 8 KiB)", "small ≤ 8 KiB"},
		{"medium", "medium (≤ 64 KiB)", "medium ≤ 64 KiB"},
		{"large", "large, one page (≤ 256 KiB)", "large ≤ 256 KiB"},
		{"object", "object pages (one buffer ≤ 1 MiB each)", "object ≤ 1 MiB"},
		{"packed", "pages of every kind, of memory committed 2 MiB at a time (CUDA VMM): an object may run on from the chunk before", "packed (2 MiB granules)"},
	}},
	{"huge objects", "", []legendEntry{
		{"huge", "live", "live"},
		{"huge-kept", "freed, kept for reuse", "freed, kept"},
	}},
	{"other", "", []legendEntry{
		{"spare", "spare segment held by a heap", "spare segment"},
	}},
}

// legendEntry is a colour of the map: its key in colours, what it means, and a short form for
// map.svg's legend.
type legendEntry struct{ key, text, short string }

// minRun is the shortest run of free chunks with nothing committed drawn as one cell.
const minRun = 3

// cell is what one place of the map shows: a chunk, or a run of free chunks (n > 1).
type cell struct{ i, n int }

// cells lays out a region's chunks: each chunk its own cell, but for runs of minRun or more
// free chunks with nothing committed, which take one cell each.
func cells(r arena.RegionSnapshot) []cell {
	var out []cell
	for i := 0; i < len(r.Chunks); {
		j := i
		for j < len(r.Chunks) && !r.Chunks[j].InUse && r.Chunks[j].Committed == 0 {
			j++
		}
		if j-i >= minRun {
			out = append(out, cell{i, j - i})
			i = j
			continue
		}
		out = append(out, cell{i, 1})
		i++
	}
	return out
}

// rows returns the height of n cells of the map.
func rows(n int) int { return (n + perRow - 1) / perRow * (cellH + gap) }

// svgHeight returns the height of a source's map drawn as p plans.
func svgHeight(p mapPlan) int {
	h := titleH
	for _, rp := range p.regions {
		h += headH + rows(rp.drawn) + gap
	}
	if p.cutRegions > 0 {
		h += headH
	}
	return h + gap
}

// writeSVG draws the map m of the source called name as an <svg> element, as p plans; run and
// unres are its largest free run and the capacity not reserved.
func writeSVG(w io.Writer, name string, m heap.Map, p mapPlan, run, unres uint64) {
	fmt.Fprintf(w, `<svg class="map" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" style="%s">`+"\n", mapWidth, svgHeight(p), fontFamily)
	fmt.Fprintf(w, `<text x="%d" y="17" font-weight="bold">%s: %s, %s, %d regions; largest free run %s, %s not reserved</text>`+"\n",
		gap, esc(name), esc(m.Arena.Provider), m.Arena.Kind, len(m.Arena.Regions), units.Bytes(run), units.Bytes(unres))
	y := titleH
	for ri, rp := range p.regions {
		r := m.Arena.Regions[ri]
		fmt.Fprintf(w, `<text x="%d" y="%d">region %d: [%#x, +%s), %d chunks</text>`+"\n", gap, y+15, ri, r.Base, units.Bytes(uint64(r.Size)), len(r.Chunks))
		y += headH
		for k, c := range rp.cells[:rp.drawn] {
			x := gap + k%perRow*(cellW+gap)
			cy := y + k/perRow*(cellH+gap)
			if c.n > 1 {
				writeFreeRun(w, x, cy, m.Arena.ChunkSize, r, c)
				continue
			}
			var info heap.ChunkInfo
			if ri < len(m.Chunks) {
				info = m.Chunks[ri][c.i]
			}
			writeChunk(w, x, cy, m.Arena.ChunkSize, r, c.i, r.Chunks[c.i], info, k < rp.detail)
		}
		if len(rp.cells) > rp.drawn {
			rest := 0
			for _, c := range rp.cells[rp.drawn:] {
				rest += c.n
			}
			fmt.Fprintf(w, `<text x="%d" y="%d">… %d more chunks of this region not drawn (the map is bounded)</text>`+"\n",
				gap, y+rows(rp.drawn)-4, rest)
		}
		y += rows(rp.drawn) + gap
	}
	if p.cutRegions > 0 {
		fmt.Fprintf(w, `<text x="%d" y="%d">… %d more region(s) not drawn (the map is bounded)</text>`+"\n", gap, y+15, p.cutRegions)
	}
	io.WriteString(w, "</svg>\n")
}

// writeFreeRun draws a run of free chunks with nothing committed as one cell saying how many.
func writeFreeRun(w io.Writer, x, y int, chunkSize uintptr, r arena.RegionSnapshot, c cell) {
	first := int(r.FirstID) + c.i
	fmt.Fprintf(w, `<g class="chunk free-run"><title>chunks %d-%d at %#x: %d free chunks (%s), nothing committed</title>`+
		`<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+
		`<text x="%d" y="%d" text-anchor="middle" fill="#444">%d free</text></g>`+"\n",
		first, first+c.n-1, r.Grid+uintptr(c.i)*chunkSize, c.n, units.Bytes(uint64(c.n)*uint64(chunkSize)),
		x, y, cellW, cellH, colours["free"], x+cellW/2, y+cellH/2+4, c.n)
}

// writeChunk draws chunk i of region r at (x, y), with its details as a hover title: with
// its pages when detail, else flat (a segment as one column, filled as far as its blocks are
// live).
func writeChunk(w io.Writer, x, y int, chunkSize uintptr, r arena.RegionSnapshot, i int, st arena.ChunkState, info heap.ChunkInfo,
	detail bool) {
	addr := r.Grid + uintptr(i)*chunkSize
	var title strings.Builder
	fmt.Fprintf(&title, "chunk %d at %#x: ", int(r.FirstID)+i, addr)
	state, fill := chunkState(st, info)
	switch state {
	case "free", "idle", "purge":
		fmt.Fprintf(&title, "free")
	case "spare":
		fmt.Fprintf(&title, "spare segment held by a heap")
	case "huge", "huge-kept":
		if info.HugeSize > 0 {
			fmt.Fprintf(&title, "huge object of %d chunks, %s asked", info.HugeChunks, units.Bytes(info.HugeSize))
		} else {
			fmt.Fprintf(&title, "huge object of %d chunks, freed and kept for reuse", info.HugeChunks)
		}
		if !info.HugeFirst {
			title.WriteString(" (continued)")
		}
	default:
		live, blocks := 0, 0
		for _, pg := range info.Pages {
			live += pg.Live
			blocks += pg.Blocks
		}
		fmt.Fprintf(&title, "%s segment, %d pages, %d of %d blocks live", info.Kind, len(info.Pages), live, blocks)
	}
	fmt.Fprintf(&title, "; %s committed", units.Bytes(st.Committed))
	if st.Kept > 0 {
		fmt.Fprintf(&title, ", %s kept idle for reuse", units.Bytes(st.Kept))
	}
	if st.Unwanted > 0 {
		fmt.Fprintf(&title, ", %s unwanted", units.Bytes(st.Unwanted))
		if st.PurgePending {
			title.WriteString(" (purge pending)")
		}
	}
	tint, segment := tints[info.Kind]
	segment = segment && st.InUse
	flat := ""
	if segment && !detail {
		flat = " flat"
		title.WriteString(" (drawn flat: the map is bounded)")
	}
	fmt.Fprintf(w, `<g class="chunk %s%s"><title>%s</title><rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`,
		state, flat, esc(title.String()), x, y, cellW, cellH, fill)
	switch {
	case segment && detail:
		for _, pg := range info.Pages {
			drawPage(w, x, y, info.Kind, pg, tint)
		}
	case segment: // flat: one column as wide as the chunk, filled as far as its blocks are live
		live, blocks := 0, 0
		for _, pg := range info.Pages {
			live, blocks = live+pg.Live, blocks+pg.Blocks
		}
		if live > 0 && blocks > 0 {
			h := max(2, cellH*live/blocks)
			fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`, x, y+cellH-h, cellW, h, colours[state])
		}
	}
	if st.InUse && st.PurgePending {
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`, x, y+cellH-bandH, cellW, bandH, colours["purge"])
	}
	io.WriteString(w, "</g>\n")
}

// chunkState names a chunk's state and the colour of its background.
func chunkState(st arena.ChunkState, info heap.ChunkInfo) (state, fill string) {
	switch {
	case !st.InUse && st.Committed == 0:
		state = "free"
	case !st.InUse && st.PurgePending:
		state = "purge"
	case !st.InUse:
		state = "idle"
	case info.Kind == heap.ChunkFree:
		state = "spare"
	case info.Kind == heap.ChunkHuge && info.HugeSize == 0:
		state = "huge-kept"
	case info.Kind == heap.ChunkHuge:
		state = "huge"
	default:
		return info.Kind.String(), tints[info.Kind]
	}
	return state, colours[state]
}

// drawPage draws a page as its columns of slices, filled from the bottom as far as its blocks
// are live, with its details as a hover title.
func drawPage(w io.Writer, x, y int, kind heap.ChunkKind, pg heap.PageInfo, tint string) {
	h := 0
	if pg.Blocks > 0 && pg.Live > 0 {
		h = max(2, cellH*pg.Live/pg.Blocks) // a live block is always visible
	}
	what := fmt.Sprintf("%s blocks", units.Bytes(pg.BlockSize))
	if kind == heap.ChunkObject {
		what = "one object"
	}
	fmt.Fprintf(w, `<g><title>page at slice %d (+%d slices of 32 KiB): %s, %d of %d live, %s asked</title><rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`,
		pg.Slice, pg.Slices, what, pg.Live, pg.Blocks, units.Bytes(pg.LiveBytes), x+pg.Slice, y, pg.Slices, cellH, tint)
	if h > 0 {
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`, x+pg.Slice, y+cellH-h, pg.Slices, h, colours[kind.String()])
	}
	io.WriteString(w, "</g>")
}

// legendRowH is the height of one group of the legend drawn in map.svg.
const legendRowH = 20

// legendHeight is the height of the legend map.svg draws above the maps.
func legendHeight() int { return titleH + len(legend)*legendRowH + 2*legendRowH + gap }

// writeSVGLegend draws the legend of the map's colours as SVG, for map.svg, which has no page
// around it.
func writeSVGLegend(w io.Writer) {
	fmt.Fprintf(w, `<g class="legend" style="%s"><text x="%d" y="17" font-weight="bold">legend</text>`+"\n", fontFamily, gap)
	y := titleH
	for _, g := range legend {
		fmt.Fprintf(w, `<text x="%d" y="%d" font-weight="bold">%s</text>`, gap, y+12, esc(g.group))
		x := 110
		for _, e := range g.entries {
			fmt.Fprintf(w, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`,
				x, y+2, colours[e.key], x+16, y+12, esc(e.short))
			x += 24 + 7*len([]rune(e.short))
		}
		io.WriteString(w, "\n")
		y += legendRowH
	}
	fmt.Fprintf(w, `<text x="%d" y="%d">Each chunk is 2 MiB, one pixel column per 32 KiB slice; a page is a column filled from the bottom as far as its blocks are live.</text>`+"\n", gap, y+12)
	fmt.Fprintf(w, `<text x="%d" y="%d">Hover over a chunk or a page for details.</text>`+"\n", gap, y+12+legendRowH)
	io.WriteString(w, "</g>\n")
}

// writeSVGDoc writes the legend and every source's map as one standalone SVG document, one
// under the other (tiers have no map).
func writeSVGDoc(w io.Writer, vs []view) {
	total := legendHeight()
	for _, v := range vs {
		total += v.MapHeight
	}
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d">`+"\n", mapWidth, total)
	io.WriteString(w, `<rect width="100%" height="100%" fill="#ffffff"/>`+"\n")
	writeSVGLegend(w)
	y := legendHeight()
	for _, v := range vs {
		if v.MapSVG == "" {
			continue
		}
		fmt.Fprintf(w, `<g transform="translate(0,%d)">`+"\n", y)
		io.WriteString(w, v.MapSVG)
		io.WriteString(w, "</g>\n")
		y += v.MapHeight
	}
	io.WriteString(w, "</svg>\n")
}

func esc(s string) string { return html.EscapeString(s) }
