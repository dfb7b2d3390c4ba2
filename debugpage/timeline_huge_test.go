package debugpage

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTimelineHugeValues: a timeline whose samples go past 8 EiB (a snapshot file can hold any
// uint64) keeps its lines inside the plot and labels its top tick with the top. The top was
// held at 8 EiB below such a value, the line drawn above the chart, and the top tick
// (top*2/2, which wrapped) said "0 B".
func TestTimelineHugeValues(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ss := []Sample{{T: t0, Committed: math.MaxUint64}, {T: t0.Add(time.Second), Committed: 1 << 63}}
	var b strings.Builder
	writeTimeline(&b, "pinned", ss)
	page := b.String()
	if n := strings.Count(page, `text-anchor="end">0 B</text>`); n != 1 {
		t.Errorf("%d ticks say 0 B; want 1 (the bottom):\n%s", n, page)
	}
	for _, m := range regexp.MustCompile(`points="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		for _, pt := range strings.Fields(m[1]) {
			y, err := strconv.ParseFloat(pt[strings.IndexByte(pt, ',')+1:], 64)
			if err != nil || y < 5 || y > 5+plotH {
				t.Errorf("point %s outside the plot (y from 5 to %d)", pt, 5+plotH)
			}
		}
	}
}
