package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Harness-adjusted figures. A Go allocator is driven by Go loops through an interface, a C
// one by C loops that call it directly and time themselves inside C (cloops.h); the Go loops
// cost about 2 ns more per pair (null.go). Each allocator names the null allocator that runs
// through its own loops (impl.harness), measured in the same rounds; its ns per pair less the
// null's is what the allocator itself costs, and comparisons between Go and C allocators are
// fair only on those. The subtraction takes the loop's work and the allocator's to add up,
// which an out-of-order CPU does only roughly: where an allocator costs little more than its
// loop, the adjusted ratio is a ratio of two small differences and moves a lot.

// ratioImpls are the allocators whose ratio to mimalloc the tables show.
var ratioImpls = []string{"pinmalloc-heap", "pinmalloc-pool"}

// adjusted returns, for each ns_per_pair result of an allocator whose null was measured on
// the same case, the allocator's figure less the null's (ns_per_pair_adjusted); then, for
// each allocator other than mimalloc and the nulls, its ratio to mimalloc, raw (vs_mimalloc)
// and adjusted (vs_mimalloc_adjusted); a ratio of a figure of zero or less is 0, noted
// unmeasurableRatio (the tables write it "unmeasurable").
func adjusted(rs []result, ims []impl) []result {
	harness := map[string]string{}
	for _, im := range ims {
		harness[im.name] = im.harness
	}
	var out []result
	for _, r := range rs {
		h := harness[r.Impl]
		if r.Metric != "ns_per_pair" || h == "" || h == r.Impl || r.Note != "" {
			continue
		}
		if null, ok := lookup(rs, r.Case, h, "ns_per_pair"); ok {
			out = append(out, result{Case: r.Case, Impl: r.Impl, Metric: "ns_per_pair_adjusted",
				Value: r.Value - null, Unit: "ns", Note: fmt.Sprintf("less %s (%.2f ns)", h, null)})
			sr, okr := lookup(rs, r.Case, r.Impl, "round_spread")
			sn, okn := lookup(rs, r.Case, h, "round_spread")
			if okr || okn {
				out = append(out, result{Case: r.Case, Impl: r.Impl, Metric: "round_spread_adjusted",
					Value: adjustedSpread(r.Value, max(sr, 1), null, max(sn, 1)), Unit: "ratio"})
			}
		}
	}
	all := append(slices.Clone(rs), out...)
	for _, r := range all {
		metric := map[string]string{"ns_per_pair": "vs_mimalloc", "ns_per_pair_adjusted": "vs_mimalloc_adjusted"}[r.Metric]
		if metric == "" || r.Impl == "mimalloc" || harness[r.Impl] == r.Impl || r.Note == "not a number" {
			continue
		}
		if mi, ok := lookup(all, r.Case, "mimalloc", r.Metric); ok {
			q := result{Case: r.Case, Impl: r.Impl, Metric: metric, Value: r.Value / mi,
				Unit: "ratio"}
			if !(r.Value > 0 && mi > 0) {
				q.Value, q.Note = 0, unmeasurableRatio
			}
			out = append(out, q)
		}
	}
	return out
}

// unmeasurableRatio notes a ratio to mimalloc that means nothing (recorded as 0): one of its
// figures is zero or less, a harness-adjusted time at or below its null loop's.
const unmeasurableRatio = "unmeasurable: a figure of zero or less (at or below its harness)"

// fmtRatio writes a ratio followed by times ("×" in the tables, "x" in the targets' details,
// as the rest of each), or "unmeasurable" for one that is no measurement: zero or less (a
// harness-adjusted figure at or below its null loop's) or not finite. A ratio under 0.1 keeps
// two significant digits (0.0042×, not 0.00×), one under 0.001 reads "<0.001".
func fmtRatio(v float64, times string) string {
	switch {
	case !(v > 0) || math.IsInf(v, 0):
		return "unmeasurable"
	case v < 0.001:
		return "<0.001" + times
	case v < 0.1:
		return strconv.FormatFloat(v, 'g', 2, 64) + times
	}
	return fmt.Sprintf("%.2f%s", v, times)
}

// fmtAdjusted writes a harness-adjusted ns per pair, or says that it is at or below the
// harness (a time that is no measurement).
func fmtAdjusted(ns float64) string {
	if !(ns > 0) {
		return "≤ harness"
	}
	return fmtNs(ns)
}

