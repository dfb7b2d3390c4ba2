package main

// The GPU check (issue 19): every GPU figure of the project and its targets in one run, within
// a deadline, written as one report.
//
//	go run . -gpucheck DIR [-quick] [-bin .gpu/bin] [-deadline 9m] [-name NAME]
//
// scripts/gpucheck builds what it needs (stripped test binaries of the packages with GPU tests,
// this program and the examples, into .gpu/bin) on a machine with Go, so that a machine with a
// GPU and no Go toolchain only runs them. A run has four steps, in this order, each recorded
// with its time and its output (DIR/gpucheck.log):
//
//  1. the device: name, memory, compute capability, multiprocessors, the CUDA driver API version
//     and, where nvidia-smi answers, the driver's version;
//  2. tests: every test binary listed in BIN/tests.txt, run from its package's folder with
//     -test.run 'CUDA|GPU' (every GPU test, the contract tests of pinned host buffers among
//     them: every size from 1 B to 256 MiB copied both ways), under BIN/test2json, so that
//     every test and subtest is recorded from its own event (gpucheck_tests.go); on a GPU
//     every GPU test the manifest lists must run and pass, and a skip is a failure;
//  3. the examples: kvcache at 3x oversubscription and loadweights with their defaults;
//  4. the benchmark suites of -gpu (gpu.go: pinned pool against cuMemHostAlloc, copies, device
//     heap against cuMemAllocAsync, the copy engine and its calibration, the UVM tier suite of
//     -uvm with managed memory's rows) and the GOMAXPROCS sweep, the cases the targets read
//     first and the tier's oversubscription cases last.
//
// The report, DIR/NAME.md and DIR/NAME.json (NAME: the device's name as a file name, or
// fake-driver), gives every figure and PASS, FAIL or N/A for each target of issues 19 and 26
// (the anchors: CUDA's host memory pool, a PyTorch-style caching host allocator) and for the
// checks that the tests, the examples and the suites ran clean, and compares internal/nvml's
// view of the device with nvidia-smi's. It is rewritten after every
// step, so a run cut short still leaves what it measured. A step that would start past the
// deadline is not run, and its checks FAIL.
//
// Without a CUDA driver the whole run happens against pinmalloc's fake driver (the process runs
// itself again with the fake loaded, as -uvm does): the test binaries run without it, so that
// the GPU tests skip and the fake-driver twins of the contract tests run instead; the suites
// and the examples run on the fake device. The report then says "fake driver: figures are not
// GPU figures" and the performance targets are N/A (their figures shown for information), but
// a test, an example or a suite that fails still fails the run.
//
// Exit status: 0 when every check passed (or is N/A), 1 when a test, an example or a suite
// failed or did not run, 2 for bad flags, 3 when everything ran clean but a performance target
// was missed.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// fakeNote is what a report made on the fake driver says first.
const fakeNote = "fake driver: figures are not GPU figures"

// Test patterns: every GPU test; on the fake, the fake-driver twins of the contract tests too.
const (
	gpuTestPattern  = "CUDA|GPU"
	fakeTestPattern = gpuTestPattern + "|^TestFakePoolCopiesMixedSizes$|^TestFakeHostProvidersCopy$"
)

// contractTests are the contract tests of pinned host buffers in package pinned, on a GPU and
// their twins on the fake driver.
var contractTests = []struct{ check, gpu, fake, what string }{
	{"pinned-contract/mixed-sizes", "TestCUDAPoolCopiesMixedSizes", "TestFakePoolCopiesMixedSizes",
		"72 CUDAHost pool buffers of 1 B - 256 MiB (32 MiB on the fake), all live, each copied whole both ways, sync and async"},
	{"pinned-contract/host-providers", "TestCUDAHostProvidersCopy", "TestFakeHostProvidersCopy",
		"the same on VMM host granules and on registered memory"},
}

// Check statuses.
const (
	pass = "PASS"
	fail = "FAIL"
	na   = "N/A"
)

