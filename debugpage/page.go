package debugpage

import (
	"fmt"
	"io"

	"github.com/pinmalloc/pinmalloc/internal/units"
)

// writePage writes the HTML page: a legend, then for each source its figures, its size
// classes and its map.
func writePage(w io.Writer, ps []picture) {
	io.WriteString(w, `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>pinmalloc</title>
<style>
body{font-family:sans-serif;margin:12px;background:#fff;color:#222}
pre{background:#f6f6f6;padding:6px;font-size:12px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{padding:2px 8px;text-align:right;border-bottom:1px solid #eee}
.sw{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
.bar{display:inline-block;height:10px;background:#888}
</style></head><body>
<h1>pinmalloc</h1>
<p><a href="stats.json">stats.json</a> · <a href="map.svg">map.svg</a></p>
<p>`)
	for _, l := range legend {
		fmt.Fprintf(w, `<span class="sw" style="background:%s"></span>%s `, colours[l.key], esc(l.text))
	}
	io.WriteString(w, "</p>\n<p>Each chunk is 2 MiB, one pixel column per 32 KiB slice; a page is filled from the bottom as far as its blocks are live. Hover for details.</p>\n")
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
		writeSVG(w, p)
	}
	io.WriteString(w, "</body></html>\n")
}
