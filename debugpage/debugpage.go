// Package debugpage serves a live view of pinmalloc's pools and device heaps over HTTP, for
// people: a page with a map of every arena, the size classes in use, the largest live buffers
// (with their allocation sites when the pool records them) and the figures, and the same
// figures as JSON for tools. Mount it on your own mux, the way net/http/pprof is mounted, and
// register the pools and heaps to show by name:
//
//	dp := debugpage.New()
//	dp.AddPool("staging", pool)
//	mux.Handle("/debug/pinmalloc/", dp)
//
// It serves, under whatever prefix it is mounted at:
//
//	.../             the page (HTML with one inline SVG map per pool or heap); ?refresh=N
//	                 reloads it every N seconds (1 to 3600)
//	.../map.svg      the maps alone, as one SVG document
//	.../stats.json   every source's Stats, Usage, size classes, largest free run and largest
//	                 live buffers, every key in snake_case
//
// Sources are shown in the order they were added (a replaced source keeps its place): the
// program registers them in the order that means something to it, where sorting by name
// would not.
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
// details (an SVG <title>).
//
// # Consistency and cost
//
// A picture is taken with pinned.Pool.Map or device.Heap.Map, which hold the locks that make
// the reader the owner of every heap (and then the arena's), so every chunk is drawn as it was
// at one instant; allocation in that pool waits meanwhile (about 5 ms for a 1 GiB pool holding
// 100 000 buffers on the 2-core build machine: pinned's BenchmarkMap). The largest buffers
// come from Blocks, which holds those locks a batch of 1024 buffers at a time; a source with
// more than 200 000 live buffers is not listed. Nothing is collected between requests: the
// handler costs nothing unless asked.
package debugpage

