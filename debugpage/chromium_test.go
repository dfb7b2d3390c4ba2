package debugpage

import (
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// chromium finds a headless-capable Chromium, or "".
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestChromiumScreenshot loads the page in headless Chromium and checks that the screenshot
// shows the map: the colours of the chunk states present cover whole chunks, and the colour of
// the state absent from the pool (a committed free chunk with no purge scheduled) covers no
// more than its legend swatch. Set PINMALLOC_SCREENSHOT to a path to keep the screenshot.
func TestChromiumScreenshot(t *testing.T) {
	bin := chromium()
	if bin == "" {
		t.Skip("no Chromium found (Debian: apt-get install chromium); the page is checked without a browser by TestHandler")
	}
	s := newScene(t)
	defer s.done(t)
	h := New()
	h.AddPool("staging", s.pool)
	img := screenshot(t, bin, serve(t, h), 1400, "PINMALLOC_SCREENSHOT")
	counts := countColours(img, colours)
	const chunk = cellW * cellH // pixels of one chunk
	const swatch = 12 * 12
	for _, c := range []struct {
		key string
		min int
	}{
		{"free", chunk * 8 / 10},          // 20 free chunks, one cell (its text is not grey)
		{"huge", 3 * chunk * 9 / 10},      // a live huge object of 3 chunks
		{"huge-kept", 4 * chunk * 8 / 10}, // two kept ones of 2 chunks (less the purge bands)
		{"purge", 2 * chunk * 9 / 10},     // a freed one's 2 chunks, waiting for the purge
		{"small", 20 * 2 * cellH * 9 / 10},
	} {
		if n := counts[colours[c.key]]; n < c.min {
			t.Errorf("%s (%s): %d pixels in the screenshot, want at least %d", c.key, colours[c.key], n, c.min)
		}
	}
	if n := counts[colours["idle"]]; n == 0 || n > 2*swatch {
		t.Errorf("idle (%s): %d pixels, want its legend swatch alone (%d)", colours["idle"], n, swatch)
	}
	t.Logf("screenshot %v: %v", img.Bounds().Size(), counts)
}

// screenshot loads url in headless Chromium in a window height pixels tall and returns the
// screenshot; the environment variable keep, when set, names a file to keep it in.
func screenshot(t *testing.T, bin, url string, height int, keep string) image.Image {
	t.Helper()
	dir := t.TempDir()
	shot := filepath.Join(dir, "page.png")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--no-first-run", "--disable-dev-shm-usage", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--force-color-profile=srgb", fmt.Sprintf("--window-size=1200,%d", height), "--screenshot="+shot, url)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if path := os.Getenv(keep); path != "" {
		data, _ := os.ReadFile(shot)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Errorf("keeping the screenshot: %v", err)
		}
	}
	return img
}

// TestChromiumTierTimelineSites loads, in headless Chromium, a page with a pool that records
// its allocation sites, a tier and its device heap on the fake driver, and a timeline of each:
// the screenshot shows the timelines' lines and the tier's bars, and the rendered page the top
// sites and the tier's moves. Set PINMALLOC_SCREENSHOT_TIER to a path to keep the screenshot.
func TestChromiumTierTimelineSites(t *testing.T) {
	bin := chromium()
	if bin == "" {
		t.Skip("no Chromium found (Debian: apt-get install chromium); TestFakeTier, TestTimeline and TestTopSites check the page without a browser")
	}
	dev, _ := cudatest.Device(t)
	if dev == nil {
		return
	}
	ts := newTierScene(t, dev, 6)
	defer ts.done(t)
	p, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 64 << 20, RecordSites: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h := New()
	h.AddPool("staging", p)
	h.AddTier("kv", ts.tier)
	h.AddDevice("vram", ts.heap)
	t0 := time.Now().Add(-time.Minute)
	var bufs [][]byte
	for i := range 6 { // the pool grows: its lines climb
		bufs = append(bufs, allocForSites(t, p, 2<<20), allocSmallForSites(t, p, 64<<10))
		h.sampleAll(t0.Add(time.Duration(i) * 10 * time.Second))
	}
	defer func() {
		for _, b := range bufs {
			_ = p.Free(b)
		}
	}()
	url := serve(t, h)
	img := screenshot(t, bin, url, 2400, "PINMALLOC_SCREENSHOT_TIER")
	lines := map[string]string{"in use": "#0072b2", "committed": "#000000", "in VRAM": "#009e73", "evicted": "#cc79a7", "budget bar": "#bbbbbb"}
	counts := countColours(img, lines)
	for what, c := range lines {
		if counts[c] < 300 { // a legend swatch is 56 pixels; a line across the plot 1000 or more
			t.Errorf("%s (%s): %d pixels in the screenshot; want a line or a bar", what, c, counts[c])
		}
	}
	t.Logf("screenshot %v: %v", img.Bounds().Size(), counts)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--dump-dom", url)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	for _, want := range []string{"Top allocation sites by live bytes", "allocForSites", "<h2>kv (uvm)</h2>", "pressure", `class="timeline"`} {
		if !strings.Contains(string(dom), want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
}

// countColours counts the pixels of each colour of palette (hex colours by name).
func countColours(img image.Image, palette map[string]string) map[string]int {
	want := map[[3]uint8]string{}
	for _, c := range palette {
		want[rgb(c)] = c
	}
	counts := map[string]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if c, ok := want[[3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)}]; ok {
				counts[c]++
			}
		}
	}
	return counts
}

func rgb(hex string) [3]uint8 {
	var v [3]uint8
	for i := range v {
		n, err := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		if err != nil {
			panic(fmt.Sprintf("bad colour %q", hex))
		}
		v[i] = uint8(n)
	}
	return v
}
