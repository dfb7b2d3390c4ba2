package main

import (
	"testing"
	"time"
)

// TestGoHeapAllocatorsAlternate checks that make and sync.Pool run in the rounds of the other
// allocators of a case, alternating with them, so that a change of the machine's load lands
// on both sides of a ratio; they ran in rounds of their own, all of theirs in one stretch.
func TestGoHeapAllocatorsAlternate(t *testing.T) {
	const reps = 3
	s := &suite{cfg: &config{target: time.Millisecond, reps: reps}}
	var calls []string // the allocator of every run, in order
	logged := func(im impl) impl {
		pair := im.pair
		im.pair = func(size int) (workload, error) {
			w, err := pair(size)
			if err != nil {
				return w, err
			}
			run := w.run
			w.run = func(n int) (time.Duration, error) {
				calls = append(calls, im.name)
				return run(n)
			}
			return w, nil
		}
		return im
	}
	ims := []impl{logged(newGoMake()), logged(newGoSyncPool())}
	for _, im := range nullImpls() {
		if im.name == "null-go-bytes" {
			ims = append(ims, logged(im))
		}
	}
	rs := s.run(benchCase{name: "pair/16B", group: "pair", size: 16}, ims)
	for _, im := range ims {
		if _, ok := lookup(rs, "pair/16B", im.name, "ns_per_pair"); !ok {
			t.Fatalf("%s has no ns_per_pair: %v", im.name, rs)
		}
		stretches := 0 // maximal runs of its calls with no other allocator's between
		for i, name := range calls {
			if name == im.name && (i == 0 || calls[i-1] != name) {
				stretches++
			}
		}
		if stretches < reps {
			t.Errorf("%s ran in %d stretches, want one a round at least (%d): %v",
				im.name, stretches, reps, calls)
		}
	}
}
