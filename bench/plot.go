package main

import (
	"errors"
	"fmt"
	"image/color"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

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

// palette is Okabe and Ito's, for eyes with and without a colour deficiency, grey for yellow
// (too light on white). Every line also has a marker of its own shape.
var palette = []color.Color{
	color.RGBA{0x00, 0x72, 0xB2, 0xff}, // blue
	color.RGBA{0xD5, 0x5E, 0x00, 0xff}, // vermillion
	color.RGBA{0x00, 0x9E, 0x73, 0xff}, // bluish green
	color.RGBA{0xE6, 0x9F, 0x00, 0xff}, // orange
	color.RGBA{0x00, 0x00, 0x00, 0xff}, // black
	color.RGBA{0xCC, 0x79, 0xA7, 0xff}, // reddish purple
	color.RGBA{0x56, 0xB4, 0xE9, 0xff}, // sky blue
	color.RGBA{0x99, 0x99, 0x99, 0xff}, // grey
}

func init() { plotutil.DefaultColors = palette } // the uvm plots' lines too

// plainNames are the allocators' names in the plots (the tables keep the short ones; docs/bench.md
// has the key).
var plainNames = map[string]string{
	"pinmalloc-heap":   "pinmalloc heap (one owner)",
	"pinmalloc-pool":   "pinmalloc pool (goroutine-safe)",
	"mimalloc":         "mimalloc (C)",
	"glibc":            "glibc malloc (C)",
	"go-make":          "make([]byte), GC counted",
	"go-syncpool":      "sync.Pool of []byte",
	"percall-mlock":    "mmap+mlock per buffer",
	torchName:          "PyTorch-style host cache",
	hostPoolName:       "CUDA host memory pool",
	"cuda-hostalloc":   "cuMemHostAlloc per buffer",
	"cuda-mallocasync": "cudaMallocAsync",
}

// plainName is an allocator's name in a plot.
func plainName(im string) string {
	if n, ok := plainNames[im]; ok {
		return n
	}
	return im
}

// styleOf gives every allocator of allImpls the same colour and marker in every plot.
func styleOf(s *suite, im string) (color.Color, int) {
	for i, x := range s.impls {
		if x.name == im {
			return palette[i%len(palette)], i
		}
	}
	return color.Black, 0
}

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
		path := filepath.Join(s.cfg.out, s.cfg.name+"-"+p.suffix+".svg")
		if pl == nil { // no data this run: no plot of an earlier one left beside its results
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return files, err
			}
			continue
		}
		if err := saveSVG(pl, path, caption(s)); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

// caption says where and when the figures were taken, under each plot.
func caption(s *suite) []string {
	m := thisMachine(s.cfg.quick, s.load)
	line := fmt.Sprintf("%s, %d cores; load %s at the start; %s mode; %s; %s",
		m.CPU, m.Cores, s.load, m.Mode, time.Now().UTC().Format("2006-01-02 15:04 UTC"), m.Go)
	if m.Commit != "unknown" {
		line += "; commit " + m.Commit
	}
	lines := []string{line}
	if m.Memory != "" {
		lines = append(lines, m.Memory+": pinmalloc's figures are without locking")
	}
	return lines
}

// Plot geometry: the data's area on the left, the legend in a column of its own on the right
// (never over a line), the caption along the bottom.
const (
	plotWidth    = 9.6 * vg.Inch
	plotHeight   = 4.5 * vg.Inch
	legendWidth  = 3 * vg.Inch
	captionLine  = 11 * vg.Length(1) // points
	captionInset = 4 * vg.Length(1)
)

