package main

import (
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/pinmalloc/pinmalloc/internal/units"
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
	p.X.Label.Text = "block size"
	p.Y.Label.Text = "time per pair"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = byteTicks{}, nsTicks{}
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
	p.Y.Max = top * 300 // room above the data for the legend
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}

// byteTicks marks a log axis of bytes at powers of two, labelling every fourth (16 B, 256 B,
// 4 KiB, 64 KiB, 1 MiB, ...; every second on a short axis) with a binary unit, where
// plot.LogTicks would print 1e+06.
type byteTicks struct{}

// Ticks implements plot.Ticker.
func (byteTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := 0; e < 63; e++ {
		if v := float64(uint64(1) << e); v >= lo && v <= hi {
			ts = append(ts, plot.Tick{Value: v})
		}
	}
	every := 4 // a label every fourth power of two, every second on a short axis
	if len(ts) <= 12 {
		every = 2
	}
	for i := range ts {
		if e := bits.TrailingZeros64(uint64(ts[i].Value)); e%every == 0 {
			ts[i].Label = units.Bytes(uint64(ts[i].Value))
		}
	}
	return ts
}

// nsTicks marks a log axis of nanoseconds at powers of ten, labelled with a unit (10 ns, 1 µs,
// 100 ms, 10 s) where plot.LogTicks would print 1e+06.
type nsTicks struct{}

// Ticks implements plot.Ticker.
func (nsTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for v := 1.0; v <= hi && v < 1e15; v *= 10 {
		if v >= lo {
			ts = append(ts, plot.Tick{Value: v, Label: nsLabel(v)})
		}
	}
	return ts
}

// nsLabel writes a power of ten of nanoseconds with the largest unit that keeps it whole.
func nsLabel(v float64) string {
	for _, u := range []struct {
		ns   float64
		name string
	}{{1e9, "s"}, {1e6, "ms"}, {1e3, "µs"}} {
		if v >= u.ns {
			return fmt.Sprintf("%.0f %s", v/u.ns, u.name)
		}
	}
	return fmt.Sprintf("%.0f ns", v)
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
