package debugpage

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/units"
)

// refreshChoices are the reload periods the page offers, in seconds.
var refreshChoices = []int{2, 5, 30}

// writePage writes the HTML page: a legend, then for each source its figures, its size
// classes, its largest live buffers and its map. refresh > 0 reloads the page every refresh
// seconds.
func writePage(w io.Writer, ps []picture, refresh int) {
	io.WriteString(w, `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>pinmalloc</title>
`)
	if refresh > 0 {
		fmt.Fprintf(w, `<meta http-equiv="refresh" content="%d">`+"\n", refresh)
	}
	io.WriteString(w, `<style>
body{font-family:sans-serif;margin:12px;background:#fff;color:#222}
pre{background:#f6f6f6;padding:6px;font-size:12px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{padding:2px 8px;text-align:right;border-bottom:1px solid #eee}
table.legend td,table.legend th,table.buffers td,table.buffers th{text-align:left}
.sw{display:inline-block;width:12px;height:12px;margin:0 4px 0 10px;vertical-align:middle}
.bar{display:inline-block;height:10px;background:#888}
</style></head><body>
<h1>pinmalloc</h1>
`)
	fmt.Fprintf(w, "<p><a href=\"stats.json\">stats.json</a> · <a href=\"map.svg\">map.svg</a> · taken %s · refresh: ",
		time.Now().Format("15:04:05"))
	if refresh > 0 {
		io.WriteString(w, `<a href="?">off</a>`)
	} else {
		io.WriteString(w, "<b>off</b>")
	}
	for _, r := range refreshChoices {
		if r == refresh {
			fmt.Fprintf(w, " · <b>%d s</b>", r)
		} else {
			fmt.Fprintf(w, ` · <a href="?refresh=%d">%d s</a>`, r, r)
		}
	}
	io.WriteString(w, "</p>\n")
	writeLegend(w)
	if len(ps) == 0 {
		io.WriteString(w, "<p>Nothing registered.</p>\n")
	}
	for _, p := range ps {
		fmt.Fprintf(w, "<h2>%s (%s)</h2>\n<pre>%s</pre>\n", esc(p.src.name), p.src.kind, esc(p.text))
		fmt.Fprintf(w, "<p>Largest free run of chunks: %s; not yet reserved: %s.</p>\n", units.Bytes(p.run), units.Bytes(p.unres))
		if len(p.classes) > 0 {
			io.WriteString(w, "<table><tr><th>class</th><th>pages</th><th>blocks</th><th>live</th><th>live bytes</th><th>occupancy</th><th></th></tr>\n")
			for _, c := range p.classes {
				occ := 0.0
				if c.Blocks > 0 {
					occ = float64(c.Live) / float64(c.Blocks)
				}
				fmt.Fprintf(w, `<tr><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td><td>%.1f %%</td><td style="text-align:left"><span class="bar" style="width:%dpx"></span></td></tr>`+"\n",
					units.Bytes(c.Size), c.Pages, c.Blocks, c.Live, units.Bytes(c.LiveBytes), 100*occ, int(100*occ))
			}
			io.WriteString(w, "</table>\n")
		}
		writeBuffers(w, p)
		writeSVG(w, p)
	}
	io.WriteString(w, "</body></html>\n")
}

// writeLegend explains the map's colours, grouped by what they describe.
func writeLegend(w io.Writer) {
	io.WriteString(w, "<table class=\"legend\">\n")
	for _, g := range legend {
		fmt.Fprintf(w, "<tr><th>%s</th><td>", esc(g.group))
		if g.note != "" {
			fmt.Fprintf(w, "%s:", esc(g.note))
		}
		for _, e := range g.entries {
			fmt.Fprintf(w, `<span class="sw" style="background:%s"></span>%s `, colours[e.key], esc(e.text))
		}
		io.WriteString(w, "</td></tr>\n")
	}
	io.WriteString(w, "</table>\n<p>Each chunk is 2 MiB, one pixel column per 32 KiB slice. Hover over a chunk or a page for details.</p>\n")
}

// writeBuffers lists a source's largest live buffers, with their sites when recorded.
func writeBuffers(w io.Writer, p picture) {
	if len(p.largest) == 0 {
		if p.listed != "" {
			fmt.Fprintf(w, "<p>Largest live buffers: %s.</p>\n", esc(p.listed))
		}
		return
	}
	fmt.Fprintf(w, "<p>Largest live buffers")
	if p.listed != "" {
		fmt.Fprintf(w, " (%s)", esc(p.listed))
	}
	sites := p.listed == "" // recorded: the age and site columns
	io.WriteString(w, ":</p>\n<table class=\"buffers\"><tr><th>size</th><th>kind</th><th>address</th>")
	if sites {
		io.WriteString(w, "<th>age</th><th>allocated at (innermost first; hover for the whole stack)</th>")
	}
	io.WriteString(w, "</tr>\n")
	for _, b := range p.largest {
		fmt.Fprintf(w, "<tr><td>%s</td><td>%s</td><td>%#x</td>", units.Bytes(b.Size), esc(b.Kind), b.Addr)
		if sites {
			site := strings.Join(b.Site[:min(len(b.Site), 2)], " ← ")
			fmt.Fprintf(w, "<td>%s</td><td title=\"%s\">%s</td>", round3(b.Age), esc(strings.Join(b.Site, "\n")), esc(site))
		}
		io.WriteString(w, "</tr>\n")
	}
	io.WriteString(w, "</table>\n")
}

// round3 rounds d to three significant digits.
func round3(d time.Duration) time.Duration {
	for r := time.Duration(1); r < time.Hour; r *= 10 {
		if d < 1000*r {
			return d.Round(r)
		}
	}
	return d.Round(time.Second)
}
