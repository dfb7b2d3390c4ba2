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

// writePage writes the HTML page of a snapshot: a legend, then for each source its timeline,
// its figures, and either its size classes, top allocation sites, largest live buffers and map,
// or for a tier where its blocks are, how long its acquisitions took (p50, p99, mean by
// outcome) and what it moved. refresh > 0 reloads the page every refresh seconds.
func writePage(w io.Writer, snap *snapshot, refresh int) {
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
.note{font-size:12px;color:#555}
</style></head><body>
<h1>pinmalloc</h1>
`)
	if snap.offline {
		fmt.Fprintf(w, "<p><b>Snapshot taken %s</b>, read from a file · <a href=\"stats.json\">stats.json</a> · <a href=\"map.svg\">map.svg</a></p>\n",
			snap.Taken.Format("2006-01-02 15:04:05 MST"))
	} else {
		writeLinks(w, snap, refresh)
	}
	writeLegend(w)
	if len(snap.Sources) == 0 {
		io.WriteString(w, "<p>Nothing registered.</p>\n")
	}
	for _, v := range snap.Sources {
		fmt.Fprintf(w, "<h2>%s (%s)</h2>\n", esc(v.Name), esc(v.Kind))
		writeTimeline(w, v.Kind, v.Timeline)
		if v.Tier != nil {
			writeTier(w, v.Tier)
			continue
		}
		fmt.Fprintf(w, "<pre>%s</pre>\n", esc(v.Text))
		writeDeferred(w, v)
		fmt.Fprintf(w, "<p>Largest free run of chunks: %s; not yet reserved: %s.</p>\n", units.Bytes(v.LargestFreeRun), units.Bytes(v.Unreserved))
		if len(v.Classes) > 0 {
			io.WriteString(w, "<table><tr><th>class</th><th>pages</th><th>blocks</th><th>live</th><th>live bytes</th><th>occupancy</th><th></th></tr>\n")
			for _, c := range v.Classes {
				occ := 0.0
				if c.Blocks > 0 {
					occ = float64(c.Live) / float64(c.Blocks)
				}
				fmt.Fprintf(w, `<tr><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td><td>%.1f %%</td><td style="text-align:left"><span class="bar" style="width:%dpx"></span></td></tr>`+"\n",
					units.Bytes(uint64(c.Size)), c.Pages, c.Blocks, c.Live, units.Bytes(uint64(c.LiveBytes)), 100*occ, int(100*occ))
			}
			io.WriteString(w, "</table>\n")
		}
		writeSites(w, v.Sites)
		writeBuffers(w, v)
		if v.MapNote != "" {
			fmt.Fprintf(w, "<p class=\"note\">Map: %s.</p>\n", esc(v.MapNote))
		}
		io.WriteString(w, v.MapSVG)
	}
	io.WriteString(w, "</body></html>\n")
}

// writeLinks writes the line of links of a live page: the JSON, the snapshot download, the map
// and the refresh choices.
func writeLinks(w io.Writer, snap *snapshot, refresh int) {
	fmt.Fprintf(w, "<p><a href=\"stats.json\">stats.json</a> · <a href=\"stats.json?download=1\">download a snapshot</a> "+
		"(<code>go run github.com/pinmalloc/pinmalloc/debugpage/cmd/view FILE</code> shows it) · <a href=\"map.svg\">map.svg</a> · taken %s · refresh: ",
		snap.Taken.Format("15:04:05"))
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
}

// writeDeferred says how much of a pool or heap waits for CUDA streams to pass its frees, and
// for which streams.
func writeDeferred(w io.Writer, v view) {
	var blocks, bytes uint64
	switch st := v.Stats.(type) {
	case object: // taken now
		for _, m := range st {
			switch m.key {
			case "deferred":
				blocks = toUint(m.val)
			case "deferred_bytes":
				bytes = toUint(m.val)
			}
		}
	case map[string]any: // read from a snapshot
		blocks, bytes = toUint(st["deferred"]), toUint(st["deferred_bytes"])
	}
	if blocks == 0 {
		return
	}
	fmt.Fprintf(w, "<p>Waiting for CUDA streams to pass their frees: %d blocks", blocks)
	if bytes > 0 {
		fmt.Fprintf(w, ", %s", units.Bytes(bytes))
	}
	io.WriteString(w, ".</p>\n")
	writeStreams(w, v.Streams)
}

// toUint returns a number of a snake'd Stats as a uint64, 0 for anything else.
func toUint(v any) uint64 {
	switch v := v.(type) {
	case uint64:
		return v
	case int:
		return uint64(max(v, 0))
	case int64:
		return uint64(max(v, 0))
	case float64:
		return uint64(max(v, 0))
	}
	return 0
}

// writeTier draws where a tier's blocks are against its budget, its acquisition latency, and
// what it moved.
func writeTier(w io.Writer, t *tierView) {
	fmt.Fprintf(w, "<p>Policy %s, mover %s, %d blocks, hit rate %.1f %%.</p>\n", esc(t.Policy), esc(t.Mover), t.Blocks, 100*t.HitRate)
	// The longest bar is the largest figure: an oversubscribed tier holds more on the host than
	// its budget.
	scale := max(t.Budget, t.DeviceBytes, t.AcquiredBytes, t.SpareBytes, t.HostBytes, t.FreshBytes, 1)
	bar := func(what string, n uint64, colour string) {
		fmt.Fprintf(w, `<tr><td style="text-align:left">%s</td><td>%s</td><td style="text-align:left"><span class="bar" style="width:%dpx;background:%s"></span></td></tr>`+"\n",
			esc(what), units.Bytes(n), int(400*float64(n)/float64(scale)), colour)
	}
	io.WriteString(w, "<table class=\"tier\">\n")
	bar("VRAM budget", t.Budget, "#bbbbbb")
	bar("in VRAM", t.DeviceBytes, timelineSeries["uvm"][0].colour)
	bar("acquired on the device now", t.AcquiredBytes, "#005a43")
	bar("spare VRAM kept for restores", t.SpareBytes, "#8fd9c0")
	bar("evicted: only in pinned host memory", t.HostBytes, timelineSeries["uvm"][1].colour)
	bar("never acquired (no memory yet)", t.FreshBytes, "#dddddd")
	io.WriteString(w, "</table>\n")
	writeLatency(w, t.Latency)
	if len(t.Moves) == 0 {
		io.WriteString(w, "<p>Nothing moved yet.</p>\n")
		return
	}
	io.WriteString(w, "<table class=\"buffers\"><tr><th>moved</th><th>why</th><th>blocks</th><th>bytes</th></tr>\n")
	for _, m := range t.Moves {
		dir := "to the host"
		if m.ToDevice {
			dir = "to the device"
		}
		fmt.Fprintf(w, "<tr><td>%s</td><td>%s</td><td>%d</td><td>%s</td></tr>\n", dir, esc(m.Cause), m.Blocks, units.Bytes(m.Bytes))
	}
	io.WriteString(w, "</table>\n")
}

// writeLatency lists a tier's acquisition latency by outcome.
func writeLatency(w io.Writer, ls []latency) {
	if len(ls) == 0 {
		io.WriteString(w, "<p>No acquisition yet.</p>\n")
		return
	}
	io.WriteString(w, "<table class=\"buffers\"><tr><th>acquisition</th><th>calls timed</th><th>p50</th><th>p99</th><th>mean</th></tr>\n")
	what := map[string]string{"hit": "Acquire, on the device (a sample of the calls)", "miss": "Acquire, restored", "host": "AcquireHost"}
	for _, l := range ls {
		fmt.Fprintf(w, "<tr><td>%s</td><td>%d</td><td>%v</td><td>%v</td><td>%v</td></tr>\n", esc(what[l.Outcome]), l.Count,
			round3(l.P50), round3(l.P99), round3(l.Mean))
	}
	io.WriteString(w, "</table>\n")
}

// writeSites lists the allocation sites holding the most live bytes.
func writeSites(w io.Writer, sites []Site) {
	if len(sites) == 0 {
		return
	}
	io.WriteString(w, "<p>Top allocation sites by live bytes:</p>\n<table class=\"buffers sites\"><tr><th>live bytes</th><th>buffers</th><th>allocated at (innermost first; hover for the whole stack)</th></tr>\n")
	for _, s := range sites {
		fmt.Fprintf(w, "<tr><td>%s</td><td>%d</td><td title=\"%s\">%s</td></tr>\n", units.Bytes(uint64(s.Bytes)), s.Buffers,
			esc(strings.Join(s.Frames, "\n")), esc(strings.Join(s.Frames[:min(len(s.Frames), 2)], " ← ")))
	}
	io.WriteString(w, "</table>\n")
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
func writeBuffers(w io.Writer, v view) {
	if len(v.Largest) == 0 {
		if v.LargestNote != "" {
			fmt.Fprintf(w, "<p>Largest live buffers: %s.</p>\n", esc(v.LargestNote))
		}
		return
	}
	fmt.Fprintf(w, "<p>Largest live buffers")
	if v.LargestNote != "" {
		fmt.Fprintf(w, " (%s)", esc(v.LargestNote))
	}
	sites := v.LargestNote == "" // recorded: the age and site columns
	io.WriteString(w, ":</p>\n<table class=\"buffers\"><tr><th>size</th><th>kind</th><th>address</th>")
	if sites {
		io.WriteString(w, "<th>age</th><th>allocated at (innermost first; hover for the whole stack)</th>")
	}
	io.WriteString(w, "</tr>\n")
	for _, b := range v.Largest {
		fmt.Fprintf(w, "<tr><td>%s</td><td>%s</td><td>%#x</td>", units.Bytes(uint64(b.Size)), esc(b.Kind), b.Addr)
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
