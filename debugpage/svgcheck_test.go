package debugpage

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/heap"
)

// TestSnapshotMapMarkup: a snapshot file whose map_svg holds markup writeSVG does not draw (a
// script, an event handler, a link, a CDATA section HTML reads as a tag) is refused with
// ErrSnapshot. The page wrote map_svg into its HTML as it was: a snapshot file from elsewhere
// ran its script in the page that showed it (debugpage/cmd/view).
func TestSnapshotMapMarkup(t *testing.T) {
	const svg = `<svg class="map" xmlns="http://www.w3.org/2000/svg" width="1075" height="100" ` +
		`style="` + fontFamily + `">`
	file := func(mapSVG string) string {
		source := map[string]any{"name": "staging", "kind": "pinned", "stats": map[string]any{},
			"map_svg": mapSVG}
		b, err := json.Marshal(map[string]any{"version": snapshotVersion, "taken": "2026-01-02T03:04:05Z",
			"sources": []any{source}})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	good := svg + `<text x="3" y="17" font-weight="bold">staging: &lt;b&gt;</text>` + "\n" +
		`<g class="chunk free-run"><title>chunks 0-2 &amp; more</title>` +
		`<rect x="3" y="48" width="64" height="40" fill="#d9d9d9"/>` +
		`<text x="35" y="72" text-anchor="middle" fill="#444">3 free</text></g>` + "\n</svg>\n"
	if _, err := Snapshot(strings.NewReader(file(good))); err != nil {
		t.Fatalf("a map as writeSVG draws it: %v", err)
	}
	var drawn strings.Builder
	writeSVG(&drawn, `a "name" <b>&'c'</b> ←`, heap.Map{}, mapPlan{}, 0, 1<<30)
	if err := checkMapSVG(drawn.String()); err != nil {
		t.Fatalf("the map writeSVG draws for a name to escape: %v\n%s", err, drawn.String())
	}
	for _, bad := range []string{
		svg + `<script>alert(1)</script></svg>`,
		svg + `<rect x="1" y="1" width="1" height="1" fill="#000" onclick="alert(1)"/></svg>`,
		svg + `<a href="https://example.com/"><text x="1" y="1">here</text></a></svg>`,
		svg + `<g><title><![CDATA[><img src=x onerror=alert(1)>]]></title></g></svg>`,
		svg + `<!-- --><text x="1" y="1">x</text></svg>`,
		svg + `<foreignObject><div>x</div></foreignObject></svg>`,
		svg + `</svg><img src="x" onerror="alert(1)">`,
		svg + `</svg><svg class="map"><text x="1" y="1">two</text></svg>`,
		svg + `</svg>text after`,
		svg + `<rect x="1" y="1" width="1" height="1" fill="url(https://example.com/)"/></svg>`,
		`<svg class="map" style="background:url(https://example.com/)"></svg>`,
		`<img src="x" onerror="alert(1)">`,
		`text`,
		svg,
	} {
		h, err := Snapshot(strings.NewReader(file(bad)))
		if !errors.Is(err, ErrSnapshot) {
			page := ""
			if h != nil {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://x/", nil))
				page = rec.Body.String()
				page = page[max(strings.LastIndex(page, "</table>"), 0):]
			}
			t.Errorf("Snapshot with map_svg %q = %v, want ErrSnapshot; the page draws:\n%.200s",
				bad, err, page)
		}
	}
}
