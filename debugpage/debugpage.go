// Package debugpage serves a live view of pinmalloc's pools, device heaps and UVM tiers over
// HTTP, for people: a page with a timeline of each source's memory over the last minutes, a map
// of every arena, the size classes in use, the allocation sites holding the most memory, the
// largest live buffers and the figures, and the same as JSON for tools. Mount it on your own
// mux, the way net/http/pprof is mounted, and register the sources to show by name:
//
//	dp := debugpage.New()
//	err := dp.AddPool("staging", pool) // ErrInvalidName for a name that is not UTF-8
//	err = dp.AddTier("kv", tier)
//	defer dp.StartTimeline(time.Second)() // sample every second for the timelines
//	mux.Handle("/debug/pinmalloc/", dp)
//
// It serves, under whatever prefix it is mounted at:
//
//	.../                 the page (HTML with inline SVG); ?refresh=N reloads it every N
//	                     seconds (1 to 3600)
//	.../map.svg          the maps alone, as one SVG document with its legend
//	.../stats.json       a snapshot: every source's Stats, Usage, size classes, largest
//	                     buffers, top sites, deferred frees by stream, timeline samples and
//	                     map (as data and as the SVG drawn), every key in snake_case;
//	                     ?download=1 serves it as a file
//
// A snapshot saved from stats.json is a page to read later, elsewhere:
//
//	go run github.com/pinmalloc/pinmalloc/debugpage/cmd/view snapshot.json
//
// serves the page as it was (Snapshot does the same for a program's own mux).
//
// Sources are shown in the order they were added (a replaced source keeps its place): the
// program registers them in the order that means something to it, where sorting by name
// would not. A pool, device heap or tier closed while registered drops off once it has given
// its memory back (AddPool, AddDevice, AddTier).
//
// # The timeline
//
// StartTimeline samples every source at a period into a ring of the last 300 samples (5
// minutes at one a second): for a pool its committed, in-use and deferred bytes (freed, waiting
// for a CUDA stream), for a device heap its committed and in-use bytes, for a tier the bytes of
// its blocks in VRAM and of those evicted to the host. A sample reads Usage, or a tier's Stats
// (and a pool or heap holding no buffer, which may be released, its Stats): no map, no walk of
// the buffers. A source the sampler finds released is unregistered, its samples with it, as
// the page does. Without StartTimeline the page has no timeline: the
// timeline's deferred bytes are the total, and the page itself (and stats.json, under
// deferred_by_stream) splits the deferred frees of the moment by stream
// (pinned.Pool.DeferredByStream, device.Heap.DeferredByStream).
//
// # Allocation sites
//
// For a pool made with pinned.Options.RecordSites, the page sums the live bytes of every
// allocation site (the whole stack) and lists the sites holding the most, with the count of
// their buffers, beside the largest buffers themselves.
//
// # The map
//
// Each region of an arena is drawn as a strip of its 2 MiB chunks, 16 to a row, one pixel
// column per 32 KiB slice. A chunk no heap holds is grey when nothing of it is committed (a
// run of three or more such chunks is drawn as one cell that says how many), yellow when
// committed memory waits there for reuse with no purge scheduled, and orange when the purge
// timer will decommit it. A heap segment is tinted by what its pages hold (blue small, green
// medium, teal large, purple object pages) and each page is a column filled from the bottom as
// far as its blocks are live. A huge object is red (pink while its heap keeps it freed for
// reuse); a chunk a heap holds as a spare segment is brown. An orange band at the bottom of a
// chunk in use marks memory in it waiting for the purge. Hovering a chunk or a page shows its
// details (an SVG <title>). However large the pool, a view draws at most 8192 chunks: its
// first 4096 chunks and pages in detail, the chunks after them flat (each one column, filled
// as far as its blocks are live), and then says what it left out, on the page, in the map
// and in stats.json (map_note), whose map holds what was drawn.
//
// # Consistency and cost
//
// A picture is taken with pinned.Pool.Map or device.Heap.Map, which hold the locks that make
// the reader the owner of every heap (and then the arena's), so every chunk is drawn as it was
// at one instant; allocation in that pool waits meanwhile (about 5 ms for a 1 GiB pool holding
// 100 000 buffers on the 2-core build machine: pinned's BenchmarkMap). The largest buffers
// and the sites come from Blocks, which holds those locks a batch of 1024 buffers at a time; a
// source with more than 200 000 live buffers is not listed. Between requests only the timeline
// samples, and only once started.
package debugpage

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// Handler serves the debug page of the sources registered with it, or of a snapshot. It is
// safe for concurrent use; the zero value is not: use New or Snapshot.
type Handler struct {
	mu      sync.Mutex
	sources []*source
	frozen  *snapshot // a snapshot's views: served as they are (Snapshot)
}

