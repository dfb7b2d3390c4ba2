package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	wl "github.com/pinmalloc/pinmalloc/internal/workload"
)

// The UVM tier suite (issue 9) measures the uvm package's tier on device 0:
//
//   - uvm-oversub/PATTERN/POLICY/Fx: throughput of Acquire + device work + Release over a
//     working set F times the tier's VRAM budget (F = 1, 1.5, 2, 3, 4), for streaming, random
//     and Zipf access (internal/workload, fixed seeds: both policies see the same accesses),
//     with LRU and the scan-resistant policy (2Q). Reported: accessed GB/s, hit rate,
//     migrated GB/s and the p50/p99 latency of Acquire. Every block's bytes are checked after
//     the timed part.
//   - uvm-oversub/PATTERN/managed/Fx (on a GPU only): the competitor, managed memory within the
//     same budget, an LRU of blocks moving them with cuMemPrefetchAsync (uvm_managed.go).
//   - uvm-move/SIZE: explicit Evict and Prefetch of a batch of blocks of SIZE (4 KiB … 2 MiB)
//     moving geo.batch bytes (evict_gbps, restore_gbps), and both at once (one batch out while
//     another comes in: bidir_gbps, aggregate), each timed to the tier's Sync.
//   - uvm-managed: the same bytes of managed memory moved with cuMemPrefetchAsync, to the host
//     (cold, then warm) and back, in the same run (on a GPU only: the fake's prefetch moves no
//     bytes).
//   - uvm-acquire/resident: the CPU cost of Acquire of a block already in VRAM.
//
// It is a gpuSuite, so `-gpu` runs it where a driver is found; `-uvm` runs it alone, on the
// GPU when a driver is found and otherwise on the fake driver (internal/fakecuda, which keeps
// device memory in host memory: its figures are CPU-bound memcpy, not copy-engine speed, and
// its bandwidth targets are reported as not measured).
type uvmSuite struct {
	pub  *cuda.Device  // the device as the tier takes it (the public package's)
	dev  *icuda.Device // the same device, for the work the suite queues (memsets, managed memory)
	s    cuda.Stream   // the user's stream: acquisitions, releases and the device work
	fake bool          // dev is the fake driver's
	geo  uvmGeometry
}

func init() { gpuSuites = append(gpuSuites, &uvmSuite{}) }

// uvmGeometry sizes the suite for the device it runs on.
type uvmGeometry struct {
	budget    uintptr // the tier's VRAM budget in the oversubscription cases
	block     int     // block size in the oversubscription cases
	batch     int     // bytes moved per Evict or Prefetch call in the block-size cases
	maxBlocks int     // if not 0, the most blocks a batch of the block-size cases has
	passes    int     // accesses per case, in passes over the working set
	writeEach int     // every writeEach-th access is in write mode
	// thrashLapse is the tier's Options.ThrashLapse: 0 for the tier's default, negative for no
	// thrash detection. A block found thrashing stays on the device for a while, out of the
	// policy's order, so that which blocks stay depends on how long each access took.
	thrashLapse time.Duration
}

// Oversubscription factors, block sizes and the access patterns of the suite.
var (
	uvmFactors    = []float64{1, 1.5, 2, 3, 4}
	uvmBlockSizes = []int64{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20}
)

// uvmSeed seeds every access generator of the suite.
const uvmSeed = 0x75766d5f7a697066 // "uvm_zipf"

func (*uvmSuite) name() string { return "uvm" }

func (u *uvmSuite) open() (err error) {
	if u.pub, err = cuda.Open(0); err != nil {
		return err
	}
	if u.dev, err = icuda.Of(u.pub); err != nil {
		return errors.Join(err, u.pub.Close())
	}
	s, err := u.dev.StreamCreate(true)
	if err != nil {
		return errors.Join(err, u.pub.Close())
	}
	u.s = cuda.Stream(s)
	u.fake = fakecuda.IsFake(u.dev)
	// A GPU: a 1 GiB budget (4 GiB of pinned host memory at 4x: 4,096 to 16,384 blocks) and
	// 64 MiB batches, well above the 16 MiB the targets ask for. The fake keeps "device" memory
	// in host memory and runs on small build machines: 32 MiB and 16 MiB batches.
	u.geo = uvmGeometry{budget: 1 << 30, block: 256 << 10, batch: 64 << 20, passes: 4, writeEach: 4}
	if u.fake {
		u.geo = uvmGeometry{budget: 32 << 20, block: 256 << 10, batch: 16 << 20, passes: 2, writeEach: 4}
	}
	return nil
}

