package debugpage

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestTimeline: samples taken as the pool grows are drawn as one line per series, oldest
// first, and stats.json holds them.
func TestTimeline(t *testing.T) {
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h := New()
	h.AddPool("staging", p)
	url := serve(t, h)
	if page, _ := get(t, url); strings.Contains(page, `class="timeline"`) || !strings.Contains(page, "Timeline: 0 samples") {
		t.Error("a page with no samples draws a timeline, or does not say why it has none")
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var bufs [][]byte
	for i := range 3 {
		b, err := p.Alloc(4 << 20)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
		h.sampleAll(t0.Add(time.Duration(i) * time.Second))
	}
	defer func() {
		for _, b := range bufs {
			_ = p.Free(b)
		}
	}()
	page, _ := get(t, url)
	if n := strings.Count(page, `<polyline class="series"`); n != 3 {
		t.Errorf("%d lines in the timeline; want committed, in use and deferred", n)
	}
	for _, want := range []string{`class="timeline"`, "03:04:05", "03:04:07", "in use: 12 MiB", "committed: "} {
		if !strings.Contains(page, want) {
			t.Errorf("the timeline lacks %q", want)
		}
	}
	body, _ := get(t, url+"stats.json")
	var js struct {
		Sources []struct {
			Timeline []Sample `json:"timeline"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(body), &js); err != nil {
		t.Fatal(err)
	}
	tl := js.Sources[0].Timeline
	if len(tl) != 3 || !tl[0].T.Equal(t0) || tl[0].InUse != 4<<20 || tl[2].InUse != 12<<20 || tl[2].Committed < 12<<20 {
		t.Errorf("stats.json timeline: %+v", tl)
	}
}

// TestRing: the ring keeps the last ringSize samples, oldest first.
func TestRing(t *testing.T) {
	var r ring
	for i := range ringSize + 5 {
		r.add(Sample{InUse: uint64(i)})
	}
	ss := r.samples()
	if len(ss) != ringSize || ss[0].InUse != 5 || ss[ringSize-1].InUse != ringSize+4 {
		t.Errorf("%d samples, first %d, last %d; want %d from 5 to %d", len(ss), ss[0].InUse, ss[len(ss)-1].InUse, ringSize, ringSize+4)
	}
}

// TestStartTimeline: the sampler samples at its period until stopped, and stopping twice is
// harmless.
func TestStartTimeline(t *testing.T) {
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h := New()
	h.AddPool("staging", p)
	stop := h.StartTimeline(time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for len(h.list()[0].ring.samples()) < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	stop()
	n := len(h.list()[0].ring.samples())
	if n < 3 {
		t.Fatalf("%d samples after 10 s at 1 ms", n)
	}
	time.Sleep(20 * time.Millisecond)
	if m := len(h.list()[0].ring.samples()); m != n {
		t.Errorf("%d samples after stop, %d before", m, n)
	}
}

// TestNiceBytes: the top of a chart is a power of two of at least 1 MiB.
func TestNiceBytes(t *testing.T) {
	for _, c := range []struct{ v, want uint64 }{{0, 1 << 20}, {1 << 20, 1 << 20}, {3 << 20, 4 << 20}, {5 << 30, 8 << 30}} {
		if got := niceBytes(c.v); got != c.want {
			t.Errorf("niceBytes(%d) = %d, want %d", c.v, got, c.want)
		}
	}
}

// TestStartTimelinePeriod: a period that is not positive panics, as the doc says, naming it.
func TestStartTimelinePeriod(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), d.String()) {
					t.Errorf("StartTimeline(%v): recovered %v, want a panic naming the period", d, r)
				}
			}()
			New().StartTimeline(d)
		}()
	}
}
