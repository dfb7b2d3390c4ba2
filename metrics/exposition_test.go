package metrics_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/metrics"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// requirePromtool, set to 1, makes TestExposition fail where promtool is not on the PATH (CI
// installs it and sets it), instead of checking without it.
const requirePromtool = "PINMALLOC_REQUIRE_PROMTOOL"

// TestExposition scrapes a pool, a device heap with a quota and a tier that moved blocks, on
// the fake driver: host and device series are in families of their own, the device families
// have no host-only series, the tier's moves carry their cause, and `promtool check metrics`
// finds nothing to say about the exposition.
func TestExposition(t *testing.T) {
	dev, _ := cudatest.Device(t)
	if dev == nil {
		return
	}
	pool, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 8 << 20, Quota: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	h, err := device.New(dev, device.Options{Capacity: 16 << 20, Quota: 8 << 20, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	tier, err := uvm.New(dev, uvm.Options{DeviceBudget: 2 << 20, Heap: h})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	s, err := dev.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.StreamDestroy(s)
	defer h.ForgetStream(s)
	defer tier.ForgetStream(s)
	var blocks []uvm.Handle
	for range 4 { // 4 MiB of blocks in a 2 MiB budget: acquiring each evicts others
		b, err := tier.Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b)
		if _, err := tier.Acquire(b, s, uvm.Write); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(tier.Release(b, s), dev.StreamSynchronize(s)); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, b := range blocks {
			_ = tier.Free(b)
		}
	}()
	if err := tier.Sync(); err != nil {
		t.Fatal(err)
	}

	c := metrics.New()
	for _, err := range []error{c.AddPool("staging", pool), c.AddDevice("vram", h), c.AddTier("kv", tier)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	enc := expfmt.NewEncoder(&text, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	out := text.String()
	for _, want := range []string{
		`pinmalloc_host_quota_bytes{name="staging"} 1.048576e+06`,
		`pinmalloc_device_quota_bytes{name="vram"} 8.388608e+06`,
		`pinmalloc_device_capacity_bytes{name="vram"} 1.6777216e+07`,
		`pinmalloc_device_heap_info{device="0",name="vram",provider=`,
		`pinmalloc_uvm_tier_info{mover=`,
		`pinmalloc_uvm_budget_bytes{name="kv"} 2.097152e+06`,
		`pinmalloc_uvm_moved_bytes_total{cause="acquire",direction="to_device",name="kv"}`,
		`pinmalloc_uvm_moved_bytes_total{cause="pressure",direction="to_host",name="kv"}`,
		`pinmalloc_info{version=`,
		`pinmalloc_uvm_acquire_seconds_count{name="kv",outcome="miss"} 4`, // each block's first Acquire
		`pinmalloc_uvm_acquire_seconds_bucket{name="kv",outcome="hit",le="+Inf"} 0`,
		`pinmalloc_uvm_acquire_seconds_bucket{name="kv",outcome="miss",le="1e-07"}`,
		`pinmalloc_uvm_acquire_host_seconds_count{name="kv"} 0`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in the exposition", want)
		}
	}
	if !regexp.MustCompile(`# HELP pinmalloc_uvm_acquire_seconds .*hit \(.*1 call in 16 is timed`).MatchString(out) {
		t.Error("the hit histogram's HELP does not say it samples 1 call in 16")
	}
	for _, never := range []string{`pinmalloc_device_locked_bytes`, `pinmalloc_device_syscalls_total`, `type="`, `pinmalloc_committed_bytes`} {
		if strings.Contains(out, never) {
			t.Errorf("%s in the exposition", never)
		}
	}
	if st := tier.Stats(); st.Out[uvm.CausePressure].Blocks == 0 {
		t.Errorf("no eviction for pressure: %+v", st)
	} else if got := testutil.ToFloat64(movedBlocks(c, "to_host", "pressure")); got != float64(st.Out[uvm.CausePressure].Blocks) {
		t.Errorf("moved blocks to the host for pressure: %v; Stats says %d", got, st.Out[uvm.CausePressure].Blocks)
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv(requirePromtool) != "" {
			t.Fatalf("%s is set and promtool is not on the PATH: %v", requirePromtool, err)
		}
		t.Logf("promtool not found: the exposition was checked with client_golang's linter only")
		problems, err := testutil.GatherAndLint(reg)
		if err != nil || len(problems) > 0 {
			t.Errorf("lint: %v %+v", err, problems)
		}
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(out)
	if res, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(res)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s\nexposition:\n%s", err, res, out)
	}
}

// movedBlocks is a collector of c's pinmalloc_uvm_moved_blocks_total series of one direction
// and cause alone.
func movedBlocks(c *metrics.Collector, dir, cause string) prometheus.Collector {
	return prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		all := make(chan prometheus.Metric)
		go func() { c.Collect(all); close(all) }()
		for m := range all {
			if !strings.Contains(m.Desc().String(), `"pinmalloc_uvm_moved_blocks_total"`) {
				continue
			}
			pb := new(dto.Metric)
			_ = m.Write(pb)
			if label(pb, "direction") == dir && label(pb, "cause") == cause {
				ch <- m
			}
		}
	})
}

// label returns the value of m's label name, "" without it.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
