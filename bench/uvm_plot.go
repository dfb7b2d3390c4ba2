package main

import (
	"fmt"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"

	wl "github.com/pinmalloc/pinmalloc/internal/workload"
)

// uvmOversubPlot is the tier's accessed GB/s against oversubscription, one line per pattern and
// policy; writePlots saves it as NAME-uvm-oversub.svg.
// Its Y axis is logarithmic: at 1x every access hits and costs CPU bookkeeping only, orders of
// magnitude above the oversubscribed points, which pay for migrations.
func uvmOversubPlot(s *suite) (*plot.Plot, error) {
	p, err := uvmFactorPlot(s, "gbps", "UVM tier: throughput against oversubscription (higher is better)", "accessed GB/s (block "+sizeName(int64(uvmPlotBlock(s)))+"), log scale", true)
	if p == nil {
		return p, err
	}
	low := p.Y.Max
	for _, r := range s.results {
		if strings.HasPrefix(r.Case, "uvm-oversub/") && r.Metric == "gbps" && r.Value > 0 {
			low = min(low, r.Value)
		}
	}
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = low/2, p.Y.Max*4 // room above the data for the legend
	return p, nil
}

// uvmHitPlot is the tier's hit rate against oversubscription (NAME-uvm-hitrate.svg).
func uvmHitPlot(s *suite) (*plot.Plot, error) {
	p, err := uvmFactorPlot(s, "hit_rate", "UVM tier: hit rate against oversubscription (higher is better)", "hit rate", false)
	if p != nil {
		p.Y.Min, p.Y.Max = 0, 1.5 // room above the data for the legend
	}
	return p, err
}

// uvmPlotBlock is the block size of the oversubscription cases: the working set in bytes over
// the blocks, as recorded (0 when they did not run).
func uvmPlotBlock(s *suite) int {
	for _, r := range s.results {
		if r.Metric == "block_bytes" {
			return int(r.Value)
		}
	}
	return 0
}

// uvmFactorPlot draws metric of the oversubscription cases against the factor.
func uvmFactorPlot(s *suite, metric, title, ylabel string, logScale bool) (*plot.Plot, error) {
	lines, top := uvmFactorSeries(s, metric, logScale)
	if len(lines) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "working set / VRAM budget"
	p.Y.Label.Text = ylabel
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, err
	}
	p.Y.Min, p.Y.Max = 0, top*1.6 // room above the data for the legend
	p.Legend.Top = true
	return p, nil
}

// uvmFactorSeries returns the lines of uvmFactorPlot (name, plotter.XYs, name, ...) and their
// largest value. A value of 0 is a point like any other (a streaming pattern's hit rate is 0
// once the working set exceeds the budget), except on a log axis (logScale), which cannot
// show it.
func uvmFactorSeries(s *suite, metric string, logScale bool) (lines []any, top float64) {
	for _, pat := range wlPatternNames() {
		for _, row := range uvmRows() {
			var xys plotter.XYs
			for _, f := range uvmFactors {
				v, ok := lookup(s.results, fmt.Sprintf("uvm-oversub/%s/%s/%gx", pat, row.name, f), row.impl, metric)
				if ok && (v > 0 || !logScale && v == 0) {
					xys = append(xys, plotter.XY{X: f, Y: v})
					top = max(top, v)
				}
			}
			if len(xys) > 0 {
				lines = append(lines, pat+" "+row.name, xys)
			}
		}
	}
	return lines, top
}

// uvmMovePlot is evict, restore and both-ways GB/s against block size, with managed memory's
// warm eviction of the same bytes as a flat line (NAME-uvm-move.svg).
func uvmMovePlot(s *suite) (*plot.Plot, error) {
	var lines []any
	top := 0.0
	for _, m := range []struct{ metric, label string }{
		{"evict_gbps", "tier evict (D2H)"}, {"restore_gbps", "tier restore (H2D)"}, {"bidir_gbps", "tier both at once (aggregate)"},
	} {
		var xys plotter.XYs
		for _, sz := range uvmBlockSizes {
			if v, ok := lookup(s.results, "uvm-move/"+sizeName(sz), "uvm", m.metric); ok && v >= 0 {
				xys = append(xys, plotter.XY{X: float64(sz), Y: v})
				top = max(top, v)
			}
		}
		if len(xys) > 0 {
			lines = append(lines, m.label, xys)
		}
	}
	if len(lines) == 0 {
		return nil, nil
	}
	if v, ok := lookup(s.results, "uvm-managed", "managed", "evict_warm_gbps"); ok && v > 0 {
		lines = append(lines, "managed evict, warm (cuMemPrefetchAsync)",
			plotter.XYs{{X: float64(uvmBlockSizes[0]), Y: v}, {X: float64(uvmBlockSizes[len(uvmBlockSizes)-1]), Y: v}})
	}
	p := plot.New()
	p.Title.Text = "UVM tier: explicit migration bandwidth (higher is better)"
	p.X.Label.Text = "block size"
	p.Y.Label.Text = "GB/s"
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, byteTicks{}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, err
	}
	p.Y.Min, p.Y.Max = 0, top*1.6
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}

// wlPatternNames returns the names of the access patterns, in report order.
func wlPatternNames() []string {
	var out []string
	for _, p := range wl.Patterns {
		out = append(out, p.String())
	}
	return out
}