// check is the state of a -gpucheck run.
type check struct {
	cfg      *config
	start    time.Time
	deadline time.Time
	fake     bool
	log      io.Writer // the console and DIR/gpucheck.log
	logFile  *os.File
	name     string
	commit   string // of the build, from BIN/commit

	Device   deviceInfo    `json:"device"`
	Steps    []stepResult  `json:"steps"`
	Tests    []testResult  `json:"tests"`
	Binaries []binResult   `json:"binaries"`
	manifest []testBinary  // BIN/tests.txt
	Examples []exampleRun  `json:"examples"`
	bench    *suite        // the suites' results
	benchRun []benchCase   // the cases run
	skipped  []string      // the cases the deadline left out
	Checks   []checkResult `json:"checks"`
}

// deviceInfo describes device 0.
type deviceInfo struct {
	Name            string    `json:"name"`
	TotalMem        uint64    `json:"total_mem"`
	Compute         string    `json:"compute_capability"`
	Multiprocessors int       `json:"multiprocessors"`
	CUDA            string    `json:"cuda_driver_api"`
	NvidiaSMI       string    `json:"nvidia_smi,omitempty"`
	NVML            *nvmlInfo `json:"nvml,omitempty"` // internal/nvml's view, beside nvidia-smi's
	Fake            bool      `json:"fake"`
}

// stepResult is one step of the run.
type stepResult struct {
	Name    string  `json:"name"`
	Status  string  `json:"status"`
	Seconds float64 `json:"seconds"`
	Detail  string  `json:"detail"`
}

// testResult is one test or subtest (its name has a slash) of a test binary.
type testResult struct {
	Binary  string  `json:"binary"`
	Name    string  `json:"name"`
	Status  string  `json:"status"` // PASS, FAIL or SKIP
	Seconds float64 `json:"seconds"`
	Detail  string  `json:"detail,omitempty"` // a skip's reason, a failure's first line logged
}

// binResult is one test binary's run.
type binResult struct {
	Binary  string  `json:"binary"`
	Dir     string  `json:"dir"`
	Status  string  `json:"status"`
	Seconds float64 `json:"seconds"`
	Detail  string  `json:"detail,omitempty"`
}

// exampleRun is one example program's run.
type exampleRun struct {
	Name    string   `json:"name"`
	Args    []string `json:"args"`
	Status  string   `json:"status"`
	Seconds float64  `json:"seconds"`
	Output  string   `json:"output"`
}

// checkResult is one line of the report's verdict: a target of issue 19, another target the
// suites check, or a check that something ran clean.
type checkResult struct {
	Name   string  `json:"name"`
	Want   string  `json:"want"`
	Status string  `json:"status"` // PASS, FAIL or N/A
	Value  float64 `json:"value,omitempty"`
	Limit  float64 `json:"limit,omitempty"`
	Detail string  `json:"detail"`
	Kind   string  `json:"kind"` // "target" (issue 19), "other" (informational) or "run"
}

