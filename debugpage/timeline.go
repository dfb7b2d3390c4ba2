package debugpage

import (
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/units"
)

// Sample is one point of a source's timeline: its bytes at time T. A field that does not apply
// to the source's kind is zero and not drawn.
type Sample struct {
	T time.Time `json:"t"`
	// Committed and InUse are a pool's or device heap's committed bytes and the bytes asked
	// for by its live blocks; Deferred a pool's bytes freed and waiting for a CUDA stream.
	Committed uint64 `json:"committed"`
	InUse     uint64 `json:"in_use"`
	Deferred  uint64 `json:"deferred"`
	// Device and Evicted are a tier's bytes of blocks in VRAM and only on the host.
	Device  uint64 `json:"device"`
	Evicted uint64 `json:"evicted"`
}

// ringSize is the number of samples a timeline keeps: 5 minutes at one a second.
const ringSize = 300

// ring is a source's last ringSize samples. Its zero value is empty and ready.
type ring struct {
	mu   sync.Mutex
	buf  [ringSize]Sample
	next int // where the next sample goes
	n    int // samples held
}

func (r *ring) add(s Sample) {
	r.mu.Lock()
	r.buf[r.next] = s
	r.next = (r.next + 1) % ringSize
	r.n = min(r.n+1, ringSize)
	r.mu.Unlock()
}

// samples returns the samples held, oldest first.
func (r *ring) samples() []Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Sample, 0, r.n)
	for i := range r.n {
		out = append(out, r.buf[(r.next-r.n+i+ringSize)%ringSize])
	}
	return out
}

// StartTimeline samples every registered source now and then every period, until the function
// it returns is called (which waits for a sample under way). Each source keeps its last 300
// samples, drawn on the page as a timeline. A sample costs each source a Usage (a tier a
// Stats; a pool or device heap holding no buffer a Stats too, which says whether it is
// released): no map, no walk of the buffers. A source found released is unregistered, as the
// page does (AddPool). Calling it again while a timeline runs starts a second sampler; stop
// the first. The period must be positive; if not, StartTimeline panics (as time.NewTicker
// does).
func (h *Handler) StartTimeline(period time.Duration) (stop func()) {
	if period <= 0 {
		panic(fmt.Sprintf("debugpage: StartTimeline(%v): the period must be positive", period))
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			h.sampleAll(time.Now())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}

// sampleAll adds a sample taken now, stamped at, to every source's timeline, and unregisters
// (dropped) a source it finds released, as the page does.
func (h *Handler) sampleAll(at time.Time) {
	for _, s := range h.list() {
		smp, released := s.sample()
		if h.dropped(s, released) {
			continue
		}
		smp.T = at
		s.ring.add(smp)
	}
}

// series is one line of a timeline chart.
type series struct {
	name, colour string
	value        func(Sample) uint64
}

// The lines of each kind of source. Their colours are not in the map's palette (the
// screenshot test counts that palette's pixels).
var timelineSeries = map[string][]series{
	"pinned": {
		{"committed", "#000000", func(s Sample) uint64 { return s.Committed }},
		{"in use", "#0072b2", func(s Sample) uint64 { return s.InUse }},
		{"deferred (for streams)", "#d55e00", func(s Sample) uint64 { return s.Deferred }},
	},
	"device": {
		{"committed", "#000000", func(s Sample) uint64 { return s.Committed }},
		{"in use", "#0072b2", func(s Sample) uint64 { return s.InUse }},
	},
	"uvm": {
		{"in VRAM", "#009e73", func(s Sample) uint64 { return s.Device }},
		{"evicted to the host", "#cc79a7", func(s Sample) uint64 { return s.Evicted }},
	},
}

// Geometry of a timeline chart: the plot, the axes' labels left and below, the legend right.
const (
	plotW, plotH   = 600, 120
	axisW, axisH   = 70, 20
	legendW        = 300
	chartW, chartH = axisW + plotW + legendW, plotH + axisH + 10
)

// writeTimeline draws the samples of a source of kind as an SVG line chart: bytes over time,
// one line per series, the legend beside the plot. Fewer than two samples draw a line saying
// why there is no chart.
func writeTimeline(w io.Writer, kind string, ss []Sample) {
	lines := timelineSeries[kind]
	if len(ss) < 2 || len(lines) == 0 {
		fmt.Fprintf(w, "<p class=\"note\">Timeline: %d samples (StartTimeline samples the sources; the chart needs two).</p>\n", len(ss))
		return
	}
	var top uint64
	for _, s := range ss {
		for _, l := range lines {
			top = max(top, l.value(s))
		}
	}
	top = niceBytes(top)
	t0, t1 := ss[0].T, ss[len(ss)-1].T
	span := max(t1.Sub(t0), time.Millisecond)
	x := func(t time.Time) float64 { return axisW + float64(plotW)*float64(t.Sub(t0))/float64(span) }
	y := func(v uint64) float64 { return 5 + float64(plotH)*(1-float64(v)/float64(top)) }

	fmt.Fprintf(w, `<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" style="%s">`+"\n", chartW, chartH, fontFamily)
	fmt.Fprintf(w, `<title>bytes over the last %s, lower is less memory</title>`+"\n", round3(span))
	fmt.Fprintf(w, `<rect x="%d" y="5" width="%d" height="%d" fill="#fafafa" stroke="#ccc"/>`+"\n", axisW, plotW, plotH)
	for _, f := range []uint64{0, 1, 2} { // ticks at 0, half and the top
		v := top / 2 * f // not top*f/2: a top above 8 EiB wraps
		fmt.Fprintf(w, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e4e4e4"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			axisW, axisW+plotW, y(v), y(v), axisW-4, y(v)+4, units.Bytes(v))
	}
	fmt.Fprintf(w, `<text x="%d" y="%d">%s</text><text x="%d" y="%d" text-anchor="middle">the last %s</text><text x="%d" y="%d" text-anchor="end">%s</text>`+"\n",
		axisW, plotH+axisH+5, t0.Format("15:04:05"), axisW+plotW/2, plotH+axisH+5, round3(span), axisW+plotW, plotH+axisH+5, t1.Format("15:04:05"))
	for i, l := range lines {
		var pts strings.Builder
		for _, s := range ss {
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(s.T), y(l.value(s)))
		}
		fmt.Fprintf(w, `<polyline class="series" fill="none" stroke="%s" stroke-width="2" points="%s"><title>%s</title></polyline>`+"\n",
			l.colour, strings.TrimSpace(pts.String()), esc(l.name))
		last := l.value(ss[len(ss)-1])
		ly := 14 + i*18
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="14" height="4" fill="%s"/><text x="%d" y="%d">%s: %s</text>`+"\n",
			axisW+plotW+10, ly-4, l.colour, axisW+plotW+30, ly, esc(l.name), units.Bytes(last))
	}
	io.WriteString(w, "</svg>\n")
}

// niceBytes rounds v up to a power of two (whose half, the middle tick, reads as plainly in
// KiB, MiB or GiB): 1 MiB at least, so that an idle source still has an axis. Above 8 EiB,
// the largest power of two a uint64 holds, it is the largest uint64.
func niceBytes(v uint64) uint64 {
	top := uint64(1 << 20)
	for top < v && top <= math.MaxUint64/2 {
		top *= 2
	}
	if top < v {
		return math.MaxUint64
	}
	return top
}
