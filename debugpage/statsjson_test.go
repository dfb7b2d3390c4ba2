package debugpage

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestStatsJSONMapNotEscaped: stats.json holds each map's SVG as it is drawn, its <, > and &
// not escaped as \u003c, \u003e and \u0026 (which made the map some 30 % larger in the file,
// 4.2 MB for the 3.3 MB map of hugeSource), and a snapshot saved from it still draws the page.
func TestStatsJSONMapNotEscaped(t *testing.T) {
	if raceEnabled {
		t.Skip("the escapes in the JSON of a source that never changes (5 s under the race detector): TestHandler and the rest serve the page under it")
	}
	h := New()
	h.sources = append(h.sources, hugeSource())
	url := serve(t, h)
	js, ctype := get(t, url+"stats.json")
	if ctype != "application/json" {
		t.Errorf("stats.json: Content-Type %q", ctype)
	}
	var snap struct {
		Sources []struct {
			MapSVG json.RawMessage `json:"map_svg"`
		} `json:"sources"`
	}
	if err := json.Unmarshal([]byte(js), &snap); err != nil {
		t.Fatal(err)
	}
	raw := snap.Sources[0].MapSVG
	var svg string
	if err := json.Unmarshal(raw, &svg); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), `\u003c`) || !strings.HasPrefix(string(raw), `"<svg`) {
		t.Errorf("map_svg is escaped: %.60s", raw)
	}
	// What is left is a JSON string's own escapes: the attributes' quotes and the newlines.
	if len(raw) > len(svg)*23/20 {
		t.Errorf("map_svg: %d bytes in stats.json for a map of %d, want at most 15 %% more",
			len(raw), len(svg))
	}
	t.Logf("map_svg: %d bytes in stats.json for a map of %d; stats.json %d", len(raw), len(svg), len(js))
	sh, err := Snapshot(strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := get(t, serve(t, sh))
	if !strings.Contains(page, svg) {
		t.Error("the page of the snapshot does not draw the map stats.json holds")
	}
}

// TestStatsJSONNoSniff: stats.json, which now holds markup unescaped, tells a browser not to
// read it as anything but JSON.
func TestStatsJSONNoSniff(t *testing.T) {
	url := serve(t, New())
	resp, err := http.Get(url + "stats.json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options: %q, want nosniff", got)
	}
}