import (
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

	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Handler serves the debug page of the pools and heaps registered with it. It is safe for
// concurrent use; the zero value is not: use New.
type Handler struct {
	mu      sync.Mutex
	sources []*source
}

// source is one registered pool or heap.
type source struct {
	name   string
	kind   string // "pinned" or "device"
	stats  func() any
	usage  func() any
	live   func() uint64 // live buffers, cheaply
	str    func() string
	m      func() heap.Map
	blocks func() []Buffer
}

// New returns a handler with nothing registered.
func New() *Handler { return &Handler{} }

// AddPool registers a pinned pool under name, replacing any source of that name.
func (h *Handler) AddPool(name string, p *pinned.Pool) {
	h.add(&source{name: name, kind: "pinned",
		stats: func() any { return p.Stats() }, usage: func() any { return p.Usage() },
		live: func() uint64 { return p.Usage().Live }, str: func() string { return p.Stats().String() }, m: p.Map,
		blocks: func() []Buffer {
			var out []Buffer
			for _, b := range p.Blocks() {
				out = append(out, Buffer{Addr: b.Addr, Size: b.Size, BlockSize: b.BlockSize, Kind: b.Kind, Age: b.Age, Site: b.Site})
			}
			return out
		}})
}

// AddDevice registers a device heap under name, replacing any source of that name.
func (h *Handler) AddDevice(name string, d *device.Heap) {
	h.add(&source{name: name, kind: "device",
		stats: func() any { return d.Stats() }, usage: func() any { return d.Usage() },
		live: func() uint64 { return d.Usage().Live }, str: func() string { return d.Stats().String() }, m: d.Map,
		blocks: func() []Buffer {
			var out []Buffer
			for _, b := range d.Blocks() {
				out = append(out, Buffer{Addr: b.Addr, Size: b.Size, BlockSize: b.BlockSize, Kind: b.Kind.String()})
			}
			return out
		}})
}

// Remove unregisters the source called name, if any (before its pool or heap is closed).
func (h *Handler) Remove(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, s := range h.sources {
		if s.name == name {
			h.sources = append(h.sources[:i], h.sources[i+1:]...)
			return
		}
	}
}

func (h *Handler) add(s *source) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, old := range h.sources {
		if old.name == s.name {
			h.sources[i] = s
			return
		}
	}
	h.sources = append(h.sources, s)
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
		h.serveJSON(w)
	case strings.HasSuffix(r.URL.Path, "/map.svg"):
		w.Header().Set("Content-Type", "image/svg+xml")
		writeSVGDoc(w, h.pictures())
	case strings.HasSuffix(r.URL.Path, "/"):
		refresh, err := strconv.Atoi(r.URL.Query().Get("refresh"))
		if r.URL.Query().Has("refresh") && (err != nil || refresh < 1 || refresh > 3600) {
			http.Error(w, "refresh: want a number of seconds from 1 to 3600", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		writePage(w, h.pictures(), refresh)
	default:
		http.NotFound(w, r)
	}
}

// picture is what one source looks like at one instant.
type picture struct {
	src     *source
	m       heap.Map
	text    string
	classes []Class
	run     uint64 // largest free run of chunks, bytes
	unres   uint64 // capacity not reserved, bytes
	largest []Buffer
	listed  string // why largest is empty or has no sites, for people; "" when it has them
}

func (h *Handler) pictures() []picture {
	var ps []picture
	for _, s := range h.list() {
		p := picture{src: s, m: s.m(), text: s.str()}
		p.classes = classes(p.m)
		p.run, p.unres = p.m.Arena.LargestFreeRun()
		p.largest, p.listed = largest(s)
		ps = append(ps, p)
	}
	return ps
}

// Listing the largest buffers walks every live one: not done above maxListed.
const (
	maxListed = 200_000
	topListed = 10
)

// largest returns the topListed largest live buffers of s, and a note when they say less than
// they could: none listed, or no sites recorded.
func largest(s *source) ([]Buffer, string) {
	if n := s.live(); n > maxListed {
		return nil, fmt.Sprintf("%d live buffers: not listed (more than %d)", n, maxListed)
	}
	bs := s.blocks()
	slices.SortFunc(bs, func(a, b Buffer) int { return cmp.Or(cmp.Compare(b.Size, a.Size), cmp.Compare(a.Addr, b.Addr)) })
	bs = bs[:min(len(bs), topListed)]
	note := ""
	if len(bs) > 0 && bs[0].Site == nil {
		note = "allocation sites not recorded"
		if s.kind == "pinned" {
			note += " (pinned.Options.RecordSites records them)"
		}
	}
	return bs, note
}

// Buffer is a live buffer, as the page and stats.json list the largest.
type Buffer struct {
	// Addr is its address, Size the bytes asked, BlockSize the bytes it occupies and Kind
	// what holds it ("small", "medium", "large", "object", "huge").
	Addr      uintptr `json:"addr"`
	Size      uint64  `json:"size"`
	BlockSize uint64  `json:"block_size"`
	Kind      string  `json:"kind"`
	// Age and Site (innermost frame first), for a pool with Options.RecordSites.
	Age  time.Duration `json:"age_ns,omitempty"`
	Site []string      `json:"site,omitempty"`
}

// Class is the occupancy of one size class, as stats.json reports it.
type Class struct {
	// Size is the block size; Pages the pages holding the class, Blocks their blocks and Live
	// the live ones.
	Size   uint64 `json:"size"`
	Pages  int    `json:"pages"`
	Blocks int    `json:"blocks"`
	Live   int    `json:"live"`
	// LiveBytes is the bytes asked for by the live blocks.
	LiveBytes uint64 `json:"live_bytes"`
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
					cl = &Class{Size: pg.BlockSize}
					by[pg.BlockSize] = cl
				}
				cl.Pages++
				cl.Blocks += pg.Blocks
				cl.Live += pg.Live
				cl.LiveBytes += pg.LiveBytes
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

// sourceJSON is one entry of stats.json. Stats and Usage are the source's own, their keys
// turned to snake_case (snake.go).
type sourceJSON struct {
	Name           string   `json:"name"`
	Kind           string   `json:"kind"`
	Stats          any      `json:"stats"`
	Usage          any      `json:"usage"`
	Classes        []Class  `json:"classes"`
	LargestFreeRun uint64   `json:"largest_free_run_bytes"`
	Unreserved     uint64   `json:"unreserved_bytes"`
	Regions        int      `json:"regions"`
	Chunks         int      `json:"chunks"`
	Largest        []Buffer `json:"largest_buffers"`
	LargestNote    string   `json:"largest_buffers_note,omitempty"`
}

func (h *Handler) serveJSON(w http.ResponseWriter) {
	out := []sourceJSON{}
	for _, p := range h.pictures() {
		n := 0
		for _, r := range p.m.Arena.Regions {
			n += len(r.Chunks)
		}
		out = append(out, sourceJSON{Name: p.src.name, Kind: p.src.kind, Stats: snake(p.src.stats()), Usage: snake(p.src.usage()),
			Classes: p.classes, LargestFreeRun: p.run, Unreserved: p.unres, Regions: len(p.m.Arena.Regions), Chunks: n,
			Largest: append([]Buffer{}, p.largest...), LargestNote: p.listed})
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"sources": out}); err != nil {
		http.Error(w, fmt.Sprintf("encoding stats: %v", err), http.StatusInternalServerError)
	}
}
