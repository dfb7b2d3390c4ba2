package fakecuda

import (
	"fmt"
	"math"
	"testing"
)

// logTB records what Figure logs and whether it failed.
type logTB struct {
	testing.TB
	lines  []string
	failed bool
}

func (l *logTB) Helper() {}
func (l *logTB) Logf(format string, args ...any) {
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}
func (l *logTB) Errorf(format string, args ...any) { l.failed = true }

// TestFigure: a figure logged by Figure reads back whole, behind a test log's prefix; a figure
// that is no measurement fails the test and logs nothing; a line that is not a figure is refused.
func TestFigure(t *testing.T) {
	l := &logTB{TB: t}
	Figure(l, "uvm-tier/evict/4KiB", 48.25, "GB/s", false, 48)
	Figure(l, "acquire", 150, "ns", true, 200)
	if l.failed || len(l.lines) != 2 {
		t.Fatalf("logged %q, failed %v", l.lines, l.failed)
	}
	name, v, unit, atMost, limit, err := ParseFigure("    gpu_test.go:41: " + l.lines[0])
	if err != nil || name != "uvm-tier/evict/4KiB" || v != 48.25 || unit != "GB/s" || atMost || limit != 48 {
		t.Errorf("ParseFigure = %q %g %q %v %g, %v", name, v, unit, atMost, limit, err)
	}
	if _, _, _, atMost, _, err := ParseFigure(l.lines[1]); err != nil || !atMost {
		t.Errorf("ParseFigure of an upper limit: at most %v, %v", atMost, err)
	}
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		l := &logTB{TB: t}
		Figure(l, "x", bad, "GB/s", false, 1)
		if !l.failed || len(l.lines) != 0 {
			t.Errorf("Figure(%g): failed %v, logged %q", bad, l.failed, l.lines)
		}
	}
	for _, line := range []string{"nothing", FigureTag + " x 1 GB/s", FigureTag + " x one GB/s >= 1", FigureTag + " x 1 GB/s > 1"} {
		if _, _, _, _, _, err := ParseFigure(line); err == nil {
			t.Errorf("ParseFigure(%q) took it", line)
		}
	}
}
