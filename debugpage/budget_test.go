package debugpage

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
)

// hugeMap is the map of a 16 GiB pool of small buffers, every chunk a segment of 32 pages of
// 64 KiB, 0 to 7/8 of their blocks live, in 16 regions of 1 GiB; then a region of 512 GiB with
// nothing in it.
func hugeMap() heap.Map {
	const chunk = 2 << 20
	m := heap.Map{Arena: arena.Snapshot{Provider: "test", ChunkSize: chunk, Capacity: 1 << 40}}
	base := uintptr(1 << 40)
	for r := range 17 {
		n := 512
		if r == 16 {
			n = 256 << 10
		}
		reg := arena.RegionSnapshot{Base: base, Size: uintptr(n) * chunk, Grid: base, FirstID: arena.ChunkID(r * 512),
			Chunks: make([]arena.ChunkState, n)}
		infos := make([]heap.ChunkInfo, n)
		if r < 16 {
			for i := range reg.Chunks {
				reg.Chunks[i] = arena.ChunkState{InUse: true, Committed: chunk}
				pages := make([]heap.PageInfo, 32)
				for k := range pages {
					live := 4096 * (i % 8) / 8
					pages[k] = heap.PageInfo{Slice: 2 * k, Slices: 2, BlockSize: 16, Blocks: 4096, Live: live, LiveBytes: 16 * uint64(live)}
				}
				infos[i] = heap.ChunkInfo{Kind: heap.ChunkSmall, Pages: pages}
			}
		}
		m.Arena.Regions = append(m.Arena.Regions, reg)
		m.Chunks = append(m.Chunks, infos)
		base += reg.Size
	}
	return m
}

// hugeSource is a pool whose map is hugeMap, with figures of no interest.
func hugeSource() *source {
	m := hugeMap()
	return &source{name: "huge", kind: "pinned", m: func() heap.Map { return m },
		figures: func() figures { return figures{stats: struct{}{}, usage: struct{}{}, text: "figures"} },
		blocks:  func() []Buffer { return nil }, streams: func() []StreamDeferred { return nil }}
}

// TestHugePoolBounded: the page, map.svg and stats.json of a 16 GiB pool of small buffers (and
// a region of 512 GiB, free) stay within 4 MiB (stats.json 10 MiB), where drawn whole they
// made some 60 MB and more, and say what they left out.
func TestHugePoolBounded(t *testing.T) {
	if raceEnabled {
		t.Skip("the sizes of the drawings of a source that never changes (6 s under the race detector): TestHandler and the rest serve the page under it")
	}
	h := New()
	h.sources = append(h.sources, hugeSource())
	url := serve(t, h)
	page, _ := get(t, url)
	svg, _ := get(t, url+"map.svg")
	js, _ := get(t, url+"stats.json")
	for what, s := range map[string]string{"page": page, "map.svg": svg, "stats.json": js} {
		bound := 4 << 20
		if what == "stats.json" { // the map as data, and as the SVG
			bound = 10 << 20
		}
		if len(s) > bound {
			t.Errorf("%s: %d bytes, want at most %d", what, len(s), bound)
		}
		if !strings.Contains(s, "not drawn") {
			t.Errorf("%s does not say that part of the map was not drawn", what)
		}
	}
	if !strings.Contains(page, "the map is bounded") {
		t.Error("the page does not say that the map is bounded")
	}
	var snap struct {
		Sources []struct {
			Chunks  int    `json:"chunks"`
			Regions int    `json:"regions"`
			Note    string `json:"map_note"`
			Map     struct {
				Arena struct {
					Regions []struct {
						Chunks []json.RawMessage `json:"chunks"`
					} `json:"regions"`
				} `json:"arena"`
			} `json:"map"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(js), &snap); err != nil {
		t.Fatal(err)
	}
	v := snap.Sources[0]
	listed := 0
	for _, r := range v.Map.Arena.Regions {
		listed += len(r.Chunks)
	}
	if v.Chunks != 16*512+256<<10 || v.Regions != 17 || listed > 8192 || !strings.Contains(v.Note, "not drawn") {
		t.Errorf("stats.json: %d chunks in %d regions, %d of them in the map, note %q", v.Chunks, v.Regions, listed, v.Note)
	}
	if _, err := Snapshot(strings.NewReader(js)); err != nil { // the bounded map is one it draws
		t.Errorf("Snapshot: %v", err)
	}
	t.Logf("page %d B, map.svg %d B, stats.json %d B; %s", len(page), len(svg), len(js), v.Note)
}

// TestPlanMap: a small map is drawn whole, with nothing to say; once a cell does not fit, no
// later one is drawn (the map is a prefix, with what follows counted as left out), and the
// chunks drawn flat lose their pages in stats.json's map only.
func TestPlanMap(t *testing.T) {
	m := hugeMap()
	small := heap.Map{Arena: m.Arena, Chunks: m.Chunks[:1]}
	small.Arena.Regions = []arena.RegionSnapshot{m.Arena.Regions[0]}
	small.Arena.Regions[0].Chunks = small.Arena.Regions[0].Chunks[:100] // 200 MiB of small pages
	if p := planMap(small); len(p.regions) != 1 || p.regions[0].detail != 100 || p.note(2<<20) != "" {
		t.Errorf("a region of 100 chunks: %d regions planned, note %q", len(p.regions), p.note(2<<20))
	}
	// The free region of 512 GiB first: it does not fit, and neither is any region after it drawn.
	first := heap.Map{Arena: m.Arena, Chunks: append([][]heap.ChunkInfo{m.Chunks[16]}, m.Chunks[:2]...)}
	first.Arena.Regions = append([]arena.RegionSnapshot{m.Arena.Regions[16]}, m.Arena.Regions[:2]...)
	if p := planMap(first); len(p.regions) != 0 || p.cutRegions != 3 || p.cut != 256<<10+1024 || p.free != 256<<10 {
		t.Errorf("the free region first: %d regions planned, %d cut, %d chunks cut, %d free", len(p.regions), p.cutRegions,
			p.cut, p.free)
	}
	p := planMap(m)
	b := p.bounded(m)
	if p.regions[0].detail == 0 || p.regions[0].detail >= p.regions[0].drawn {
		t.Fatalf("region 0: %d cells in detail of %d drawn", p.regions[0].detail, p.regions[0].drawn)
	}
	d := p.regions[0].detail
	if len(b.Chunks[0][d-1].Pages) != 32 || b.Chunks[0][d].Pages != nil || len(m.Chunks[0][d].Pages) != 32 {
		t.Errorf("pages of the last chunk in detail %d, of the first flat %d (%d in the map taken)",
			len(b.Chunks[0][d-1].Pages), len(b.Chunks[0][d].Pages), len(m.Chunks[0][d].Pages))
	}
}