// source is one registered pool, heap or tier.
type source struct {
	name string
	kind string // "pinned", "device" or "uvm"
	// A pool or device heap: its figures (one read of its Stats and one of its Usage), its map
	// and its buffers.
	figures func() figures
	m       func() heap.Map
	blocks  func() []Buffer
	// streams is what waits for each CUDA stream to pass its frees.
	streams func() []StreamDeferred
	// A tier: its Stats.
	tier func() uvm.Stats
	// Every source: a sample for the timeline, or true when the source is released (its Stats
	// says so: closed, its memory given back), and the timeline.
	sample func() (Sample, bool)
	ring   ring
}

// New returns a handler with nothing registered.
func New() *Handler { return &Handler{} }

// AddPool registers a pinned pool under name, replacing any source of that name. It fails with
// ErrInvalidName for a name that is not valid UTF-8 (stats.json could not keep it), with
// ErrNilSource for a nil pool, and with ErrFrozen on the handler of a snapshot.
//
// A pool closed while registered is shown until its memory is released (at Close, or at the
// Free of its last live buffer after Close: its Stats says Released), and then no more:
// the next page, map.svg, stats.json or timeline sample leaves it out and unregisters it, as
// package metrics leaves it out of its scrape.
func (h *Handler) AddPool(name string, p *pinned.Pool) error {
	return h.add(p == nil, &source{name: name, kind: "pinned",
		figures: func() figures {
			st, u := poolStats(p), poolUsage(p)
			return figures{stats: st, usage: u, text: st.String(), live: u.Live,
				released: st.Released}
		},
		m:       p.Map,
		streams: func() []StreamDeferred { return poolStreams(p) },
		blocks: func() []Buffer {
			var out []Buffer
			for _, b := range p.Blocks() {
				out = append(out, Buffer{Addr: b.Addr, Size: b.Size, BlockSize: b.BlockSize, Kind: b.Kind, Age: b.Age, Site: b.Site})
			}
			return out
		},
		sample: func() (Sample, bool) {
			u := poolUsage(p)
			// Only a pool holding no buffer can be released: only then is a Stats paid.
			if u.Live == 0 && poolStats(p).Released {
				return Sample{}, true
			}
			return Sample{Committed: u.Committed, InUse: u.InUse, Deferred: u.DeferredBytes}, false
		}})
}

// AddDevice registers a device heap under name, replacing any source of that name. Errors as
// for AddPool.
//
// A heap closed while registered is shown until its memory is given back (Close, or a later
// Close where the driver refused it, as device.Stats.Released says), and then no more: the
// next page, map.svg, stats.json or timeline sample leaves it out and unregisters it.
func (h *Handler) AddDevice(name string, d *device.Heap) error {
	return h.add(d == nil, &source{name: name, kind: "device",
		figures: func() figures {
			st, u := heapStats(d), heapUsage(d)
			return figures{stats: st, usage: u, text: st.String(), live: u.Live, released: st.Released}
		},
		m:       d.Map,
		streams: func() []StreamDeferred { return heapStreams(d) },
		blocks: func() []Buffer {
			var out []Buffer
			for _, b := range d.Blocks() {
				out = append(out, Buffer{Addr: b.Addr, Size: int(b.Size), BlockSize: int(b.BlockSize), Kind: b.Kind.String()})
			}
			return out
		},
		sample: func() (Sample, bool) {
			u := heapUsage(d)
			// Only a heap holding no block can be released: only then is a Stats paid.
			if u.Live == 0 && heapStats(d).Released {
				return Sample{}, true
			}
			return Sample{Committed: u.Committed, InUse: u.InUse}, false
		}})
}

