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
	"testing"
	"time"
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
	url := serve(t, h)

	dir := t.TempDir()
	shot := filepath.Join(dir, "page.png")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--no-first-run", "--disable-dev-shm-usage", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--force-color-profile=srgb", "--window-size=1200,1400", "--screenshot="+shot, url)
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
	if keep := os.Getenv("PINMALLOC_SCREENSHOT"); keep != "" {
		data, _ := os.ReadFile(shot)
		if err := os.WriteFile(keep, data, 0o644); err != nil {
			t.Errorf("keeping the screenshot: %v", err)
		}
	}
	counts := countColours(img)
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

// countColours counts the pixels of each colour of the map's palette.
func countColours(img image.Image) map[string]int {
	want := map[[3]uint8]string{}
	for _, c := range colours {
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