// maxSpread stands for a spread without bound (an adjusted figure that its rounds could put at
// zero or below), kept finite for the JSON.
const maxSpread = 1000

// adjustedSpread is the spread of a harness-adjusted figure a = raw - null, taken as the noise
// check takes a figure's spread s (noise.go: the figure could be anywhere from v/s to v*s): the
// least s_a such that a/s_a to a*s_a holds raw/sr - null*sn to raw*sr - null/sn, the
// difference of the two at opposite ends of their bands. The allocator and its null run in the
// same rounds, but their noise is taken as independent: the difference of two small figures
// moves far more than either. maxSpread when the band reaches zero.
func adjustedSpread(raw, sr, null, sn float64) float64 {
	a, lo, hi := raw-null, raw/sr-null*sn, raw*sr-null/sn
	if a <= 0 || lo <= 0 {
		return maxSpread
	}
	return min(maxSpread, max(a/lo, hi/a))
}

// printAdjusted writes, for each group of cases measured in rounds, every allocator's ns per
// pair raw and harness-adjusted, the null allocators' own, and the ratios of ratioImpls to
// mimalloc, raw and adjusted.
func printAdjusted(w io.Writer, s *suite, ims []impl, run []benchCase) {
	groups := []struct {
		title  string
		groups []string
	}{
		{"Fixed-size pair", []string{"pair"}},
		{"Mixed sizes and producer/consumer", []string{"mixed", "prodcons"}},
		{fmt.Sprintf("Churn over many live blocks of %d B (free a random one, allocate its replacement; the row is the live count)", churnSize), []string{"churn"}},
	}
	for _, g := range groups {
		var cs []benchCase
		for _, c := range run {
			if slices.Contains(g.groups, c.group) {
				cs = append(cs, c)
			}
		}
		printAdjustedTable(w, s.results, g.title, ims, cs)
	}
}

// printAdjustedTable writes one table of printAdjusted.
func printAdjustedTable(w io.Writer, rs []result, title string, ims []impl, cs []benchCase) {
	measured := func(im string) bool {
		for _, c := range cs {
			if _, ok := lookup(rs, c.name, im, "ns_per_pair"); ok {
				return true
			}
		}
		return false
	}
	var allocs, nulls []impl
	for _, im := range ims {
		switch {
		case !measured(im.name):
		case im.harness == im.name:
			nulls = append(nulls, im)
		default:
			allocs = append(allocs, im)
		}
	}
	if len(allocs) == 0 {
		return
	}
	var head []string
	for _, im := range allocs {
		head = append(head, im.name)
	}
	for _, im := range nulls {
		head = append(head, im.name+" (harness)")
	}
	var ratios []string
	for _, im := range ratioImpls {
		if measured(im) && measured("mimalloc") {
			ratios = append(ratios, im)
			head = append(head, im+" / mimalloc", "adjusted")
		}
	}
	fmt.Fprintf(w, "\n### %s: ns per pair, raw (less its harness: the null allocator of its own loops)\n\n", title)
	fmt.Fprintf(w, "| case | %s |\n|---|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for _, c := range cs {
		var cells []string
		for _, im := range allocs {
			cell := "–"
			if e, ok := failure(rs, c.name, im.name); ok {
				cell = "error: " + shorten(e)
			} else if raw, ok := lookup(rs, c.name, im.name, "ns_per_pair"); ok {
				cell = fmtNs(raw)
				if adj, ok := lookup(rs, c.name, im.name, "ns_per_pair_adjusted"); ok {
					cell += " (" + fmtAdjusted(adj) + ")"
				}
			}
			cells = append(cells, cell)
		}
		for _, im := range nulls {
			cell := "–"
			if v, ok := lookup(rs, c.name, im.name, "ns_per_pair"); ok {
				cell = fmtNs(v)
			}
			cells = append(cells, cell)
		}
		for _, im := range ratios {
			for _, m := range []string{"vs_mimalloc", "vs_mimalloc_adjusted"} {
				cell := "–"
				if v, ok := lookup(rs, c.name, im, m); ok {
					cell = fmtRatio(v, "×")
				}
				cells = append(cells, cell)
			}
		}
		fmt.Fprintf(w, "| %s | %s |\n", c.name, strings.Join(cells, " | "))
	}
}