// AddTier registers a UVM tier under name, replacing any source of that name. The page shows
// where its blocks are (VRAM, host, not yet placed) against its budget and what it moved, by
// cause; the device heap it takes VRAM from has a map of its own when registered with
// AddDevice (uvm.Options.Heap). Errors as for AddPool.
//
// A tier closed while registered is shown until it has given back all it held (Close, or a
// later Close where the first kept memory, as uvm.Stats.Released says), and then no more: the
// next page, map.svg, stats.json or timeline sample leaves it out and unregisters it.
func (h *Handler) AddTier(name string, t *uvm.Tier) error {
	return h.add(t == nil, &source{name: name, kind: "uvm", tier: t.Stats,
		sample: func() (Sample, bool) {
			st := t.Stats()
			return Sample{Device: st.DeviceBytes, Evicted: st.HostBytes}, st.Released
		}})
}

// Remove unregisters the source called name, if any. A pool, device heap or tier need not be
// removed when closed: once it has given its memory back, the next page, map.svg, stats.json
// or timeline sample leaves it out and unregisters it. Remove stops showing a source before
// that.
func (h *Handler) Remove(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, s := range h.sources {
		if s.name == name {
			// slices.Delete clears the slot it frees: a stale pointer there kept the removed
			// source, and its pool, heap or tier, reachable.
			h.sources = slices.Delete(h.sources, i, i+1)
			return
		}
	}
}

// add registers s; isNil says the pool, heap or tier s reads is nil.
func (h *Handler) add(isNil bool, s *source) error {
	switch {
	case h.frozen != nil:
		return fmt.Errorf("%w: %q not added", ErrFrozen, s.name)
	case !utf8.ValidString(s.name):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidName, s.name)
	case isNil:
		return fmt.Errorf("%w: %q not added", ErrNilSource, s.name)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, old := range h.sources {
		if old.name == s.name {
			h.sources[i] = s
			return nil
		}
	}
	h.sources = append(h.sources, s)
	return nil
}

// list returns the sources in the order they were added.
func (h *Handler) list() []*source {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*source(nil), h.sources...)
}

// ServeHTTP serves the page, map.svg or stats.json (see the package documentation).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case strings.HasSuffix(r.URL.Path, "/stats.json"):
		download, err := strconv.ParseBool(r.URL.Query().Get("download"))
		if r.URL.Query().Has("download") && err != nil {
			http.Error(w, "download: want 1 (serve a file) or 0", http.StatusBadRequest)
			return
		}
		snap := h.snapshot()
		if download {
			w.Header().Set("Content-Disposition",
				fmt.Sprintf(`attachment; filename="pinmalloc-%s.json"`, snap.Taken.UTC().Format("20060102-150405")))
		}
		serveJSON(w, snap)
	case strings.HasSuffix(r.URL.Path, "/map.svg"):
		w.Header().Set("Content-Type", "image/svg+xml")
		writeSVGDoc(w, h.snapshot().Sources)
	case strings.HasSuffix(r.URL.Path, "/"):
		refresh, err := strconv.Atoi(r.URL.Query().Get("refresh"))
		if r.URL.Query().Has("refresh") && (err != nil || refresh < 1 || refresh > 3600) {
			http.Error(w, "refresh: want a number of seconds from 1 to 3600", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		writePage(w, h.snapshot(), refresh)
	default:
		http.NotFound(w, r)
	}
}

// snapshot takes a view of every source now, or returns the frozen snapshot.
func (h *Handler) snapshot() *snapshot {
	if h.frozen != nil {
		return h.frozen
	}
	snap := &snapshot{Version: snapshotVersion, Taken: time.Now(), Sources: []view{}}
	for _, s := range h.list() {
		v, released := look(s)
		if h.dropped(s, released) {
			continue
		}
		snap.Sources = append(snap.Sources, v)
	}
	return snap
}

