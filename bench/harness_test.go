package main

import (
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testSuite is a suite with a tiny configuration over the allocators a test may run here:
// the pinmalloc ones only where this process may lock 256 MiB (they lock their memory), which
// locked reports.
func testSuite(t *testing.T) (s *suite, locked bool) {
	t.Helper()
	cfg := &config{reps: 3, target: 4 * time.Millisecond, implFilter: regexp.MustCompile("")}
	impls := []impl{newMimalloc(), newGlibc()}
	var lim unix.Rlimit
	locked = os.Geteuid() == 0 || unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil && lim.Cur >= 256<<20
	if locked {
		impls = append(impls, newPinmallocHeap(), newPinmallocPool())
	} else {
		t.Log("RLIMIT_MEMLOCK below 256 MiB: the pinmalloc allocators (locked memory) are left out")
	}
	return &suite{cfg: cfg, impls: impls, nulls: nullImpls(), ops: mixedOps()}, locked
}

// TestLoopsDoNotAllocate checks that the harness makes no heap allocation per operation:
// through every loop of the cases measured in rounds (run by the null allocators, which
// allocate nothing themselves) and the sweep's, ten times the operations make no more
// allocations. A run itself may allocate, outside its timed part, to start its goroutines.
// (What the allocators under test allocate in Go memory is theirs: pinmalloc keeps its
// metadata there.)
func TestLoopsDoNotAllocate(t *testing.T) {
	s := &suite{ops: mixedOps()}
	var runs []runner
	var names []string
	for _, im := range nullImpls() {
		if im.skip != "" {
			continue
		}
		for _, c := range []benchCase{
			{group: "pair", size: 64},
			{group: "mixed", g: 1},
			{group: "mixed", g: 2},
			{group: "prodcons"},
			{group: "churn", size: churnSize, live: 1000},
		} {
			open, _ := s.workload(c, im)
			w, err := open()
			if err != nil {
				t.Fatalf("%s %s: %v", im.name, c.group, err)
			}
			t.Cleanup(func() {
				if err := w.close(); err != nil {
					t.Error(err)
				}
			})
			runs = append(runs, w.run)
			names = append(names, fmt.Sprintf("%s %s %dg", im.name, c.group, c.g))
		}
	}
	// The sweep's pairs share one allocator between goroutines: one null would be a data race.
	runs = append(runs, control(1), control(2), poolPairs(newNullBytes(), s.ops, 1))
	names = append(names, "control 1g", "control 2g", "sweep pairs")
	for i, r := range runs {
		allocs := func(n int) float64 {
			return testing.AllocsPerRun(5, func() {
				if _, err := r(n); err != nil {
					t.Fatal(err)
				}
			})
		}
		if few, many := allocs(1024), allocs(10240); many > few {
			t.Errorf("%s: %g allocations for 1024 operations, %g for 10240", names[i], few, many)
		}
	}
}

// TestParallelSpan checks that a parallel run lasts from the first timed part's start to the
// last one's end, not as long as the longest part: parts run one after the other take their
// sum.
func TestParallelSpan(t *testing.T) {
	d, err := parallel([]job{
		func(b *barrier) (span, error) { b.wait(); return span{100, 200}, nil },
		func(b *barrier) (span, error) { b.wait(); return span{200, 300}, nil },
	})
	if err != nil || d != 200 {
		t.Errorf("%v, %v: want 200 ns", d, err)
	}
}
