package debugpage

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeDevice shows a device heap on the fake driver: its chunks are mapped and its stats
// reported like a pool's.
func TestFakeDevice(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	h, err := device.New(icuda.Wrap[*cuda.Device](dev), device.Options{Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	}()
	small, err := h.Alloc(1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	huge, err := h.Alloc(5<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	dp := New()
	dp.AddDevice("gpu0", h)
	url := serve(t, dp)
	js, _ := get(t, url+"stats.json")
	if !strings.Contains(js, `"name": "gpu0"`) || !strings.Contains(js, `"kind": "device"`) || !strings.Contains(js, `"live": 2`) ||
		!strings.Contains(js, fmt.Sprintf(`"peak_in_use": %d`, 1000+5<<20)) {
		t.Errorf("stats.json:\n%s", js)
	}
	checkSnake(t, js)
	svg, _ := get(t, url+"map.svg")
	if strings.Count(svg, `class="chunk small"`) != 1 || strings.Count(svg, `class="chunk huge"`) != 3 || !strings.Contains(svg, ">gpu0: ") {
		t.Errorf("map.svg: %d small, %d huge chunks", strings.Count(svg, `class="chunk small"`), strings.Count(svg, `class="chunk huge"`))
	}
	if err := h.Free(small); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(huge); err != nil {
		t.Fatal(err)
	}
	dp.Remove("gpu0")
}
