package main

// The GPU check (issue 19): every GPU figure of the project and its targets in one run that ends
// by a deadline, written as one report after every test binary, example and case.
//
//	go run . -gpucheck DIR [-quick] [-bin .gpu/bin] [-deadline 8m] [-case-limit 60s] [-cases RE] [-fake] [-name NAME]
//
// scripts/gpucheck builds what it needs (stripped test binaries of the packages with GPU tests,
// this program, the examples and a prebuilt fake driver, into .gpu/bin) on a machine with Go, so
// that a machine with a GPU and no Go toolchain only runs them. A run has four steps, in this
// order, each recorded with its time and its output (DIR/gpucheck.log):
//
//  1. the device: name, memory, compute capability, multiprocessors, the CUDA driver API version,
//     the capabilities the GPU tests may find missing (capabilities.go) and, where nvidia-smi
//     answers, the driver's version; a device that does not open, or a driver that does not
//     answer within a quarter of the deadline (gpucheck_device.go), ends the run there;
//  2. tests: every test binary listed in BIN/tests.txt, the one with the contract tests of pinned
//     host buffers first (every size from 1 B to 256 MiB copied both ways), run from its
//     package's folder with -test.run 'CUDA|GPU', its output through BIN/test2json, so that
//     every test and subtest is recorded from its own event (gpucheck_tests.go): on a GPU
//     every GPU test the manifest lists must run and pass; a skip is a failure unless it names
//     a capability the device is seen to lack (N/A, naming it); the figures GPU tests record
//     are graded;
//  3. the examples: kvcache at 3x oversubscription and loadweights with their defaults;
//  4. the benchmark suites of -gpu (gpu.go: the copy bandwidth, CUDA's host pool and a
//     PyTorch-style cache beside the CUDAHost pool, the pinning suite, the UVM tier, the device
//     heap against cuMemAllocAsync, the copy engine) and the GOMAXPROCS sweep, in the order of
//     gpucheck_plan.go, each case in a worker process that is killed at the case's limit
//     (gpucheck_bench.go), so that no case can take the run with it.
//
// Time: the run ends by -deadline (8 minutes: a GPU machine's command limit is 10). The tests may
// use the run until 45 % of it, the examples until 55 %, the suites the rest; a test binary
// still running at its limit is killed and fails, and so is a case at -case-limit or at the
// deadline; a case that cannot have its minimum before the deadline is not started and is
// listed as not run. The report (DIR/NAME.md and DIR/NAME.json, NAME the device's name as a file
// name, or fake-driver) is rewritten, whole, after every test binary, example and case (written
// aside and renamed into place), so a run killed at any moment leaves every figure it took.
//
// The report gives every figure and PASS, FAIL or N/A for every target of the GPU suites
// (issues 19 and 26 among them; NOISY for one whose rounds disagree by more than its margin) and
// of the GPU tests' figures, and for the checks that the tests, the examples and the suites ran
// clean, and compares internal/nvml's view of the device with nvidia-smi's. A check with
// nothing behind it (a step that failed, no test, no case) fails.
//
// The driver (driver.go): the one that loads, a GPU's or the fake's, told apart by the library's
// symbols and never by the device's name, a driver that is no fake counting only where an NVIDIA
// device node is (gpucheck_device.go); the fake, in a child process, with -fake or where
// no driver loads and nothing says the machine has an NVIDIA GPU; on a machine with an NVIDIA GPU
// and no loadable driver the run fails at once, saying so. On the fake the test binaries run with
// the fake as their driver (the GPU tests skip: no GPU) and the fake-driver twins of the contract
// tests run; the report says "fake driver: figures are not GPU figures", every target and
// gpu-tests are N/A, but a test, an example or a suite that fails still fails the run.
//
// Exit status: 0 when every check passed (or is N/A), 1 when a test, an example or a suite
// failed or did not run, 2 for bad flags, 3 when everything ran clean but a performance target
// was missed or was too noisy to grade (NOISY: the rounds of its figures disagree by more than
// the margin between its ratio and its limit, as bench's targets; noise.go).

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

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

