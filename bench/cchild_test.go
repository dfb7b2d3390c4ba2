package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/alloctrace"
)

// footprintAllocators returns mimalloc and glibc, those available, or skips the test.
func footprintAllocators(t *testing.T) []impl {
	t.Helper()
	var ims []impl
	for _, open := range []func() impl{newMimalloc, newGlibc} {
		if im := open(); im.skip == "" && im.larson != nil {
			ims = append(ims, im)
		}
	}
	if len(ims) == 0 {
		t.Skip("neither mimalloc nor glibc is available (cgo)")
	}
	return ims
}

// TestCFootprintIsTheCasesOwn: a C allocator's larson footprint counts only the case's own
// memory, not what earlier cases left allocated in the process (mi_process_info and mallinfo2
// are the process's figures): with 256 MiB kept live through the same allocator, the figure
// stays near the one taken before.
func TestCFootprintIsTheCasesOwn(t *testing.T) {
	for _, im := range footprintAllocators(t) {
		cFootprintIsTheCasesOwn(t, im)
	}
}

func cFootprintIsTheCasesOwn(t *testing.T, im impl) {
	sh := larsonShape{name: "larson-low", threads: 8, slots: 8, lo: 8, hi: 64 << 10}
	const steps, idle = 2000, 10 * time.Millisecond
	clean, err := im.larson(sh, steps, idle)
	if err != nil {
		t.Fatalf("%s: %v", im.name, err)
	}
	if clean.live == 0 || clean.idle == 0 {
		t.Fatalf("%s: larson measured nothing: %+v", im.name, clean)
	}
	const left = 256 << 20 // what an earlier case left: 256 blocks of 1 MiB, kept live
	w, err := im.churn(left>>20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.close(); err != nil {
			t.Error(err)
		}
	}()
	after, err := im.larson(sh, steps, idle)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name        string
		clean, with uint64
	}{
		{"end", clean.end, after.end}, {"idle", clean.idle, after.idle},
		{"trimmed", clean.trimmed, after.trimmed},
	} {
		if f.with > f.clean+left/4 {
			t.Errorf("%s: held %s %.1f MiB with %d MiB left in the process, %.1f MiB without: "+
				"the figure counts what the case did not allocate", im.name, f.name,
				float64(f.with)/(1<<20), left>>20, float64(f.clean)/(1<<20))
		}
	}
}

// TestCReplayInChild: a C allocator's replay runs in a child and brings back its figures.
func TestCReplayInChild(t *testing.T) {
	var evs []alloctrace.Event
	for i := range uint64(300) { // sampled every 256 events: the peak is seen at the 256th
		evs = append(evs, alloctrace.Event{ID: i, Size: 16 << 10})
	}
	for i := range uint64(300) {
		evs = append(evs, alloctrace.Event{Free: true, ID: i})
	}
	for _, im := range footprintAllocators(t) {
		r, err := im.replay(evs, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Events != len(evs) || r.PeakLive == 0 || r.PeakHeld < r.PeakLive*3/4 || r.NsPerOp <= 0 {
			t.Errorf("%s: replay of %d events read %+v", im.name, len(evs), *r)
		}
	}
}

// TestFootprintChildFails: a child that fails gives the case an error (errFootprintChild, with
// what it said), not a crash or figures of zero.
func TestFootprintChildFails(t *testing.T) {
	defer func(f func() (string, error)) { cFootprintSelf = f }(cFootprintSelf)
	cFootprintSelf = func() (string, error) { return "/bin/false", nil }
	sh := larsonShapes[0]
	_, err := larsonInChild("glibc")(sh, 10, 0)
	if !errors.Is(err, errFootprintChild) || !strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("a child that exits 1: %v, want errFootprintChild and its status", err)
	}
	cFootprintSelf = func() (string, error) { return "/bin/true", nil }
	if _, err := larsonInChild("glibc")(sh, 10, 0); !errors.Is(err, errFootprintChild) {
		t.Errorf("a child that writes no reply: %v, want errFootprintChild", err)
	}
	rep := footprintHere(cFootprintRequest{Impl: "nonesuch", Larson: &larsonRequest{}})
	if !strings.Contains(rep.Err, `no C allocator named "nonesuch"`) {
		t.Errorf("a request for an unknown allocator: %+v", rep)
	}
}

