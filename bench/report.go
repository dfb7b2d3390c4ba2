package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/pinmalloc/pinmalloc/internal/units"
)

// find returns the result recorded for an allocator on a case under a metric.
func find(rs []result, c, im, metric string) (result, bool) {
	for _, r := range rs {
		if r.Case == c && r.Impl == im && r.Metric == metric {
			return r, true
		}
	}
	return result{}, false
}

// lookup finds one measured value: not one recorded as not a number (its note says so, last:
// resultSet.add's, or finite's after the note it had), nor one of an allocator whose run of the
// case recorded an error (a figure taken before it failed: the copy engine's bandwidth, whose
// Close failed after).
func lookup(rs []result, c, im, metric string) (float64, bool) {
	r, ok := find(rs, c, im, metric)
	if ok && metric != "error" {
		if _, failed := failure(rs, c, im); failed {
			ok = false
		}
	}
	return r.Value, ok && !strings.HasSuffix(r.Note, "not a number")
}

// failure returns the error recorded for an allocator on a case, if any.
func failure(rs []result, c, im string) (string, bool) {
	r, ok := find(rs, c, im, "error")
	return r.Note, ok
}

// resultsOf returns the results of one allocator.
func resultsOf(rs []result, im string) []result {
	var out []result
	for _, r := range rs {
		if r.Impl == im {
			out = append(out, r)
		}
	}
	return out
}

// headline is the short form of one allocator's results on a case, for the progress line.
func headline(group string, rs []result) string {
	get := func(metric string) (float64, bool) { return lookup(rs, rs[0].Case, rs[0].Impl, metric) }
	if e, ok := failure(rs, rs[0].Case, rs[0].Impl); ok {
		return "error: " + e
	}
	switch group {
	case "trace":
		v, _ := get("committed_over_live")
		return fmt.Sprintf("%.3f", v)
	case "huge":
		if v, _ := get("alloc_ok"); v == 1 {
			return "ok"
		}
		return "refused" // a finding about the allocator (no block that large), not a failure of the run
	}
	v, _ := get("ns_per_pair")
	return fmtNs(v)
}

// hugeMax summarises the huge cases: the largest single allocation each allocator made.
func hugeMax(rs []result) []result {
	best := map[string]float64{}
	var order []string
	for _, r := range rs {
		if r.Metric != "alloc_ok" {
			continue
		}
		if _, seen := best[r.Impl]; !seen {
			order = append(order, r.Impl)
			best[r.Impl] = 0
		}
		for _, sz := range hugeSizes {
			if r.Value == 1 && r.Case == "huge/"+sizeName(sz) {
				best[r.Impl] = max(best[r.Impl], float64(sz))
			}
		}
	}
	var out []result
	for _, im := range order {
		out = append(out, result{Case: "huge/max", Impl: im, Metric: "max_single_alloc_bytes", Value: best[im], Unit: "B"})
	}
	return out
}