func (u *uvmSuite) close() error {
	return errors.Join(u.dev.StreamDestroy(uintptr(u.s)), u.pub.Close())
}

func (*uvmSuite) impls() []impl { return nil }

// cases lists the suite's cases; each runs itself (custom) and reports under impl "uvm" or
// "managed".
func (u *uvmSuite) cases() []benchCase {
	var cs []benchCase
	for _, p := range wl.Patterns {
		for _, pol := range uvmPolicies {
			for _, f := range uvmFactors {
				name := fmt.Sprintf("uvm-oversub/%s/%s/%gx", p, pol.name, f)
				cs = append(cs, benchCase{name: name, group: "uvm", custom: func(s *suite) []result {
					return u.oversub(s.cfg, name, p, pol, f)
				}})
			}
		}
		if u.fake { // its cuMemPrefetchAsync moves no bytes: nothing to compare with
			continue
		}
		for _, f := range uvmFactors {
			name := fmt.Sprintf("uvm-oversub/%s/%s/%gx", p, managedPolicy, f)
			cs = append(cs, benchCase{name: name, group: "uvm", custom: func(s *suite) []result {
				return u.managedOversub(s.cfg, name, p, f)
			}})
		}
	}
	for _, sz := range uvmBlockSizes {
		name := sizeName(sz)
		cs = append(cs, benchCase{name: "uvm-move/" + name, group: "uvm", size: sz, custom: func(s *suite) []result {
			return u.move(s.cfg, int(sz))
		}})
	}
	cs = append(cs,
		benchCase{name: "uvm-managed", group: "uvm", custom: func(s *suite) []result { return u.managed(s.cfg) }},
		benchCase{name: "uvm-acquire/resident", group: "uvm", custom: func(s *suite) []result { return u.acquireResident(s.cfg) }},
	)
	return cs
}

// Bandwidth targets of issue 9 (GB/s, 10^9 bytes per second) and the CPU cost of a hit.
const (
	uvmOneWayGBps   = 48
	uvmBidirGBps    = 80
	uvmVsManaged    = 5 // issue 19 (4 in issue 9)
	uvmAcquireHitNs = 200
)

