package main

import "testing"

// TestChurnCase runs a small churn case on every allocator built, the null ones with them,
// and checks that each is measured, adjusted by its own null and compared with mimalloc.
func TestChurnCase(t *testing.T) {
	s, _ := testSuite(t)
	ims := s.selected()
	c := benchCase{name: "churn/1k", group: "churn", size: churnSize, live: 1000}
	rs := s.run(c, ims)
	rs = append(rs, adjusted(rs, ims)...)
	mimalloc := newMimalloc().skip == ""
	for _, im := range ims {
		if e, ok := failure(rs, c.name, im.name); ok {
			t.Fatalf("%s: %s", im.name, e)
		}
		if v, ok := lookup(rs, c.name, im.name, "ns_per_pair"); !ok || v <= 0 {
			t.Errorf("%s: %g ns per pair", im.name, v)
		}
		if im.harness == im.name {
			continue
		}
		if _, ok := lookup(rs, c.name, im.name, "ns_per_pair_adjusted"); !ok {
			t.Errorf("%s: not adjusted by %s", im.name, im.harness)
		}
		if _, ok := lookup(rs, c.name, im.name, "vs_mimalloc"); ok != (mimalloc && im.name != "mimalloc") {
			t.Errorf("%s: ratio to mimalloc present %v, mimalloc built %v", im.name, ok, mimalloc)
		}
	}
}

// TestChurnCounts checks the churn cases' names and the -maxlive cut.
func TestChurnCounts(t *testing.T) {
	var names []string
	for _, c := range churnCases(1e6) {
		names = append(names, c.name)
	}
	if got := len(names); got != 3 || names[0] != "churn/10k" || names[2] != "churn/1M" {
		t.Errorf("churn cases up to 1e6: %v", names)
	}
}
