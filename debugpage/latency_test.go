package debugpage

import (
	"strings"
	"testing"
	"time"
)

// TestLatencyRounded: a tier's latency figures read as the page's other durations do, to three
// significant digits. They were printed as estimated, to the nanosecond: "2.454999ms".
func TestLatencyRounded(t *testing.T) {
	var b strings.Builder
	writeLatency(&b, []latency{{Outcome: "miss", Count: 3, P50: 175_012 * time.Nanosecond,
		P99: 2_454_999 * time.Nanosecond, Mean: 501_691 * time.Nanosecond}})
	if want := "<td>175µs</td><td>2.45ms</td><td>502µs</td>"; !strings.Contains(b.String(), want) {
		t.Errorf("latency row:\n%s\nwant %s", b.String(), want)
	}
}