// targets: evict and restore at >= 48 GB/s for every block size, >= 5x managed memory's warm
// eviction, >= 80 GB/s both directions at once (on a GPU only), and Acquire of a resident
// block <= 200 ns (CPU bookkeeping: measured everywhere).
func (u *uvmSuite) targets(rs []result) []target {
	noGPU := "not measured: no GPU (the fake driver's copies are CPU memcpy)"
	worst := func(metric string, divide bool) (float64, bool, string) {
		low, all := 0.0, true
		var parts []string
		mg, okM := lookup(rs, "uvm-managed", "managed", "evict_warm_gbps")
		for i, sz := range uvmBlockSizes {
			v, ok := lookup(rs, "uvm-move/"+sizeName(sz), "uvm", metric)
			if divide {
				v, ok = v/mg, ok && okM && mg > 0
			}
			all = all && ok
			if !ok {
				continue
			}
			if i == 0 || v < low {
				low = v
			}
			parts = append(parts, fmt.Sprintf("%s %.3g", sizeName(sz), v))
		}
		return low, all, strings.Join(parts, ", ")
	}
	gb := func(name, want, metric string, limit float64, divide bool) target {
		v, ok, detail := worst(metric, divide)
		t := ratio(name, want, v, 1, ok, limit, false, detail)
		if u.fake {
			t = onFakeDriver([]target{t})[0]
			t.Detail = noGPU + "; measured " + detail
			if detail == "" {
				t.Detail = noGPU + "; nothing to show"
			}
		}
		return t
	}
	ts := []target{
		gb("uvm-evict-gbps", fmt.Sprintf("Evict >= %d GB/s at every block size 4 KiB - 2 MiB (worst shown)", uvmOneWayGBps), "evict_gbps", uvmOneWayGBps, false),
		gb("uvm-restore-gbps", fmt.Sprintf("Prefetch (restore) >= %d GB/s at every block size (worst shown)", uvmOneWayGBps), "restore_gbps", uvmOneWayGBps, false),
		gb("uvm-evict-vs-managed", fmt.Sprintf("Evict >= %dx managed memory's warm eviction, same bytes (worst shown)", uvmVsManaged), "evict_gbps", uvmVsManaged, true),
		gb("uvm-bidir-gbps", fmt.Sprintf("evict + restore at once >= %d GB/s aggregate at every block size (worst shown)", uvmBidirGBps), "bidir_gbps", uvmBidirGBps, false),
	}
	ns, ok := lookup(rs, "uvm-acquire/resident", "uvm", "ns_per_acquire")
	t := ratio("uvm-acquire-resident", fmt.Sprintf("Acquire of a resident block <= %d ns", uvmAcquireHitNs),
		ns, 1, ok, uvmAcquireHitNs, true, fmtNs(ns))
	if u.fake && ok {
		t.Detail += " (CPU bookkeeping: meaningful on the fake too, on this machine's CPU)"
	}
	return append(ts, t)
}

// uvmOnly is the -uvm mode: it returns the suite's cases alone, run on device 0 of the CUDA
// driver or, where none can be loaded, on the fake driver in a re-executed process (this
// process then exits with the child's status). It also names the results after the device.
func uvmOnly(cfg *config) ([]benchCase, func()) {
	if code, rerun := driverOrFake("bench: -uvm", "its figures are CPU-bound", cfg.fake); rerun {
		os.Exit(code)
	}
	u := &uvmSuite{}
	if err := u.open(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -uvm:", err)
		os.Exit(1)
	}
	gpuTargets = append(gpuTargets, u.targets)
	if cfg.name == "" {
		cfg.name = "uvm-gpu"
		if u.fake {
			cfg.name = "uvm-fake"
		}
		if cfg.quick {
			cfg.name += "-quick"
		}
	}
	where := "GPU"
	if u.fake {
		where = "fake driver (no GPU: device memory simulated in host memory; figures CPU-bound)"
	}
	name, _ := u.dev.Name()
	uvmWhere = fmt.Sprintf("device 0 %q, %s", name, where)
	fmt.Fprintf(os.Stderr, "bench: -uvm: %s\n", uvmWhere)
	return u.cases(), func() {
		if err := u.close(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -uvm: close:", err)
		}
	}
}

// ran reports whether a case whose name starts with prefix has results.
func ran(rs []result, prefix string) bool {
	for _, r := range rs {
		if strings.HasPrefix(r.Case, prefix) {
			return true
		}
	}
	return false
}

// uvmWhere says which device a -uvm run measured, for its table.
var uvmWhere string

