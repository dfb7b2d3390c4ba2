package main

import (
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestCommitSuiteOnFake runs every case of the -commit suite on the fake at a tiny size: every
// worker count has its figures, the "h100" model (a sleep per granule outside the fake's lock)
// shows the workers' driver calls overlapping, and the latency case and the targets are filled in.
func TestCommitSuiteOnFake(t *testing.T) {
	if fakecuda.Run(t) == nil {
		return
	}
	c := &commitSuite{}
	if err := c.open(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.close(); err != nil {
			t.Error(err)
		}
	}()
	if c.fake == nil {
		t.Fatal("the suite did not see the fake driver")
	}
	c.size, c.lat = 32<<20, 256<<20
	s := &suite{cfg: &config{quick: true, reps: 1, target: 5 * time.Millisecond}}
	var all []result
	for _, bc := range c.cases() {
		rs := bc.custom(s)
		if len(rs) == 0 {
			t.Errorf("%s: no results", bc.name)
		}
		all = append(all, rs...)
	}
	for _, bc := range c.cases() {
		if bc.name == "commit/control" || bc.name == "commit/latency" {
			continue
		}
		if e, ok := failure(all, bc.name, "pinmalloc"); ok && bc.name == "commit/locked" && strings.Contains(e, "RLIMIT_MEMLOCK") {
			continue // an unprivileged run: 32 MiB is above its limit
		}
		for _, w := range commitWorkers {
			for _, m := range []string{"ms_per_gib_", "unpin_ms_per_gib_", "speedup_"} {
				if v := metric(t, all, bc.name, "pinmalloc", m+string(rune('0'+w))+"w"); v <= 0 {
					t.Errorf("%s %s%dw = %v", bc.name, m, w, v)
				}
			}
		}
	}
	// Overlap, not speedup: past GOMAXPROCS workers the speedup is the runtime's (commit.go).
	if n := metric(t, all, "commit/vmm-precommit/h100", "pinmalloc", "overlap_4w"); n < 2 {
		t.Errorf("4 workers over a sleeping driver model: at most %v pinning calls at once", n)
	}
	if n := metric(t, all, "commit/vmm-precommit/h100", "pinmalloc", "overlap_1w"); n != 1 {
		t.Errorf("1 worker over a sleeping driver model: at most %v pinning calls at once", n)
	}
	if r := metric(t, all, "commit/latency", "pinmalloc-pool", "p99_ratio_net"); r <= 0 {
		t.Errorf("latency ratio %v", r)
	}
	ts := c.targets(all)
	if len(ts) != 2 || ts[0].Status != notApplicable || ts[1].Status == unmeasured || ts[1].Status == notApplicable {
		t.Errorf("targets %+v", ts)
	}
	var b strings.Builder
	printCommitTables(&b, all)
	for _, want := range []string{"commit/vmm-precommit/h100", "CPU control", "p99 busy / idle"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestPinTargetBestOfMeasured: pin-1gib-ms takes the best of the measured paths and worker
// counts, wherever a row that is not a number (recorded as 0, noted so) falls among them: such a
// row neither wins nor makes the rows after it win over a better one before it.
func TestPinTargetBestOfMeasured(t *testing.T) {
	row := func(c, m string, v float64, note string) result {
		return result{Case: c, Impl: "pinmalloc", Metric: m, Value: v, Unit: "ms", Note: note}
	}
	for _, tc := range []struct {
		name string
		rs   []result
	}{
		{"nan-between", []result{row("commit/vmm", "ms_per_gib_1w", 40, ""), row("commit/vmm", "ms_per_gib_2w", 0, "not a number"), row("commit/vmm", "ms_per_gib_4w", 60, "")}},
		{"nan-last", []result{row("commit/vmm", "ms_per_gib_1w", 40, ""), row("commit/vmm", "ms_per_gib_2w", 0, "not a number")}},
		{"nan-first", []result{row("commit/vmm", "ms_per_gib_1w", 0, "not a number"), row("commit/vmm", "ms_per_gib_2w", 40, ""), row("commit/vmm", "ms_per_gib_4w", 60, "")}},
	} {
		ts := (&commitSuite{}).targets(tc.rs)
		if ts[0].Name != "pin-1gib-ms" || ts[0].Status != met || ts[0].Ratio != 40 {
			t.Errorf("%s: %s %s ratio %g (%s), want MET at 40 ms/GiB", tc.name, ts[0].Name, ts[0].Status, ts[0].Ratio, ts[0].Detail)
		}
	}
}

// TestPinTargetSkipsFailedPaths: pin-1gib-ms takes no figure of a path whose case recorded an
// error (as lookup takes none of an allocator that failed on its case): a fast pin on a path
// that then failed is no measurement, and with no other path the target is UNMEASURED.
func TestPinTargetSkipsFailedPaths(t *testing.T) {
	fast := result{Case: "commit/vmm-precommit/driver", Impl: "pinmalloc", Metric: "ms_per_gib_4w", Value: 30, Unit: "ms"}
	failed := result{Case: "commit/vmm-precommit/driver", Impl: "pinmalloc", Metric: "error", Note: "4 bytes still committed after Trim"}
	slow := result{Case: "commit/register-span/4k/driver", Impl: "pinmalloc", Metric: "ms_per_gib_1w", Value: 60, Unit: "ms"}
	ts := (&commitSuite{}).targets([]result{fast, failed, slow})
	if ts[0].Status != missed || ts[0].Ratio != 60 {
		t.Errorf("a failed path beside a measured one: %s ratio %g (%s), want MISSED at 60 ms/GiB", ts[0].Status, ts[0].Ratio, ts[0].Detail)
	}
	ts = (&commitSuite{}).targets([]result{fast, failed})
	if ts[0].Status != unmeasured || !strings.Contains(ts[0].Detail, "pinmalloc failed on commit/vmm-precommit/driver") {
		t.Errorf("only a failed path: %s ratio %g (%s), want UNMEASURED saying the path failed", ts[0].Status, ts[0].Ratio, ts[0].Detail)
	}
}
