package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	wl "github.com/pinmalloc/pinmalloc/internal/workload"
)

// tinyUVM opens the suite on the fake driver with a geometry small enough for a unit test: a
// 4 MiB budget of 64 KiB blocks (64 to 256 blocks) and batches of 64 blocks, with no thrash
// detection: a block found thrashing stays on the device out of the policy's order, and which
// blocks are found so depends on how long each access took (TestUVMScanAfterPause).
func tinyUVM(t *testing.T) (*uvmSuite, *config) {
	t.Helper()
	u := &uvmSuite{}
	if err := u.open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := u.close(); err != nil {
			t.Error(err)
		}
	})
	if !u.fake {
		t.Fatal("the suite did not see the fake driver")
	}
	u.geo = uvmGeometry{budget: 4 << 20, block: 64 << 10, batch: 4 << 20, maxBlocks: 64, passes: 2, writeEach: 3,
		thrashLapse: -1}
	return u, &config{quick: true, reps: 1, target: 10 * time.Millisecond, out: t.TempDir(), name: "uvm-test"}
}

// metric returns a result the case must have recorded, failing the test on an error result.
func metric(t *testing.T, rs []result, c, impl, m string) float64 {
	t.Helper()
	if e, ok := failure(rs, c, impl); ok {
		t.Fatalf("%s (%s): %s", c, impl, e)
	}
	v, ok := lookup(rs, c, impl, m)
	if !ok {
		t.Fatalf("%s (%s): no %s in %v", c, impl, m, rs)
	}
	return v
}

// TestUVMSuiteOnFake runs every kind of case of the -uvm suite on the fake at a tiny size and
// checks their results (the oversubscription cases verify every block's bytes themselves):
// at 1x every access hits and nothing moves; oversubscribed, random access misses and
// migrates; a scan over 2x the budget misses every time with LRU. Then it writes the table
// and the plots and checks they hold what ran.
func TestUVMSuiteOnFake(t *testing.T) {
	if fakecuda.Run(t) == nil {
		return
	}
	u, cfg := tinyUVM(t)
	var all []result
	for _, p := range wl.Patterns {
		for _, pol := range uvmPolicies {
			for _, f := range []float64{1, 2, 4} {
				c := fmt.Sprintf("uvm-oversub/%s/%s/%gx", p, pol.name, f)
				rs := u.oversub(cfg, c, p, pol, f)
				all = append(all, rs...)
				hit, mig := metric(t, rs, c, "uvm", "hit_rate"), metric(t, rs, c, "uvm", "migrated_gbps")
				if metric(t, rs, c, "uvm", "gbps") <= 0 {
					t.Errorf("%s: no throughput", c)
				}
				switch {
				case f == 1 && (hit != 1 || mig != 0):
					t.Errorf("%s: hit rate %g, %g GB/s migrated: at 1x every block stays resident", c, hit, mig)
				case f > 1 && p != wl.Zipf && (hit >= 0.9 || mig <= 0):
					t.Errorf("%s: hit rate %g, %g GB/s migrated: oversubscribed %s access must miss", c, hit, mig, p)
				case f == 2 && p == wl.Streaming && pol.name == "lru" && hit != 0:
					t.Errorf("%s: hit rate %g: LRU under a scan of twice its budget never hits", c, hit)
				}
			}
		}
	}
	rs := u.move(cfg, 64<<10)
	all = append(all, rs...)
	for _, m := range []string{"evict_gbps", "restore_gbps", "bidir_gbps"} {
		if v := metric(t, rs, "uvm-move/64KiB", "uvm", m); v <= 0 {
			t.Errorf("uvm-move/64KiB: %s %g", m, v)
		}
	}
	if b := metric(t, rs, "uvm-move/64KiB", "uvm", "batch_bytes"); b != 64*64<<10 {
		t.Errorf("batch of %g bytes, want the 64 blocks maxBlocks allows", b)
	}
	rs = u.acquireResident(cfg)
	all = append(all, rs...)
	if ns := metric(t, rs, "uvm-acquire/resident", "uvm", "ns_per_acquire"); ns <= 0 {
		t.Errorf("Acquire of a resident block: %g ns", ns)
	}
	rs = u.managed(cfg)
	all = append(all, rs...)
	if _, ok := failure(rs, "uvm-managed", "managed"); !ok {
		t.Errorf("managed memory measured on the fake, whose prefetch moves nothing: %v", rs)
	}

	s := &suite{cfg: cfg, results: all, load: "test"}
	uvmWhere = "the fake driver (test)"
	if err := writeUVMTables(s, uvmTargetsOnly(u.targets(all))); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(cfg.out, cfg.name+".md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| zipf | 2q |", "| streaming | lru |", "| 64KiB | 4MiB |", "N/A        uvm-evict-gbps", "uvm-acquire-resident"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the table has no %q:\n%s", want, md)
		}
	}
	if strings.Contains(string(md), "error:") {
		t.Errorf("the table shows errors:\n%s", md)
	}
	files, err := writePlots(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"uvm-oversub", "uvm-hitrate", "uvm-move"} {
		path := filepath.Join(cfg.out, cfg.name+"-"+suffix+".svg")
		svg, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("plot %s not written (wrote %v): %v", suffix, files, err)
			continue
		}
		if suffix != "uvm-move" && !strings.Contains(string(svg), "zipf 2q") {
			t.Errorf("%s has no line for zipf 2q", path)
		}
	}
}