// gpucheck runs the check and returns the process's exit status.
func gpucheck(cfg *config) int {
	if code, rerun := driverOrFake("gpucheck", "everything runs there ("+fakeNote+")"); rerun {
		return code
	}
	c := &check{cfg: cfg, start: time.Now()}
	c.deadline = c.start.Add(cfg.deadline)
	if err := os.MkdirAll(cfg.gpucheck, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck:", err)
		return 1
	}
	f, err := os.Create(filepath.Join(cfg.gpucheck, "gpucheck.log"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck:", err)
		return 1
	}
	defer f.Close()
	c.logFile, c.log = f, io.MultiWriter(os.Stderr, f)
	if b, err := os.ReadFile(filepath.Join(cfg.bin, "commit")); err == nil {
		c.commit = strings.TrimSpace(string(b))
	}
	c.step("device", c.describe)
	c.step("tests", c.runTests)
	c.step("examples", c.runExamples)
	c.step("bench", c.runBench)
	c.evaluate()
	if err := c.write(); err != nil {
		fmt.Fprintln(c.log, "gpucheck:", err)
		return 1
	}
	code := c.exitCode()
	fmt.Fprintf(c.log, "gpucheck: %s in %.0fs; report %s\n", map[int]string{0: "PASS", 1: "FAIL (a test, an example or a suite)", 3: "FAIL (a target missed)"}[code],
		time.Since(c.start).Seconds(), filepath.Join(cfg.gpucheck, c.name+".md"))
	return code
}

// step runs one step, records it and rewrites the report.
func (c *check) step(name string, run func() (string, error)) {
	t0 := time.Now()
	fmt.Fprintf(c.log, "\n=== gpucheck step %s (%.0fs left before the deadline)\n", name, time.Until(c.deadline).Seconds())
	detail, err := run()
	st := stepResult{Name: name, Status: pass, Seconds: time.Since(t0).Seconds(), Detail: detail}
	if err != nil {
		st.Status, st.Detail = fail, strings.TrimSpace(detail+"; "+err.Error())
		st.Detail = strings.TrimPrefix(st.Detail, "; ")
	}
	c.Steps = append(c.Steps, st)
	fmt.Fprintf(c.log, "=== gpucheck step %s: %s in %.1fs: %s\n", name, st.Status, st.Seconds, st.Detail)
	c.evaluate()
	if err := c.write(); err != nil {
		fmt.Fprintln(c.log, "gpucheck: writing the report:", err)
	}
}

// left returns the time left before the deadline, less margin.
func (c *check) left(margin time.Duration) time.Duration { return time.Until(c.deadline) - margin }

// describe opens device 0 and describes it.
func (c *check) describe() (string, error) {
	dev, err := icuda.Open(0)
	if err != nil {
		return "", err
	}
	defer dev.Close()
	d := &c.Device
	if d.Name, err = dev.Name(); err != nil {
		return "", err
	}
	d.Fake = fakecuda.IsFake(dev)
	c.fake = d.Fake
	if n, err := dev.TotalMem(); err == nil {
		d.TotalMem = uint64(n)
	}
	major, _ := dev.Attribute(icuda.AttrComputeCapabilityMajor)
	minor, _ := dev.Attribute(icuda.AttrComputeCapabilityMinor)
	d.Compute = fmt.Sprintf("%d.%d", major, minor)
	d.Multiprocessors, _ = dev.Attribute(icuda.AttrMultiprocessorCount)
	if v, err := icuda.DriverVersion(); err == nil {
		d.CUDA = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	smi := exec.CommandContext(ctx, "nvidia-smi", "--query-gpu=name,driver_version,memory.total,pci.bus_id", "--format=csv,noheader", "-i", "0")
	if out, err := smi.Output(); err == nil {
		d.NvidiaSMI = strings.TrimSpace(string(out))
	}
	if !c.fake {
		d.NVML = describeNVML(d.Name)
	}
	c.name = c.cfg.name
	if c.name == "" {
		c.name = fileName(d.Name)
		if c.fake {
			c.name = "fake-driver"
		}
		if c.cfg.quick {
			c.name += "-quick"
		}
	}
	if c.fake {
		fmt.Fprintf(c.log, "gpucheck: %s\n", fakeNote)
	}
	return fmt.Sprintf("%s, %.1f GiB, compute capability %s, %d multiprocessors, CUDA driver API %s%s",
		d.Name, float64(d.TotalMem)/(1<<30), d.Compute, d.Multiprocessors, d.CUDA, map[bool]string{true: "; " + fakeNote}[c.fake]), nil
}

// fileName turns a device name into a file name: "NVIDIA H100 80GB HBM3" is
// nvidia-h100-80gb-hbm3.
func fileName(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '.' || r == '_' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	if out := strings.TrimRight(b.String(), "-"); out != "" {
		return out
	}
	return "gpu"
}

// runExamples runs kvcache at 3x oversubscription and loadweights with their defaults.
func (c *check) runExamples() (string, error) {
	var failed, done []string
	for _, ex := range []struct {
		name string
		args []string
	}{{"kvcache", []string{"-oversub", "3"}}, {"loadweights", nil}} {
		run := exampleRun{Name: ex.name, Args: ex.args, Status: fail}
		left := c.left(20 * time.Second)
		if left < 10*time.Second {
			run.Output = "not run: the deadline"
		} else {
			prog, err := filepath.Abs(filepath.Join(c.cfg.bin, ex.name))
			if err != nil {
				return "", err
			}
			fmt.Fprintf(c.log, "--- %s %s\n", ex.name, strings.Join(ex.args, " "))
			out, secs, err := c.runLogged(min(left, 3*time.Minute), ".", os.Environ(), prog, ex.args...)
			run.Output, run.Seconds = strings.TrimSpace(out), secs
			if err == nil {
				run.Status = pass
			} else {
				run.Output += "\n" + err.Error()
			}
		}
		c.Examples = append(c.Examples, run)
		if run.Status == fail {
			failed = append(failed, ex.name)
		} else {
			done = append(done, ex.name)
		}
	}
	detail := "ran clean: " + strings.Join(done, ", ")
	if len(failed) > 0 {
		return detail, fmt.Errorf("failed: %s", strings.Join(failed, ", "))
	}
	return detail, nil
}

// caseOrder ranks a case: the ones the targets read first, the tier's oversubscription cases
// (the longest) last.
func caseOrder(name string) int {
	for i, p := range []string{"cuda-pair/", "cuda-h2d/", "cuda-d2h/", "cuda-device-pair/", "cuda-staging/", "cuda-setup/", "cuda-trace", "uvm-move/", "uvm-managed",
		"uvm-acquire/", "batch-calibration", "batch-", "gomaxprocs", "uvm-oversub/"} {
		if strings.HasPrefix(name, p) {
			if strings.Contains(name, "/"+managedPolicy+"/") {
				return i + 1 // managed memory's rows after the tier's
			}
			return i
		}
	}
	return 99
}

// runBench runs the GPU suites and the sweep in-process, until the deadline.
func (c *check) runBench() (string, error) {
	cfg := *c.cfg
	cfg.filter, cfg.implFilter = regexp.MustCompile(""), regexp.MustCompile("")
	s := &suite{cfg: &cfg, nulls: nullImpls(), ops: mixedOps(), trace: newTrace(cfg.traceSteps)}
	c.bench = s
	impls, cs, closeGPU := openGPUSuites()
	defer closeGPU()
	if len(cs) == 0 {
		return "", errors.New("no GPU suite opened (see the log)")
	}
	s.impls = impls
	cs = append(cs, benchCase{name: "gomaxprocs", group: "sweep", custom: sweep})
	sortCases(cs)
	s.load = loadAvg()
	fmt.Fprintf(c.log, "bench: %d cases, %s mode, GOMAXPROCS=%d, load %s\n", len(cs), map[bool]string{true: "quick", false: "full"}[cfg.quick], runtime.GOMAXPROCS(0), s.load)
	for i, bc := range cs {
		if c.left(30*time.Second) <= 0 {
			for _, rest := range cs[i:] {
				c.skipped = append(c.skipped, rest.name)
			}
			break
		}
		t0 := time.Now()
		var rs []result
		if bc.custom != nil {
			rs = bc.custom(s)
		} else {
			rs = s.run(bc, s.selected())
		}
		s.results = append(s.results, rs...)
		c.benchRun = append(c.benchRun, bc)
		fmt.Fprintf(c.log, "[%2d/%d] %-28s %d results (%.1fs)\n", i+1, len(cs), bc.name, len(rs), time.Since(t0).Seconds())
	}
	detail := fmt.Sprintf("%d cases run, %d results", len(c.benchRun), len(s.results))
	var errs []string
	for _, r := range s.results {
		if r.Metric == "error" && !c.naError(r) {
			errs = append(errs, r.Case+" "+r.Impl+": "+r.Note)
		}
	}
	if len(c.skipped) > 0 {
		errs = append(errs, fmt.Sprintf("%d cases not run: the deadline (from %s)", len(c.skipped), c.skipped[0]))
	}
	if len(errs) > 0 {
		return detail, errors.New(strings.Join(errs, "; "))
	}
	return detail, nil
}

// naError reports whether an error result is no failure: a case that cannot run on the fake
// driver, or a CUDA host pool's row on a driver without host pools (before CUDA 12.6).
func (c *check) naError(r result) bool {
	return (c.fake && strings.HasPrefix(r.Note, "not measured on the fake driver")) || strings.HasPrefix(r.Note, noHostPools)
}

// sortCases orders cases by caseOrder, keeping the suites' order within a rank.
func sortCases(cs []benchCase) {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && caseOrder(cs[j].name) < caseOrder(cs[j-1].name); j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}