// glibcBase returns glibc and what it holds for a case of one block in a footprint child
// (the case's thread's own arena, 132 KiB; what the child held before is left out), or skips
// the test.
func glibcBase(t *testing.T) (impl, float64) {
	t.Helper()
	im := newGlibc()
	if im.skip != "" {
		t.Skip("glibc: " + im.skip)
	}
	r, err := im.replay([]alloctrace.Event{{ID: 0, Size: 24}, {ID: 0, Free: true}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return im, float64(r.PeakHeld)
}

// TestCFootprintLeavesOutTheHarness: the larson loop's own arrays (a slot and a size for each
// block) are not counted as glibc's: 200,000 blocks of 24 B on one thread (a 32 B chunk each)
// hold 1.33x their live bytes beyond what glibc held before, where the arrays' 3.1 MiB from
// libc's calloc would make it 2x.
func TestCFootprintLeavesOutTheHarness(t *testing.T) {
	im, base := glibcBase(t)
	sh := larsonShape{name: "many", threads: 1, slots: 200_000, lo: 24, hi: 24}
	r, err := im.larson(sh, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := (float64(r.end) - base) / float64(r.live); got > 1.6 || testing.Verbose() {
		t.Logf("glibc holds %.2fx its live bytes of 24 B blocks (%d for %d, %.0f before)",
			got, r.end, r.live, base)
		if got > 1.6 {
			t.Error("want 32/24 = 1.33x: the loop's own arrays are counted")
		}
	}
}

// TestCReplayLeavesOutTheHarness: the replay loop's slots (one for each allocation) are not
// counted as glibc's: 100,000 allocations of 24 B (a 32 B chunk each) peak at 1.33x their
// live bytes beyond what glibc held before, where the slots' 781 KiB from libc's malloc would
// make it 1.67x.
func TestCReplayLeavesOutTheHarness(t *testing.T) {
	im, base := glibcBase(t)
	const n = 100_000
	evs := make([]alloctrace.Event, 0, 2*n)
	for i := range uint64(n) {
		evs = append(evs, alloctrace.Event{ID: i, Size: 24})
	}
	for i := range uint64(n) {
		evs = append(evs, alloctrace.Event{Free: true, ID: i})
	}
	r, err := im.replay(evs, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := (float64(r.PeakHeld) - base) / float64(r.PeakLive); got > 1.5 || testing.Verbose() {
		t.Logf("glibc's replay peaks at %.2fx its live bytes of 24 B blocks (%d for %d, %.0f before)",
			got, r.PeakHeld, r.PeakLive, base)
		if got > 1.5 {
			t.Error("want 32/24 = 1.33x: the loop's own slots are counted")
		}
	}
}

// TestReplayRequestRoundTrip: a replay request carries the events' IDs, frees and sizes, and
// one short of sizes is refused.
func TestReplayRequestRoundTrip(t *testing.T) {
	evs := []alloctrace.Event{{ID: 0, Size: 24}, {ID: 1, Size: 1 << 20}, {ID: 0, Free: true},
		{ID: 2, Size: 8}, {ID: 1, Free: true}, {ID: 2, Free: true}}
	got, err := newReplayRequest(evs).events()
	if err != nil || !slices.Equal(got, evs) {
		t.Errorf("round trip: %v, %v; want %v", got, err, evs)
	}
	r := newReplayRequest(evs)
	r.Sizes = r.Sizes[:2]
	if _, err := r.events(); err == nil {
		t.Error("a request short of a size: no error")
	}
}
