package debugpage

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestTierBarsBounded: the bars of a tier fit the 400 pixels the page gives them, whatever the
// tier holds on the host. They were scaled to the budget alone: a tier oversubscribed 100×
// drew its evicted bytes as a bar 40 000 pixels wide.
func TestTierBarsBounded(t *testing.T) {
	var b strings.Builder
	writeTier(&b, &tierView{Policy: "lru", Mover: "kernel", Budget: 1 << 20, DeviceBytes: 1 << 20,
		HostBytes: 100 << 20, FreshBytes: 3 << 20})
	widths := regexp.MustCompile(`class="bar" style="width:(\d+)px`).FindAllStringSubmatch(b.String(), -1)
	if len(widths) != 6 {
		t.Fatalf("%d bars, want 6:\n%s", len(widths), b.String())
	}
	for _, w := range widths {
		if n, _ := strconv.Atoi(w[1]); n > 400 {
			t.Errorf("a bar %d pixels wide, more than 400:\n%s", n, b.String())
		}
	}
	if !strings.Contains(b.String(), "width:400px;background:"+timelineSeries["uvm"][1].colour) {
		t.Errorf("the largest figure (evicted) is not the full bar:\n%s", b.String())
	}
}
