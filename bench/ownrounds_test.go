package main

import (
	"strings"
	"testing"
	"time"
)

// TestOwnRoundsMissedWhy checks what a MISSED target says of figures taken in separate rounds:
// sync.Pool and make run in rounds of their own (impl.alone), so the spread of each figure's
// rounds says nothing of a change of load between the two; the target said "the gap is the
// code's, not the load's" all the same.
func TestOwnRoundsMissedWhy(t *testing.T) {
	c := "pair/4KiB"
	rs := []result{
		{Case: c, Impl: "pinmalloc-pool", Metric: "ns_per_pair", Value: 24},
		{Case: c, Impl: "pinmalloc-pool", Metric: "round_spread", Value: 1.02},
		{Case: c, Impl: "go-syncpool", Metric: "ns_per_pair", Value: 20},
		{Case: c, Impl: "go-syncpool", Metric: "round_spread", Value: 1.03},
		{Case: c, Impl: "go-syncpool", Metric: "own_rounds", Value: 1},
	}
	for _, tg := range evaluateTargets(rs) {
		if tg.Name != "pool-vs-syncpool/4KiB" {
			continue
		}
		if tg.Status != missed {
			t.Fatalf("1.2x against 1x, rounds within 1.05x: %s (%s); want MISSED", tg.Status, tg.Detail)
		}
		if why := missedWhy(tg); strings.Contains(why, "not the load's") || !strings.Contains(why, "go-syncpool ran in rounds of its own") {
			t.Errorf("why: %q; want it to say that go-syncpool ran in rounds of its own", why)
		}
		return
	}
	t.Fatal("no pool-vs-syncpool/4KiB target")
}

// TestRunMarksOwnRounds checks that a case marks the figures of the allocators it measured in
// rounds of their own (own_rounds), and only those.
func TestRunMarksOwnRounds(t *testing.T) {
	s := &suite{cfg: &config{target: time.Millisecond, reps: 3}}
	var ims []impl
	for _, im := range append([]impl{newGoSyncPool()}, nullImpls()...) {
		if im.name == "go-syncpool" || im.name == "null-go-bytes" {
			ims = append(ims, im)
		}
	}
	rs := s.run(benchCase{name: "pair/16B", group: "pair", size: 16}, ims)
	if _, ok := lookup(rs, "pair/16B", "go-syncpool", "own_rounds"); !ok {
		t.Errorf("go-syncpool, measured alone, has no own_rounds: %v", rs)
	}
	if _, ok := lookup(rs, "pair/16B", "null-go-bytes", "own_rounds"); ok {
		t.Errorf("null-go-bytes, measured in the shared rounds, has own_rounds")
	}
}
