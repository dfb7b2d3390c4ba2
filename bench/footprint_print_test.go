package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestFootprintPrintedOnce: the larson footprint cases are printed in their own table
// (printFootprint), not also as a raw list of every metric under the other tables.
func TestFootprintPrintedOnce(t *testing.T) {
	cs := footprintCases()
	var larson []benchCase
	for _, c := range cs {
		if strings.HasPrefix(c.name, "footprint/larson") {
			larson = append(larson, c)
		}
	}
	if len(larson) == 0 {
		t.Fatal("no larson case")
	}
	rs := resultSet{c: larson[0].name, impl: "pinmalloc-pool"}
	rs.larsoned(larsonResult{live: 2 << 20, end: 10 << 20, idle: 3 << 20, trimmed: 3 << 20,
		nsPerOp: 100})
	s := &suite{cfg: &config{implFilter: regexp.MustCompile("")}, results: rs.out}
	var out bytes.Buffer
	printTables(&out, s, larson)
	if strings.Contains(out.String(), "live_bytes=") {
		t.Errorf("printTables lists the footprint case's figures raw:\n%s", out.String())
	}
	out.Reset()
	printFootprint(&out, s.results)
	if !strings.Contains(out.String(), "| "+larson[0].name+" | pinmalloc-pool | 2.00 |") {
		t.Errorf("printFootprint does not show the case:\n%s", out.String())
	}
}

// TestFootprintPrintsBaseline: the footprint table says what a C allocator's child held
// before its cases, which its figures leave out, and says nothing of it for the others.
func TestFootprintPrintsBaseline(t *testing.T) {
	var rs []result
	for _, c := range []struct {
		impl     string
		baseline uint64
	}{{"pinmalloc-pool", 0}, {"glibc", 536 << 10}, {"glibc", 660 << 10}} {
		set := resultSet{c: "footprint/larson-low", impl: c.impl}
		set.larsoned(larsonResult{live: 2 << 20, end: 4 << 20, idle: 4 << 20, trimmed: 4 << 20,
			baseline: c.baseline, nsPerOp: 100})
		rs = append(rs, set.out...)
	}
	var out bytes.Buffer
	printFootprint(&out, rs)
	if !strings.Contains(out.String(), "at most: glibc 660 KiB.") ||
		strings.Contains(out.String(), "pinmalloc-pool 0") {
		t.Errorf("printFootprint does not say glibc's baseline (660 KiB at most) alone:\n%s", out.String())
	}
}