// The shares of the run: the tests may run until testsShare of the deadline, the examples until
// examplesShare; the suites have the rest, less endMargin to write the report.
const (
	testsShare    = 0.45
	examplesShare = 0.55
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
	caps     map[string]capability

	Device   deviceInfo    `json:"device"`
	Steps    []stepResult  `json:"steps"`
	Tests    []testResult  `json:"tests"`
	Figures  []testFigure  `json:"test_figures,omitempty"`
	Binaries []binResult   `json:"binaries"`
	manifest []testBinary  // BIN/tests.txt
	Examples []exampleRun  `json:"examples"`
	bench    *suite        // the suites' results
	benchRun []benchCase   // the cases run (name and group)
	Cases    []caseRun     `json:"cases"`
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

// exampleRun is one example program's run.
type exampleRun struct {
	Name    string   `json:"name"`
	Args    []string `json:"args"`
	Status  string   `json:"status"`
	Seconds float64  `json:"seconds"`
	Output  string   `json:"output"`
}

// checkResult is one line of the report's verdict: a target, a check that something ran clean,
// or a capability the device lacks.
type checkResult struct {
	Name   string  `json:"name"`
	Want   string  `json:"want"`
	Status string  `json:"status"` // PASS, FAIL, N/A, or NOISY for a target too noisy to grade
	Value  float64 `json:"value,omitempty"`
	Limit  float64 `json:"limit,omitempty"`
	Detail string  `json:"detail"`
	Kind   string  `json:"kind"` // "target" (graded), "other" (not graded, with the reason) or "run"
}

// gpucheck runs the check and returns the process's exit status.
func gpucheck(cfg *config) int {
	if os.Getenv(workerEnv) != "" {
		return benchWorker(cfg)
	}
	usePrebuiltFake(cfg.bin)
	code, rerun, driverErr := chooseDriver("gpucheck", "everything runs there ("+fakeNote+")", cfg.fake)
	if rerun {
		return code
	}
	gpuTargets = nil // the suites run in workers: their targets are graded here, from every suite compiled in
	for _, s := range gpuSuites {
		gpuTargets = append(gpuTargets, s.targets)
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
	if driverErr != nil {
		c.step("device", func() (string, error) { return "", driverErr })
	} else {
		c.step("device", c.deviceStep)
	}
	if c.Steps[0].Status == pass {
		c.step("tests", c.runTests)
		c.step("examples", c.runExamples)
		c.step("bench", c.runBench)
	} else {
		for _, name := range []string{"tests", "examples", "bench"} {
			c.Steps = append(c.Steps, stepResult{Name: name, Status: fail, Detail: "not run: the device step failed"})
		}
	}
	c.evaluate()
	if err := c.write(); err != nil {
		fmt.Fprintln(c.log, "gpucheck:", err)
		return 1
	}
	code = c.exitCode()
	fmt.Fprintf(c.log, "gpucheck: %s in %.0fs; report %s\n", map[int]string{0: "PASS", 1: "FAIL (a test, an example or a suite)", 3: "FAIL (a target missed or too noisy to grade)"}[code],
		time.Since(c.start).Seconds(), filepath.Join(cfg.gpucheck, c.name+".md"))
	return code
}

// usePrebuiltFake points fakecuda.PrebuiltEnv at the fake driver scripts/gpucheck build ships in
// bin, unless it is set already: the run, its test binaries and the examples then need no C
// compiler to have the fake.
func usePrebuiltFake(bin string) {
	if os.Getenv(fakecuda.PrebuiltEnv) != "" {
		return
	}
	lib, err := filepath.Abs(filepath.Join(bin, prebuiltFake))
	if err != nil {
		return
	}
	if _, err := os.Stat(lib); err == nil {
		os.Setenv(fakecuda.PrebuiltEnv, lib)
	}
}

// prebuiltFake is where in BIN scripts/gpucheck build puts the fake driver.
const prebuiltFake = "fakecuda/libcuda.so.1"

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
	c.rewrite()
}

// rewrite evaluates what the run has so far and rewrites the report.
func (c *check) rewrite() {
	c.evaluate()
	if err := c.write(); err != nil {
		fmt.Fprintln(c.log, "gpucheck: writing the report:", err)
	}
}

// until returns the time left before share of the run has passed, less margin.
func (c *check) until(share float64, margin time.Duration) time.Duration {
	return time.Until(c.start.Add(time.Duration(share*float64(c.cfg.deadline)))) - margin
}

// left returns the time left before the deadline, less margin.
func (c *check) left(margin time.Duration) time.Duration { return time.Until(c.deadline) - margin }

// floor is the least time worth starting a test binary, an example or a case with: a second per
// minute of deadline, 10 s at most.
func (c *check) floor() time.Duration { return min(10*time.Second, c.cfg.deadline/60) }

// endMargin is the time kept at the end of the run to stop a worker and write the report: 3 s,
// less for a short deadline.
func (c *check) endMargin() time.Duration { return min(3*time.Second, c.cfg.deadline/20) }

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
		left := c.until(examplesShare, 0)
		if left < c.floor() {
			run.Output = "not run: the examples' share of the deadline is spent"
		} else {
			prog, err := filepath.Abs(filepath.Join(c.cfg.bin, ex.name))
			if err != nil {
				return "", err
			}
			fmt.Fprintf(c.log, "--- %s %s (at most %v)\n", ex.name, strings.Join(ex.args, " "), left.Round(time.Second))
			out, secs, err := c.runLogged(min(left, 3*time.Minute), ".", c.childEnv(), prog, ex.args...)
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
		c.rewrite()
	}
	detail := "ran clean: " + strings.Join(done, ", ")
	if len(failed) > 0 {
		return detail, fmt.Errorf("failed: %s", strings.Join(failed, ", "))
	}
	return detail, nil
}