// printTables writes one markdown table per group of cases.
func printTables(w io.Writer, s *suite, run []benchCase) {
	var names []string
	for _, im := range s.impls {
		if im.skip == "" && s.cfg.implFilter.MatchString(im.name) {
			names = append(names, im.name)
		}
	}
	if note := hostMemory.memoryNote(); note != "" {
		fmt.Fprintf(w, "\n**%s**: the pinmalloc columns are the allocator's own cost, without locking; mmap+mlock and torch-caching-host ran only the pairs up to %s.\n",
			note, units.Bytes(uint64(hostMemory.maxPair)))
	}
	groups := map[string][]benchCase{}
	for _, c := range run {
		groups[c.group] = append(groups[c.group], c)
	}
	cell := func(c benchCase, im string) string {
		if e, ok := failure(s.results, c.name, im); ok {
			return "error: " + shorten(e)
		}
		switch c.group {
		case "huge":
			ok, found := lookup(s.results, c.name, im, "alloc_ok")
			switch {
			case !found:
				return "–"
			case ok == 1:
				ns, _ := lookup(s.results, c.name, im, "alloc_ns")
				return "ok " + fmtNs(ns)
			}
			r, _ := find(s.results, c.name, im, "alloc_ok")
			return "refused: " + shorten(r.Note)
		case "mixed", "prodcons":
			ns, found := lookup(s.results, c.name, im, "ns_per_pair")
			if !found {
				return "–"
			}
			ops, _ := lookup(s.results, c.name, im, "ops_per_sec")
			return fmt.Sprintf("%s · %.3g Mops/s", fmtNs(ns), ops/1e6)
		}
		ns, found := lookup(s.results, c.name, im, "ns_per_pair")
		if !found {
			return "–"
		}
		out := fmtNs(ns)
		if cpu, _ := lookup(s.results, c.name, im, "cpu_ns_per_pair"); cpu > 1.2*ns {
			out += " (cpu " + fmtNs(cpu) + ")"
		}
		return out
	}
	table := func(title string, cs []benchCase) {
		if len(cs) == 0 {
			return
		}
		fmt.Fprintf(w, "\n### %s\n\n| case | %s |\n|---|%s\n", title, strings.Join(names, " | "), strings.Repeat("---|", len(names)))
		for _, c := range cs {
			cells := make([]string, len(names))
			for i, im := range names {
				cells[i] = cell(c, im)
			}
			fmt.Fprintf(w, "| %s | %s |\n", c.name, strings.Join(cells, " | "))
		}
	}
	table("Fixed-size alloc+free pair, ns per pair (process CPU shown where it exceeds wall time by 20 %: the GC's own threads)", groups["pair"])
	table("Mixed sizes 16 B – 8 KiB (churn over 1024 slots) and producer/consumer, ns per pair · throughput", append(groups["mixed"], groups["prodcons"]...))
	if len(groups["trace"]) > 0 && len(s.traces) > 0 {
		fmt.Fprintf(w, "\n### Serving trace (%d steps of %v, %d buffers of 4 KiB – 4 MiB); footprint = committed (pinmalloc) or heap in use (Go); resident adds Go's free heap not yet returned\n\n",
			s.trace.steps, traceStep, len(s.trace.sizes))
		fmt.Fprintln(w, "| impl | peak live | peak footprint | footprint/live (peak) | (time-weighted) | peak resident | ns/op | GC CPU | late steps |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
		for _, tr := range s.traces {
			fmt.Fprintf(w, "| %s | %.1f MiB | %.1f MiB | %.3f | %.3f | %.1f MiB | %s | %.1f %% | %d |\n", tr.impl,
				float64(tr.peakLive)/(1<<20), float64(tr.peakFootprint)/(1<<20),
				float64(tr.peakFootprint)/float64(tr.peakLive), tr.sumFootprint/tr.sumLive,
				float64(tr.peakResident)/(1<<20), fmtNs(tr.nsPerOp), 100*tr.gcFraction, tr.late)
		}
	}
	table(fmt.Sprintf("Huge objects in a pool of fixed capacity %s: alloc + touch", sizeName(hugeCapacity)), groups["huge"])
	for _, c := range run {
		// printUVMTables, printSweep, printCalibration, printCommitTables and printFootprint
		// show those.
		shown := slices.Contains([]string{"uvm", "sweep", "calibration", "commit"}, c.group) ||
			slices.Contains(footprintTabled(), c.name)
		if c.custom != nil && !shown {
			fmt.Fprintf(w, "\n%s:", c.name)
			for _, r := range s.results {
				if r.Case == c.name {
					fmt.Fprintf(w, " %s %s=%.3g %s;", r.Impl, r.Metric, r.Value, r.Unit)
				}
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w)
	for _, im := range s.impls {
		if im.skip != "" {
			fmt.Fprintf(w, "%s: %s\n", im.name, im.skip)
		}
	}
}

// shorten keeps a table cell readable.
func shorten(s string) string {
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}