// writeUVMTables writes NAME.md in the output directory: where the suite ran, its tables and
// its targets, as printed.
func writeUVMTables(s *suite, ts []target) error {
	if err := os.MkdirAll(s.cfg.out, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# pinmalloc UVM tier suite: %s\n\n%s; %s mode; %s, GOMAXPROCS %d, load %s; %s.\n",
		s.cfg.name, uvmWhere, map[bool]string{true: "quick", false: "full"}[s.cfg.quick], runtime.Version(),
		runtime.GOMAXPROCS(0), s.load, time.Now().UTC().Format(time.RFC3339))
	printUVMTables(&b, s.results)
	printTargets(&b, ts)
	path := filepath.Join(s.cfg.out, s.cfg.name+".md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "bench: wrote", path)
	return nil
}

// uvmTargetsOnly keeps the suite's targets: in -uvm mode the CPU ones were not measured.
func uvmTargetsOnly(ts []target) []target {
	var out []target
	for _, t := range ts {
		if strings.HasPrefix(t.Name, "uvm-") {
			out = append(out, t)
		}
	}
	return out
}

// printUVMTables writes the suite's results as tables, when it ran.
func printUVMTables(w io.Writer, rs []result) {
	get := func(c, im, m string) string {
		if e, ok := failure(rs, c, im); ok {
			return "error: " + shorten(e)
		}
		v, ok := lookup(rs, c, im, m)
		if !ok {
			return "–"
		}
		return fmt.Sprintf("%.3g", v)
	}
	if ran(rs, "uvm-oversub/") {
		fmt.Fprintln(w, "\n### UVM tier: working set / VRAM budget; accessed GB/s · hit rate · migrated GB/s · Acquire p50 / p99")
		fmt.Fprintln(w, "\nAccessed GB/s: accesses × block size / time. Row managed: managed memory kept within the same budget by an LRU moving blocks with cuMemPrefetchAsync (GPU only); its \"Acquire\" is that bookkeeping and the prefetch calls.")
		fmt.Fprintf(w, "\n| pattern | policy |")
		for _, f := range uvmFactors {
			fmt.Fprintf(w, " %gx |", f)
		}
		fmt.Fprintf(w, "\n|---|---|%s\n", strings.Repeat("---|", len(uvmFactors)))
		for _, p := range wl.Patterns {
			for _, row := range uvmRows() {
				if !ran(rs, fmt.Sprintf("uvm-oversub/%s/%s/", p, row.name)) {
					continue
				}
				fmt.Fprintf(w, "| %s | %s |", p, row.name)
				for _, f := range uvmFactors {
					c := fmt.Sprintf("uvm-oversub/%s/%s/%gx", p, row.name, f)
					if e, ok := failure(rs, c, row.impl); ok {
						fmt.Fprintf(w, " error: %s |", shorten(e))
						continue
					}
					p50, _ := lookup(rs, c, row.impl, "acquire_p50_ns")
					p99, _ := lookup(rs, c, row.impl, "acquire_p99_ns")
					fmt.Fprintf(w, " %s · %s · %s · %s / %s |", get(c, row.impl, "gbps"), get(c, row.impl, "hit_rate"),
						get(c, row.impl, "migrated_gbps"), fmtNs(p50), fmtNs(p99))
				}
				fmt.Fprintln(w)
			}
		}
	}
	if ran(rs, "uvm-move/") {
		fmt.Fprintln(w, "\n### UVM tier: explicit Evict / Prefetch of one batch, GB/s (both: one batch out while another comes in, aggregate)")
		fmt.Fprintln(w, "\n| block | batch | evict | restore | both |\n|---|---|---|---|---|")
		for _, sz := range uvmBlockSizes {
			c := "uvm-move/" + sizeName(sz)
			if !ran(rs, c) {
				continue
			}
			batch, _ := lookup(rs, c, "uvm", "batch_bytes")
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", sizeName(sz), sizeName(int64(batch)), get(c, "uvm", "evict_gbps"),
				get(c, "uvm", "restore_gbps"), get(c, "uvm", "bidir_gbps"))
		}
	}
	if e, ok := failure(rs, "uvm-managed", "managed"); ok {
		fmt.Fprintf(w, "\nmanaged memory (cuMemPrefetchAsync): %s\n", e)
	} else if _, ok := find(rs, "uvm-managed", "managed", "evict_warm_gbps"); ok {
		fmt.Fprintf(w, "\nmanaged memory, same bytes (cuMemPrefetchAsync): evict cold %s GB/s, warm %s GB/s, restore %s GB/s\n",
			get("uvm-managed", "managed", "evict_cold_gbps"), get("uvm-managed", "managed", "evict_warm_gbps"), get("uvm-managed", "managed", "restore_gbps"))
	}
	if _, ok := find(rs, "uvm-acquire/resident", "uvm", "ns_per_acquire"); ok {
		fmt.Fprintf(w, "\nAcquire of a resident block: %s ns\n", get("uvm-acquire/resident", "uvm", "ns_per_acquire"))
	}
}
