package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// plotPoints caps the points of a line, to keep each SVG small.
const plotPoints = 300

// writePlots draws the plots the results allow and returns the files written.
func writePlots(s *suite) ([]string, error) {
	var files []string
	for _, p := range []struct {
		suffix string
		make   func(*suite) (*plot.Plot, error)
	}{
		{"pair", pairPlot},
		{"trace", tracePlot},
		{"mixed", mixedPlot},
		{"uvm-oversub", uvmOversubPlot},
		{"uvm-hitrate", uvmHitPlot},
		{"uvm-move", uvmMovePlot},
	} {
		pl, err := p.make(s)
		if err != nil {
			return files, fmt.Errorf("plot %s: %w", p.suffix, err)
		}
		if pl == nil {
			continue
		}
		path := filepath.Join(s.cfg.out, s.cfg.name+"-"+p.suffix+".svg")
		if err := saveSVG(pl, path); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

// saveSVG writes a plot as a 6 × 4 inch SVG without embedded fonts.
func saveSVG(p *plot.Plot, path string) error {
	c := vgsvg.New(6*vg.Inch, 4*vg.Inch)
	p.Draw(draw.New(c))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pairPlot is ns per pair against block size, log-log, one line per allocator.
func pairPlot(s *suite) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "alloc+free pair"
	p.X.Label.Text = "block size (bytes)"
	p.Y.Label.Text = "ns per pair"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	var lines []any
	top := 0.0
	for _, im := range s.impls {
		var xys plotter.XYs
		for _, sz := range pairSizes {
			if v, ok := lookup(s.results, "pair/"+sizeName(sz), im.name, "ns_per_pair"); ok && v > 0 {
				xys = append(xys, plotter.XY{X: float64(sz), Y: v})
				top = max(top, v)
			}
		}
		if len(xys) > 0 {
			lines = append(lines, im.name, xys)
		}
	}
	if len(lines) == 0 {
		return nil, nil
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, err
	}
	p.Y.Max = top * 1e4 // room above the data for the legend
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}

// tracePlot is live and footprint bytes over the serving trace, one line per allocator.
func tracePlot(s *suite) (*plot.Plot, error) {
	if len(s.traces) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "serving trace: bytes live and held"
	p.X.Label.Text = "step"
	p.Y.Label.Text = "MiB"
	lines := []any{"live (bytes asked)", downsample(s.traces[0].series, func(t tracePoint) uint64 { return t.live })}
	top := 0.0
	for _, tr := range s.traces {
		label := tr.impl + " committed"
		if tr.impl == "go-make" || tr.impl == "go-syncpool" {
			label = tr.impl + " heap in use"
		}
		lines = append(lines, label, downsample(tr.series, func(t tracePoint) uint64 { return t.footprint }))
		top = max(top, float64(tr.peakFootprint)/(1<<20))
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		return nil, err
	}
	p.Y.Min, p.Y.Max = 0, top*1.6 // room above the data for the legend
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}

// downsample keeps the maximum of each of plotPoints buckets, so that peaks survive.
func downsample(ps []tracePoint, v func(tracePoint) uint64) plotter.XYs {
	per := max(1, (len(ps)+plotPoints-1)/plotPoints)
	var xys plotter.XYs
	for i := 0; i < len(ps); i += per {
		var m uint64
		for _, t := range ps[i:min(i+per, len(ps))] {
			m = max(m, v(t))
		}
		xys = append(xys, plotter.XY{X: float64(i), Y: float64(m) / (1 << 20)})
	}
	return xys
}

// mixedPlot is the throughput of the mixed-size churn on one and on two goroutines.
func mixedPlot(s *suite) (*plot.Plot, error) {
	var names []string
	var one, two plotter.Values
	for _, im := range s.impls {
		a, ok1 := lookup(s.results, "mixed/1g", im.name, "ops_per_sec")
		b, ok2 := lookup(s.results, "mixed/2g", im.name, "ops_per_sec")
		if ok1 || ok2 {
			names = append(names, im.name)
			one, two = append(one, a/1e6), append(two, b/1e6)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "mixed sizes 16 B - 8 KiB: throughput"
	p.Y.Label.Text = "million alloc+free pairs per second"
	w := vg.Points(14)
	for i, v := range []plotter.Values{one, two} {
		bars, err := plotter.NewBarChart(v, w)
		if err != nil {
			return nil, err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = w * vg.Length(2*i-1) / 2
		p.Add(bars)
		p.Legend.Add(map[int]string{0: "1 goroutine", 1: "2 goroutines"}[i], bars)
	}
	p.Y.Max = max(slices.Max(one), slices.Max(two)) * 1.2 // room above the bars for the legend
	p.Legend.Top = true
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 0.5
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	return p, nil
}
