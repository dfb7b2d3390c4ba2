package debugpage

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// scene is a pool in every state the map draws (but "idle" and "spare"), and the buffers that
// keep it so. The caller frees them with done.
type scene struct {
	pool *pinned.Pool
	bufs [][]byte
}

func newScene(t testing.TB) *scene {
	t.Helper()
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 64 << 20, PurgeDelay: time.Hour, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := &scene{pool: p}
	alloc := func(n int) []byte {
		b, err := p.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for i := 0; i < 20000; i++ { // small pages, full: solid blue columns
		s.bufs = append(s.bufs, alloc(64))
	}
	for i := 0; i < 40; i++ {
		s.bufs = append(s.bufs, alloc(40<<10)) // medium pages
	}
	s.bufs = append(s.bufs, alloc(600<<10), alloc(5<<20)) // an object page; a huge object
	// Three huge objects freed: the heap keeps two for reuse, the third's chunks go back to the
	// arena, committed, waiting for the purge.
	var gone [][]byte
	for i := 0; i < 3; i++ {
		gone = append(gone, alloc(3<<20))
	}
	for _, b := range gone {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *scene) done(t testing.TB) {
	for _, b := range s.bufs {
		if err := s.pool.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.pool.Close(); err != nil {
		t.Fatal(err)
	}
}

// serve starts h on 127.0.0.1 under /debug/pinmalloc/ and returns the page's URL.
func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/pinmalloc/", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String() + "/debug/pinmalloc/"
}

func get(t testing.TB, url string) (string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(body), resp.Header.Get("Content-Type")
}

func TestHandler(t *testing.T) {
	s := newScene(t)
	defer s.done(t)
	h := New()
	h.AddPool("staging", s.pool)
	url := serve(t, h)

	body, ct := get(t, url+"stats.json")
	if ct != "application/json" {
		t.Errorf("stats.json content type %q", ct)
	}
	var js struct {
		Sources []struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			Stats struct {
				Live      uint64 `json:"live"`
				InUse     uint64 `json:"in_use"`
				PeakInUse uint64 `json:"peak_in_use"`
				Backend   string `json:"backend"`
			} `json:"stats"`
			Usage struct {
				Live      uint64 `json:"live"`
				InUse     uint64 `json:"in_use"`
				Committed uint64 `json:"committed"`
			} `json:"usage"`
			Classes []Class  `json:"classes"`
			Run     uint64   `json:"largest_free_run_bytes"`
			Chunks  int      `json:"chunks"`
			Largest []Buffer `json:"largest_buffers"`
			Note    string   `json:"largest_buffers_note"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(body), &js); err != nil {
		t.Fatalf("stats.json: %v\n%s", err, body)
	}
	checkSnake(t, body)
	if len(js.Sources) != 1 {
		t.Fatalf("stats.json has %d sources", len(js.Sources))
	}
	src := js.Sources[0]
	want := uint64(len(s.bufs))
	if src.Name != "staging" || src.Kind != "pinned" || src.Stats.Live != want || src.Usage.Live != want ||
		src.Stats.Backend != "pageable" || src.Chunks != 32 || src.Usage.Committed == 0 || src.Stats.PeakInUse < src.Stats.InUse {
		t.Errorf("stats.json: %+v", src)
	}
	// The largest live buffers, largest first: the 5 MiB huge object, the 600 KiB one, ...
	if len(src.Largest) != topListed || src.Largest[0].Size != 5<<20 || src.Largest[1].Size != 600<<10 ||
		src.Largest[0].Kind != "huge" || !strings.Contains(src.Note, "RecordSites") {
		t.Errorf("largest buffers %+v, note %q", src.Largest, src.Note)
	}
	var c64 *Class
	for i := range src.Classes {
		if src.Classes[i].Size == 64 {
			c64 = &src.Classes[i]
		}
	}
	if c64 == nil || c64.Live != 20000 || c64.Blocks < 20000 || c64.Pages != (20000+1023)/1024 {
		t.Errorf("64-byte class: %+v", c64)
	}
	// 32 chunks: 1 small, 1 medium, 1 object, 3 + 2×2 huge (two kept), 2 waiting for the
	// purge; the largest free run is the 20 chunks after them.
	if src.Run != 20*2<<20 {
		t.Errorf("largest free run %d, want 20 chunks", src.Run)
	}

	svg, ct := get(t, url+"map.svg")
	if ct != "image/svg+xml" {
		t.Errorf("map.svg content type %q", ct)
	}
	d := xml.NewDecoder(strings.NewReader(svg))
	states := map[string]int{}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("map.svg is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "g" {
			for _, a := range se.Attr {
				if a.Name.Local == "class" && strings.HasPrefix(a.Value, "chunk ") {
					states[strings.TrimPrefix(a.Value, "chunk ")]++
				}
			}
		}
	}
	// The 20 free chunks with nothing committed are one cell.
	wantStates := map[string]int{"small": 1, "medium": 1, "object": 1, "huge": 3, "huge-kept": 4, "purge": 2, "free": 0, "free-run": 1}
	for k, v := range wantStates {
		if states[k] != v {
			t.Errorf("map.svg: %d chunks %s, want %d (all: %v)", states[k], k, v, states)
		}
	}
	if !strings.Contains(svg, "huge object of 3 chunks, 5 MiB asked") || !strings.Contains(svg, "64 B blocks, 1024 of 1024 live") ||
		!strings.Contains(svg, ">20 free</text>") || !strings.Contains(svg, "20 free chunks (40 MiB), nothing committed") {
		t.Errorf("map.svg lacks hover details")
	}

	page, ct := get(t, url)
	if !strings.HasPrefix(ct, "text/html") || !strings.Contains(page, "<h2>staging (pinned)</h2>") || !strings.Contains(page, "<svg") {
		t.Errorf("page: %s", ct)
	}
	resp, err := http.Post(url, "text/plain", nil)
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %v %v", resp.Status, err)
	}
	resp.Body.Close()
	if resp, err := http.Get(url + "nothing"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET nothing: %v", err)
	} else {
		resp.Body.Close()
	}
	h.Remove("staging")
	if body, _ := get(t, url+"stats.json"); strings.Contains(body, "staging") {
		t.Error("Remove left the pool registered")
	}
}

// checkSnake fails the test if a key of the JSON document body is not snake_case.
func checkSnake(t *testing.T, body string) {
	t.Helper()
	var doc any
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	snakeKey := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if !snakeKey.MatchString(k) {
					t.Errorf("stats.json: key %s.%s is not snake_case", path, k)
				}
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range v {
				walk(path+"[]", e)
			}
		}
	}
	walk("", doc)
}

// TestOrderAndRefresh: sources are shown in the order added (a replaced one keeps its place),
// and ?refresh=N reloads the page every N seconds.
func TestOrderAndRefresh(t *testing.T) {
	var pools []*pinned.Pool
	for range 3 {
		p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 8 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pools = append(pools, p)
	}
	h := New()
	h.AddPool("zeta", pools[0])
	h.AddPool("alpha", pools[1])
	h.AddPool("zeta", pools[2]) // replaced in place
	url := serve(t, h)
	page, _ := get(t, url)
	if z, a := strings.Index(page, "<h2>zeta"), strings.Index(page, "<h2>alpha"); z < 0 || a < 0 || z > a {
		t.Errorf("zeta at %d, alpha at %d: want the order added", z, a)
	}
	if strings.Contains(page, `http-equiv="refresh"`) || !strings.Contains(page, `href="?refresh=5"`) {
		t.Error("the page without ?refresh reloads itself, or offers no refresh")
	}
	if page, _ := get(t, url+"?refresh=5"); !strings.Contains(page, `<meta http-equiv="refresh" content="5">`) {
		t.Error("?refresh=5 does not reload the page")
	}
	for _, bad := range []string{"0", "x", "99999"} {
		resp, err := http.Get(url + "?refresh=" + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("?refresh=%s: %s, want 400", bad, resp.Status)
		}
	}
}

// TestSites: with RecordSites the largest buffers come with the function that allocated them,
// on the page and in stats.json.
func TestSites(t *testing.T) {
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 64 << 20, RecordSites: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	big := allocForSites(t, p, 3<<20)
	defer p.Free(big)
	h := New()
	h.AddPool("traced", p)
	url := serve(t, h)
	page, _ := get(t, url)
	if !strings.Contains(page, "allocForSites") || strings.Contains(page, "not recorded") {
		t.Errorf("the page does not show the allocation site:\n%s", page)
	}
	js, _ := get(t, url+"stats.json")
	if !strings.Contains(js, `"site": [`) || !strings.Contains(js, "allocForSites") || !strings.Contains(js, `"age_ns"`) {
		t.Errorf("stats.json lacks the site:\n%s", js)
	}
}

//go:noinline
func allocForSites(t *testing.T, p *pinned.Pool, n int) []byte {
	b, err := p.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestClosedPool: a pool closed while registered is shown while it keeps its memory (a buffer
// live at Close) and drops off the page, stats.json and map.svg once its memory is released (the
// Free of the last buffer), and is unregistered, as a released device heap or tier is and as
// package metrics leaves a released pool out of its scrape. Before, a released pool was shown
// for ever (its standing counters, an empty map) until removed: the test checked it was.
func TestClosedPool(t *testing.T) {
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err == nil {
		t.Fatal("Close with a live buffer succeeded")
	}
	h := New()
	if err := h.AddPool("gone", p); err != nil {
		t.Fatal(err)
	}
	url := serve(t, h)
	shown := func(when string, want bool) {
		t.Helper()
		page, _ := get(t, url)
		js, _ := get(t, url+"stats.json")
		svg, _ := get(t, url+"map.svg")
		for _, c := range []struct {
			what string
			got  bool
		}{
			{"the page shows it", strings.Contains(page, "gone (pinned)")},
			{"stats.json has it", strings.Contains(js, `"name": "gone"`)},
			{"map.svg draws it", strings.Contains(svg, ">gone: ")},
		} {
			if c.got != want {
				t.Errorf("%s: %s is %v, want %v", when, c.what, c.got, want)
			}
		}
	}
	shown("closed with a live buffer", true)
	if err := p.Free(b); err != nil { // the last buffer: the pool's memory is released
		t.Fatal(err)
	}
	shown("released", false)
	if n := len(h.list()); n != 0 {
		t.Errorf("%d sources registered with the only pool released; want none", n)
	}
	if err := h.AddPool("gone", p); err != nil { // a released pool added again: not shown
		t.Fatal(err)
	}
	shown("the released pool added again", false)
}

// TestRemoveLetsPoolGo: a source removed (and its pool closed) is not kept reachable by the
// handler: Remove left a pointer to the last source in the slot past the shortened list, so the
// pool stayed alive as long as the handler did.
func TestRemoveLetsPoolGo(t *testing.T) {
	h := New()
	collected := make(chan struct{})
	func() {
		p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 8 << 20})
		if err != nil {
			t.Fatal(err)
		}
		runtime.AddCleanup(p, func(c chan struct{}) { close(c) }, collected)
		if err := h.AddPool("gone", p); err != nil {
			t.Fatal(err)
		}
		h.Remove("gone")
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	defer runtime.KeepAlive(h)
	for range 20 {
		runtime.GC()
		select {
		case <-collected:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("a pool removed from the handler and closed is still reachable from it")
}

// TestNilSources: a nil pool, heap or tier is refused by its Add method with ErrNilSource, and
// the page and the timeline go on. It was registered: every render of the page panicked, and the
// timeline's sampler, in a goroutine of its own, ended the process.
func TestNilSources(t *testing.T) {
	h := New()
	for what, err := range map[string]error{
		"AddPool":   h.AddPool("p", nil),
		"AddDevice": h.AddDevice("d", nil),
		"AddTier":   h.AddTier("t", nil),
	} {
		if !errors.Is(err, ErrNilSource) || !errors.Is(err, pinmalloc.ErrInvalid) {
			t.Errorf("%s(nil) = %v; want ErrNilSource", what, err)
		}
	}
	if n := len(h.list()); n != 0 {
		t.Fatalf("%d nil sources registered", n)
	}
	h.sampleAll(time.Now())
	for _, path := range []string{"/", "/stats.json", "/map.svg"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://x"+path, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("%s: %d", path, rec.Code)
		}
	}
}

// TestTopSites: the sites holding the most live bytes come first, each with its buffers'
// count and bytes, on the page and in stats.json.
func TestTopSites(t *testing.T) {
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 64 << 20, RecordSites: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var bufs [][]byte
	for range 3 {
		bufs = append(bufs, allocForSites(t, p, 1<<20))
	}
	for range 20 {
		bufs = append(bufs, allocSmallForSites(t, p, 64<<10))
	}
	defer func() {
		for _, b := range bufs {
			_ = p.Free(b)
		}
	}()
	h := New()
	h.AddPool("traced", p)
	url := serve(t, h)
	body, _ := get(t, url+"stats.json")
	var js struct {
		Sources []struct {
			Sites []Site `json:"top_sites"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(body), &js); err != nil {
		t.Fatal(err)
	}
	sites := js.Sources[0].Sites
	if len(sites) != 2 || sites[0].Buffers != 3 || sites[0].Bytes != 3<<20 || !strings.Contains(sites[0].Frames[0], "allocForSites") ||
		sites[1].Buffers != 20 || sites[1].Bytes != 20*64<<10 || !strings.Contains(sites[1].Frames[0], "allocSmallForSites") {
		t.Errorf("top sites: %+v", sites)
	}
	page, _ := get(t, url)
	a, b := strings.Index(page, "Top allocation sites"), strings.Index(page, "allocSmallForSites")
	if a < 0 || b < a || !strings.Contains(page, "<td>3 MiB</td><td>3</td>") {
		t.Error("the page does not list the top sites, most bytes first")
	}
}

//go:noinline
func allocSmallForSites(t *testing.T, p *pinned.Pool, n int) []byte {
	b, err := p.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMapLegend: map.svg, which has no page around it, carries the legend of its colours.
func TestMapLegend(t *testing.T) {
	s := newScene(t)
	defer s.done(t)
	h := New()
	h.AddPool("staging", s.pool)
	svg, _ := get(t, serve(t, h)+"map.svg")
	i := strings.Index(svg, `<g class="legend"`)
	j := strings.Index(svg, `class="map"`)
	if i < 0 || j < i {
		t.Fatal("map.svg has no legend above the map")
	}
	legendPart := svg[i:j]
	for key, c := range colours {
		if !strings.Contains(legendPart, `fill="`+c+`"`) {
			t.Errorf("the legend lacks %s (%s)", key, c)
		}
	}
	for _, want := range []string{"free chunks", "heap segments", "huge objects", "Each chunk is 2 MiB"} {
		if !strings.Contains(legendPart, want) {
			t.Errorf("the legend lacks %q", want)
		}
	}
}