// dropped reports released, which says that the pool, device heap or tier of s has given its
// memory back (its Stats.Released), and then unregisters s, unless a source added since has
// replaced it. The page, map.svg, stats.json and the timeline's sampler all ask it of each
// source they read, and leave out a source it drops.
func (h *Handler) dropped(s *source, released bool) bool {
	if !released {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.sources, s); i >= 0 {
		h.sources = slices.Delete(h.sources, i, i+1)
	}
	return true
}

// Listing the largest buffers walks every live one: not done above maxListed.
const (
	maxListed = 200_000
	topListed = 10
)

// buffers returns the topListed largest live buffers of s, which has n live buffers, and its
// topListed allocation sites by live bytes, from one walk, and a note when they say less than
// they could: none listed, or no sites recorded.
func buffers(s *source, n uint64) ([]Buffer, []Site, string) {
	if n > maxListed {
		return nil, nil, fmt.Sprintf("%d live buffers: not listed (more than %d)", n, maxListed)
	}
	bs := s.blocks()
	sites := topSites(bs)
	slices.SortFunc(bs, func(a, b Buffer) int { return cmp.Or(cmp.Compare(b.Size, a.Size), cmp.Compare(a.Addr, b.Addr)) })
	bs = bs[:min(len(bs), topListed)]
	note := ""
	if len(bs) > 0 && bs[0].Site == nil {
		note = "allocation sites not recorded"
		if s.kind == "pinned" {
			note += " (pinned.Options.RecordSites records them)"
		}
	}
	return bs, sites, note
}

// Buffer is a live buffer, as the page and stats.json list the largest.
type Buffer struct {
	// Addr is its address, Size the bytes asked, BlockSize the bytes it occupies and Kind
	// what holds it ("small", "medium", "large", "object", "huge").
	Addr      uintptr `json:"addr"`
	Size      int     `json:"size"`
	BlockSize int     `json:"block_size"`
	Kind      string  `json:"kind"`
	// Age and Site (innermost frame first), for a pool with Options.RecordSites.
	Age  time.Duration `json:"age_ns,omitempty"`
	Site []string      `json:"site,omitempty"`
}

// Class is the occupancy of one size class, as stats.json reports it.
type Class struct {
	// Size is the block size; Pages the pages holding the class, Blocks their blocks and Live
	// the live ones.
	Size   int `json:"size"`
	Pages  int `json:"pages"`
	Blocks int `json:"blocks"`
	Live   int `json:"live"`
	// LiveBytes is the bytes asked for by the live blocks.
	LiveBytes int `json:"live_bytes"`
}

// classes sums the class pages of a map by block size.
func classes(m heap.Map) []Class {
	by := map[uint64]*Class{}
	for _, region := range m.Chunks {
		for _, c := range region {
			if c.Kind == heap.ChunkObject {
				continue
			}
			for _, pg := range c.Pages {
				cl := by[pg.BlockSize]
				if cl == nil {
					cl = &Class{Size: int(pg.BlockSize)}
					by[pg.BlockSize] = cl
				}
				cl.Pages++
				cl.Blocks += pg.Blocks
				cl.Live += pg.Live
				cl.LiveBytes += int(pg.LiveBytes)
			}
		}
	}
	out := make([]Class, 0, len(by))
	for _, c := range by {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Size < out[j].Size })
	return out
}

// serveJSON writes a snapshot as stats.json. Its maps' SVG is written with <, > and & as they
// are, not escaped for HTML (\u003c...), which made a map some 30 % larger in the file: the
// document is served as JSON, which a browser is told not to read as anything else, and the
// page writes the SVG into its HTML from the decoded string, which checkMapSVG has checked
// when it comes from a file.
func serveJSON(w http.ResponseWriter, snap *snapshot) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(snap); err != nil {
		http.Error(w, fmt.Sprintf("encoding stats: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b.Bytes())
}
