package debugpage

import (
	"bytes"
	"time"

	"github.com/pinmalloc/pinmalloc/uvm"
)

// snapshot is what the page shows at one instant, and stats.json: every source's view. Read
// back from a file (Snapshot), it draws the same page.
type snapshot struct {
	// Version is the format of the file: 1.
	Version int       `json:"version"`
	Taken   time.Time `json:"taken"`
	Sources []view    `json:"sources"`
	// offline is set for a snapshot read from a file.
	offline bool
}

// snapshotVersion is the Version this package writes and reads.
const snapshotVersion = 1

// view is one source as the page draws it and stats.json holds it. Stats, Usage and Map are
// the source's own, their keys turned to snake_case; MapSVG is the map drawn, so a
// snapshot shows the same picture wherever it is read.
type view struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Stats any    `json:"stats"`
	Usage any    `json:"usage,omitempty"`
	// Text is the source's figures, for people (its Stats' String).
	Text string `json:"text,omitempty"`

	Classes        []Class  `json:"classes,omitempty"`
	LargestFreeRun uint64   `json:"largest_free_run_bytes"`
	Unreserved     uint64   `json:"unreserved_bytes"`
	Regions        int      `json:"regions"`
	Chunks         int      `json:"chunks"`
	Largest        []Buffer `json:"largest_buffers,omitempty"`
	LargestNote    string   `json:"largest_buffers_note,omitempty"`
	Sites          []Site   `json:"top_sites,omitempty"`
	// Streams is what waits for each CUDA stream to pass its frees (deferred_by_stream).
	Streams []StreamDeferred `json:"deferred_by_stream,omitempty"`

	// Tier is the tier's placement and moves (tiers only).
	Tier *tierView `json:"tier,omitempty"`
	// Timeline is the samples taken since StartTimeline, oldest first.
	Timeline []Sample `json:"timeline,omitempty"`

	// Map is the part of the map drawn (budget.go); MapNote says what was left out of it.
	Map       any    `json:"map,omitempty"`
	MapNote   string `json:"map_note,omitempty"`
	MapSVG    string `json:"map_svg,omitempty"`
	MapHeight int    `json:"map_height,omitempty"`
}

// look takes the view of s now, or says released (true) for a pool, device heap or tier that
// has given its memory back at Close (its Stats.Released), which is not shown.
func look(s *source) (v view, released bool) {
	v = view{Name: s.name, Kind: s.kind, Timeline: s.ring.samples()}
	if s.tier != nil {
		st := s.tier()
		if st.Released {
			return view{}, true
		}
		v.Stats, v.Tier = snake(st), newTierView(st)
		return v, false
	}
	f := s.figures()
	if f.released {
		return view{}, true
	}
	v.Stats, v.Usage, v.Text = snake(f.stats), snake(f.usage), f.text
	m := s.m()
	v.Classes = classes(m)
	v.LargestFreeRun, v.Unreserved = m.Arena.LargestFreeRun()
	v.Regions = len(m.Arena.Regions)
	for _, r := range m.Arena.Regions {
		v.Chunks += len(r.Chunks)
	}
	v.Largest, v.Sites, v.LargestNote = buffers(s, f.live)
	v.Streams = s.streams()
	p := planMap(m)
	v.MapNote = p.note(m.Arena.ChunkSize)
	v.Map = snake(p.bounded(m))
	var svg bytes.Buffer
	writeSVG(&svg, s.name, m, p, v.LargestFreeRun, v.Unreserved)
	v.MapSVG, v.MapHeight = svg.String(), svgHeight(p)
	return v, false
}

// tierView is what the page shows of a tier.
type tierView struct {
	Policy string `json:"policy"`
	Mover  string `json:"mover"`
	// Budget and the bytes of the live blocks: in VRAM, only on the host, never acquired.
	Budget      uint64 `json:"budget"`
	DeviceBytes uint64 `json:"device_bytes"`
	HostBytes   uint64 `json:"host_bytes"`
	FreshBytes  uint64 `json:"fresh_bytes"`
	// SpareBytes is the VRAM kept for the next restores; AcquiredBytes the bytes of blocks
	// acquired on the device now.
	SpareBytes    uint64  `json:"spare_bytes"`
	AcquiredBytes uint64  `json:"acquired_bytes"`
	Blocks        int     `json:"blocks"`
	HitRate       float64 `json:"hit_rate"`
	// Moves are the blocks and bytes moved, by direction and cause; causes that moved nothing
	// are left out.
	Moves []move `json:"moves"`
	// Latency is the time successful acquisitions took, by outcome: "hit" and "miss"
	// (Acquire), "host" (AcquireHost); outcomes never seen are left out.
	Latency []latency `json:"latency"`
}

// latency sums up one of a tier's latency histograms: quantiles estimated within its buckets
// (uvm.Latency.Quantile) and the mean.
type latency struct {
	Outcome string        `json:"outcome"`
	Count   uint64        `json:"count"`
	P50     time.Duration `json:"p50_ns"`
	P99     time.Duration `json:"p99_ns"`
	Mean    time.Duration `json:"mean_ns"`
}

// move is what a tier moved in one direction for one cause.
type move struct {
	ToDevice bool   `json:"to_device"`
	Cause    string `json:"cause"`
	Blocks   uint64 `json:"blocks"`
	Bytes    uint64 `json:"bytes"`
}

func newTierView(st uvm.Stats) *tierView {
	t := &tierView{Policy: st.Policy, Mover: st.Mover, Budget: st.Budget, DeviceBytes: st.DeviceBytes,
		HostBytes: st.HostBytes, FreshBytes: st.FreshBytes, SpareBytes: st.SpareBytes, AcquiredBytes: st.AcquiredBytes,
		Blocks: st.Blocks, HitRate: st.HitRate(), Moves: []move{}, Latency: []latency{}}
	for outcome, h := range st.AcquireLatency.Outcomes() {
		if h.Count > 0 {
			t.Latency = append(t.Latency, latency{Outcome: outcome, Count: h.Count, P50: h.Quantile(0.5),
				P99: h.Quantile(0.99), Mean: h.Sum / time.Duration(h.Count)})
		}
	}
	for _, toDevice := range []bool{true, false} {
		for c, tr := range st.Traffic(toDevice) {
			if tr.Blocks > 0 {
				t.Moves = append(t.Moves, move{ToDevice: toDevice, Cause: c.String(), Blocks: tr.Blocks, Bytes: tr.Bytes})
			}
		}
	}
	return t
}