// TestUVMScanAfterPause checks that LRU under a scan of twice its budget still never hits when
// the warm-up pauses near its end, as a loaded machine makes it. With thrash detection on, the
// blocks migrated in quick succession before the pause were kept on the device out of LRU
// order and later accesses hit them (hit rate 0.07 – 0.09, as in CI's unprivileged stage).
func TestUVMScanAfterPause(t *testing.T) {
	if fakecuda.Run(t) == nil {
		return
	}
	u, cfg := tinyUVM(t)
	uvmWarmHook = func(i int) {
		if i == 100 || i == 120 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	defer func() { uvmWarmHook = nil }()
	lru := uvmPolicies[0]
	if lru.name != "lru" {
		t.Fatalf("the first policy is %s, not lru", lru.name)
	}
	for range 3 {
		c := "uvm-oversub/streaming/lru/2x"
		if hit := metric(t, u.oversub(cfg, c, wl.Streaming, lru, 2), c, "uvm", "hit_rate"); hit != 0 {
			t.Fatalf("%s: hit rate %g after a pause in the warm-up: LRU under a scan never hits", c, hit)
		}
	}
}

// TestManagedOversubOnFake runs the managed memory competitor's case on the fake: its
// prefetches move no bytes there, so only the bookkeeping is checked (the LRU's hits and
// migrations), not a bandwidth.
func TestManagedOversubOnFake(t *testing.T) {
	if fakecuda.Run(t) == nil {
		return
	}
	u, cfg := tinyUVM(t)
	for _, tc := range []struct {
		p       wl.Pattern
		f       float64
		hitRate func(float64) bool
	}{
		{wl.Streaming, 1, func(h float64) bool { return h == 1 }},
		{wl.Streaming, 2, func(h float64) bool { return h == 0 }},
		{wl.Random, 4, func(h float64) bool { return h > 0.1 && h < 0.4 }},
	} {
		c := fmt.Sprintf("uvm-oversub/%s/managed/%gx", tc.p, tc.f)
		rs := u.managedOversub(cfg, c, tc.p, tc.f)
		if h := metric(t, rs, c, "managed", "hit_rate"); !tc.hitRate(h) {
			t.Errorf("%s: hit rate %g", c, h)
		}
		in := metric(t, rs, c, "managed", "bytes_in_per_access")
		if (tc.f == 1) != (in == 0) {
			t.Errorf("%s: %g bytes in per access", c, in)
		}
	}
}

// TestManagedLRU checks the competitor's residency list against a plain model.
func TestManagedLRU(t *testing.T) {
	const blocks, budget = 10, 4
	l := newManagedLRU(blocks, budget)
	var model []int // least recently used first
	g, err := wl.New(wl.Zipf, blocks, 7)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		k := g.Next()
		at := -1
		for j, x := range model {
			if x == k {
				at = j
			}
		}
		wantVictim := -1
		if at >= 0 {
			model = append(model[:at], model[at+1:]...)
		} else if len(model) == budget {
			wantVictim, model = model[0], model[1:]
		}
		model = append(model, k)
		hit, victim := l.use(k)
		if hit != (at >= 0) || victim != wantVictim {
			t.Fatalf("access %d of block %d: hit %v victim %d, want %v %d", i, k, hit, victim, at >= 0, wantVictim)
		}
	}
}