// saveSVG writes a plot as an SVG without embedded fonts: the legend to the right of the data,
// the caption lines under it, and plain tick labels on linear axes.
func saveSVG(p *plot.Plot, path string, captionLines []string) error {
	svg := vgsvg.New(plotWidth, plotHeight)
	c := draw.New(svg)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		if _, ok := a.Tick.Marker.(plot.DefaultTicks); ok {
			a.Tick.Marker = plainTicks{}
		}
	}
	leg := p.Legend
	p.Legend = plot.NewLegend()
	bottom := captionLine*vg.Length(len(captionLines)) + captionInset
	p.Draw(draw.Crop(c, 0, -legendWidth, bottom, 0))
	leg.Top, leg.Left = true, true
	leg.TextStyle.Font.Size = vg.Points(9)
	leg.Padding = vg.Points(5)
	title := p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding
	leg.Draw(draw.Crop(c, plotWidth-legendWidth+6, 0, bottom, -title-4))
	sty := p.X.Label.TextStyle
	sty.Font.Size = vg.Points(7.5)
	sty.XAlign, sty.YAlign = draw.XLeft, draw.YBottom
	for i, l := range captionLines {
		y := c.Min.Y + captionInset/2 + captionLine*vg.Length(len(captionLines)-1-i)
		c.FillText(sty, vg.Point{X: c.Min.X + captionInset, Y: y}, l)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := svg.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pairPlot is ns per pair against block size, log-log, one line per allocator.
func pairPlot(s *suite) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "alloc+free of one block: time per pair (lower is better)"
	p.X.Label.Text = "block size"
	p.Y.Label.Text = "time per alloc+free pair"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = byteTicks{}, nsTicks{}
	n := 0
	for _, im := range s.impls {
		var xys plotter.XYs
		for _, sz := range pairSizes {
			if v, ok := lookup(s.results, "pair/"+sizeName(sz), im.name, "ns_per_pair"); ok && v > 0 {
				xys = append(xys, plotter.XY{X: float64(sz), Y: v})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		col, i := styleOf(s, im.name)
		l.Color, pts.Color, pts.Shape = col, col, plotutil.Shape(i)
		l.Width = vg.Points(1.5)
		p.Add(l, pts)
		p.Legend.Add(plainName(im.name), l, pts)
		n++
	}
	if n == 0 {
		return nil, nil
	}
	return p, nil
}

// plainTicks are gonum's default ticks labelled without trailing zeros (750, not 750.00).
type plainTicks struct{}

// Ticks implements plot.Ticker.
func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = plainNumber(ts[i].Value)
		}
	}
	return ts
}

// plainNumber writes a tick's value with the digits it needs: 750, 0.25, 1.5e+09.
func plainNumber(v float64) string {
	if v != 0 && (math.Abs(v) >= 1e7 || math.Abs(v) < 1e-3) {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	s := strconv.FormatFloat(v, 'f', 6, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		s = "0"
	}
	return s
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
	p.Title.Text = "serving trace: memory held against memory live (lower is better; live is the floor)"
	p.X.Label.Text = fmt.Sprintf("step (%v each)", traceStep)
	p.Y.Label.Text = "MiB"
	live, err := plotter.NewLine(downsample(s.traces[0].series, func(t tracePoint) uint64 { return t.live }))
	if err != nil {
		return nil, err
	}
	live.Color, live.Width, live.Dashes = color.Gray{0x60}, vg.Points(1), []vg.Length{vg.Points(3), vg.Points(2)}
	p.Add(live)
	p.Legend.Add("live (bytes asked for)", live)
	for _, tr := range s.traces {
		label := plainName(tr.impl) + ": committed"
		if tr.impl == "go-make" || tr.impl == "go-syncpool" {
			label = plainName(tr.impl) + ": heap in use"
		}
		l, err := plotter.NewLine(downsample(tr.series, func(t tracePoint) uint64 { return t.footprint }))
		if err != nil {
			return nil, err
		}
		l.Color, _ = styleOf(s, tr.impl)
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(label, l)
	}
	p.Y.Min = 0
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
			names = append(names, plainName(im.name))
			one, two = append(one, a/1e6), append(two, b/1e6)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "mixed sizes 16 B - 8 KiB: throughput (higher is better)"
	p.Y.Label.Text = "million alloc+free pairs per second"
	w := vg.Points(14)
	for i, v := range []plotter.Values{one, two} {
		bars, err := plotter.NewBarChart(v, w)
		if err != nil {
			return nil, err
		}
		bars.Color = palette[2*i]
		bars.LineStyle.Width = 0
		bars.Offset = w * vg.Length(2*i-1) / 2
		p.Add(bars)
		p.Legend.Add(map[int]string{0: "1 goroutine", 1: "2 goroutines"}[i], bars)
	}
	p.Y.Max = max(slices.Max(one), slices.Max(two)) * 1.05
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 0.5
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	return p, nil
}
