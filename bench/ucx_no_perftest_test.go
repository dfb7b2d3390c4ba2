package main

import (
	"strings"
	"testing"
)

// TestUCXTableWithoutPerftest: where ucx_perftest is not installed (or a row has no competitor
// figure) the table says its competitor was not measured; it printed perftest's column as 0 and
// remote's ratio to it as 0.00, a ratio no run measured.
func TestUCXTableWithoutPerftest(t *testing.T) {
	r := ucxRow{Case: "put/4KiB", Size: 4 << 10}
	r.compare([]float64{1000, 1100, 1050}, []float64{900, 950, 920}, nil)
	r.like([]float64{1000, 1100, 1050}, nil)
	var b strings.Builder
	printUCX(&b, "UCX_TLS=tcp", "0.1", []ucxRow{r})
	var line string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "| put/4KiB ") {
			line = l
		}
	}
	if strings.Contains(line, "| 0 |") || strings.Contains(line, "0.00") || !strings.Contains(line, "not measured") {
		t.Errorf("a row without perftest's figures: %q, want its competitor not measured, no ratio", line)
	}
}
