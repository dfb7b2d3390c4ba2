package debugpage

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
)

// TestSnapshot: a snapshot downloaded from stats.json, served by Snapshot, shows the page as
// it was (the same map, timeline, classes and buffers) and says it is a snapshot; what is not a
// snapshot is refused with ErrSnapshot.
func TestSnapshot(t *testing.T) {
	s := newScene(t)
	defer s.done(t)
	h := New()
	if err := h.AddPool("staging", s.pool); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h.sampleAll(t0)
	h.sampleAll(t0.Add(time.Second))
	url := serve(t, h)

	resp, err := http.Get(url + "stats.json?download=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if cd := resp.Header.Get("Content-Disposition"); !strings.HasPrefix(cd, `attachment; filename="pinmalloc-`) {
		t.Errorf("Content-Disposition %q: the download is not a file", cd)
	}
	frozen, err := Snapshot(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	live, _ := get(t, url)
	offURL := serve(t, frozen)
	off, _ := get(t, offURL)
	if !strings.Contains(off, "read from a file") || strings.Contains(off, "download a snapshot") {
		t.Error("the snapshot's page does not say it is one")
	}
	// Everything below the links line is the same page.
	cut := func(p string) string { return p[strings.Index(p, `<table class="legend">`):] }
	if cut(live) != cut(off) {
		t.Error("the snapshot's page differs from the page it was taken from")
	}
	liveSVG, _ := get(t, url+"map.svg")
	offSVG, _ := get(t, offURL+"map.svg")
	if liveSVG != offSVG || !strings.Contains(offSVG, `class="chunk huge"`) {
		t.Error("the snapshot's map.svg differs from the live one")
	}
	js, _ := get(t, offURL+"stats.json")
	checkSnake(t, js)
	if again, err := Snapshot(strings.NewReader(js)); err != nil || len(again.frozen.Sources) != 1 {
		t.Errorf("the snapshot's own stats.json does not read back: %v", err)
	}
	// A snapshot's page shows what it was taken with: a source added to it is refused, where it
	// used to be kept and never shown.
	if err := frozen.AddPool("late", s.pool); !errors.Is(err, ErrFrozen) || !errors.Is(err, pinmalloc.ErrInvalid) {
		t.Errorf("AddPool on a snapshot's handler = %v; want ErrFrozen", err)
	}
	if err := h.AddPool("bad\xff", s.pool); !errors.Is(err, ErrInvalidName) {
		t.Errorf("AddPool with a name that is not UTF-8 = %v; want ErrInvalidName", err)
	}

	for _, bad := range []string{"", "not json", `{"version": 2, "taken": "2026-01-02T03:04:05Z", "sources": []}`, `{"version": 1}`} {
		if _, err := Snapshot(strings.NewReader(bad)); !errors.Is(err, ErrSnapshot) {
			t.Errorf("Snapshot(%q) = %v; want ErrSnapshot", bad, err)
		}
	}
}

// TestDownloadParam: stats.json?download=0 is the JSON, not a file, and a download value that
// is not a boolean is refused. Before, any value served a file.
func TestDownloadParam(t *testing.T) {
	url := serve(t, New())
	for _, c := range []struct {
		q    string
		file bool
		code int
	}{{"", false, 200}, {"?download=1", true, 200}, {"?download=0", false, 200}, {"?download=false", false, 200}, {"?download=x", false, 400}} {
		resp, err := http.Get(url + "stats.json" + c.q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if file := resp.Header.Get("Content-Disposition") != ""; resp.StatusCode != c.code || file != c.file {
			t.Errorf("stats.json%s: status %d, served as a file %v; want %d, %v", c.q, resp.StatusCode, file, c.code, c.file)
		}
	}
}
