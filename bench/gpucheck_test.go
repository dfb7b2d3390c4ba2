package main

// Tests of the GPU check's orchestration and verdict (gpucheck.go), with shell scripts standing in
// for the test binaries and the examples. Their names avoid "GPU" and "CUDA": scripts/gpucheck
// builds the packages whose tests have those names for the GPU machine.

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// newCheck returns a check writing into a temporary folder, its binaries in bin.
func newCheck(t *testing.T, bin string, fake bool) *check {
	t.Helper()
	out := t.TempDir()
	f, err := os.Create(filepath.Join(out, "gpucheck.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	cfg := &config{gpucheck: out, bin: bin, deadline: time.Minute}
	return &check{cfg: cfg, start: time.Now(), deadline: time.Now().Add(time.Minute), fake: fake, log: f, logFile: f, name: "test",
		Device: deviceInfo{Name: "Some GPU", Fake: fake}}
}

// script writes an executable shell script into dir.
func script(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestGpucheckTests runs stand-in test binaries (shell scripts printing -test.v lines) through
// the tests step: results are parsed per top-level test with a skip's reason, a failing test or
// a binary that exits non-zero fails the step and the run (exit status 1), and the contract
// checks follow the contract tests' results.
func TestGpucheckTests(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shell scripts stand in for test binaries")
	}
	bin := t.TempDir()
	pkg := t.TempDir()
	script(t, bin, "good.test", `case "$*" in *"-test.run CUDA|GPU "*) ;; *) echo "bad args: $*"; exit 2;; esac
echo "=== RUN   TestCUDAPoolCopiesMixedSizes"
echo "--- PASS: TestCUDAPoolCopiesMixedSizes (1.50s)"
echo "--- PASS: TestCUDAHostProvidersCopy (0.20s)"
echo "    --- FAIL: TestCUDAHostProvidersCopy/vmm (0.10s)"
echo "--- SKIP: TestCUDAMultiGPU (0.00s)"
echo "    cuda_gpu_test.go:130: one GPU"
echo "PASS"`)
	script(t, bin, "bad.test", `echo "--- FAIL: TestGPUThing (0.01s)"
echo "    x_test.go:9: it broke"
echo FAIL; exit 1`)
	script(t, bin, "crash.test", `echo "panic: boom"; exit 2`)
	write := func(lines ...string) {
		if err := os.WriteFile(filepath.Join(bin, "tests.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	write("good.test " + pkg)
	c := newCheck(t, bin, false)
	c.step("tests", c.runTests)
	if c.Steps[0].Status != pass || len(c.Tests) != 3 || c.Tests[2].Detail != "cuda_gpu_test.go:130: one GPU" {
		t.Fatalf("good binary: step %+v, tests %+v", c.Steps[0], c.Tests)
	}
	c.evaluate()
	for _, name := range []string{"gpu-tests", "pinned-contract/mixed-sizes", "pinned-contract/host-providers"} {
		if ct := findCheck(c, name); ct.Status != pass {
			t.Errorf("%s: %+v", name, ct)
		}
	}

	for _, bad := range []string{"bad.test", "crash.test"} {
		write("good.test "+pkg, bad+" "+pkg)
		c := newCheck(t, bin, false)
		c.step("tests", c.runTests)
		c.evaluate()
		if c.Steps[0].Status != fail || findCheck(c, "gpu-tests").Status != fail || c.exitCode() != 1 {
			t.Errorf("%s: step %+v, gpu-tests %+v, exit %d", bad, c.Steps[0], findCheck(c, "gpu-tests"), c.exitCode())
		}
	}

	// On a GPU, tests that all skip (a driver the tests cannot find) fail the check; a missing
	// contract test fails its check.
	script(t, bin, "skips.test", `echo "--- SKIP: TestCUDAPoolCopiesMixedSizes (0.00s)"; echo "    x: no CUDA driver"`)
	write("skips.test " + pkg)
	c = newCheck(t, bin, false)
	c.step("tests", c.runTests)
	c.evaluate()
	if findCheck(c, "gpu-tests").Status != fail || findCheck(c, "pinned-contract/mixed-sizes").Status != fail ||
		findCheck(c, "pinned-contract/host-providers").Detail != "not run" {
		t.Errorf("all skipped on a GPU: %+v", c.Checks)
	}
	// On the fake the pattern adds the contract tests' twins, and the GPU tests may all skip.
	script(t, bin, "fake.test", `case "$*" in *TestFakePoolCopiesMixedSizes*) ;; *) exit 2;; esac
echo "--- SKIP: TestCUDAPoolCopiesMixedSizes (0.00s)"
echo "--- PASS: TestFakePoolCopiesMixedSizes (0.30s)"
echo "--- PASS: TestFakeHostProvidersCopy (0.30s)"`)
	write("fake.test " + pkg)
	c = newCheck(t, bin, true)
	c.step("tests", c.runTests)
	c.evaluate()
	for _, name := range []string{"gpu-tests", "pinned-contract/mixed-sizes", "pinned-contract/host-providers"} {
		if ct := findCheck(c, name); ct.Status != pass {
			t.Errorf("fake: %s: %+v", name, ct)
		}
	}

	write()
	c = newCheck(t, bin, false)
	if _, err := c.runTests(); err == nil || !strings.Contains(err.Error(), "lists no test binary") {
		t.Errorf("empty manifest: %v", err)
	}
	if _, err := readManifest(t.TempDir()); err == nil || !strings.Contains(err.Error(), "scripts/gpucheck build") {
		t.Errorf("no manifest: %v", err)
	}
}

// TestGpucheckExamples runs stand-ins for the examples: one that fails fails the run.
func TestGpucheckExamples(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shell scripts stand in for the examples")
	}
	bin := t.TempDir()
	script(t, bin, "kvcache", `[ "$*" = "-oversub 3" ] || exit 2; echo "verified: every byte"`)
	script(t, bin, "loadweights", `echo "checksums match"`)
	c := newCheck(t, bin, false)
	c.step("examples", c.runExamples)
	c.evaluate()
	if c.Steps[0].Status != pass || findCheck(c, "example/kvcache").Detail != "verified: every byte" || findCheck(c, "example/loadweights").Status != pass {
		t.Fatalf("examples: %+v %+v", c.Steps, c.Checks)
	}
	script(t, bin, "loadweights", `echo "chunk 3 differs" >&2; exit 1`)
	c = newCheck(t, bin, false)
	c.step("examples", c.runExamples)
	c.evaluate()
	if c.Steps[0].Status != fail || findCheck(c, "example/loadweights").Status != fail || c.exitCode() != 1 {
		t.Errorf("a failing example: %+v, exit %d", c.Steps, c.exitCode())
	}
}

// findCheck returns the check of that name.
func findCheck(c *check, name string) checkResult {
	for _, ct := range c.Checks {
		if ct.Name == name {
			return ct
		}
	}
	return checkResult{Name: name, Status: "missing"}
}

// TestGpucheckTargets checks the verdict on the suites' figures: on a GPU a met target passes
// and a missed or unmeasured one fails (exit status 3 when nothing else failed); on the fake
// every performance target is N/A and the report says the figures are not GPU figures; the
// 16-core scaling is N/A on fewer cores.
func TestGpucheckTargets(t *testing.T) {
	rs := []result{
		{Case: "cuda-pair/4KiB", Impl: "cuda-hostalloc", Metric: "ns_per_pair", Value: 1.2e6},
		{Case: "cuda-pair/4KiB", Impl: "pinmalloc-pool", Metric: "ns_per_pair", Value: 100},
		{Case: "cuda-pair/64KiB", Impl: "cuda-hostalloc", Metric: "ns_per_pair", Value: 1e5},
		{Case: "cuda-pair/64KiB", Impl: "pinmalloc-pool", Metric: "ns_per_pair", Value: 100},
		{Case: "gomaxprocs/16", Impl: "pinmalloc-pool", Metric: "speedup", Value: 13},
		{Case: "uvm-oversub/zipf/managed/1x", Impl: "managed", Metric: "gbps", Value: 5},
	}
	if len(gpuSuites) == 0 {
		t.Skip("no GPU suite compiled in (cgo)")
	}
	saved := gpuTargets
	defer func() { gpuTargets = saved }()
	gpuTargets = nil
	for _, s := range gpuSuites { // what openGPUSuites does for the suites it opens
		gpuTargets = append(gpuTargets, s.targets)
	}
	for _, fake := range []bool{false, true} {
		c := newCheck(t, t.TempDir(), fake)
		c.bench = &suite{cfg: c.cfg, results: rs}
		c.Steps = []stepResult{{Name: "bench", Status: pass}}
		c.evaluate()
		met4, missed64, unmeasured := findCheck(c, "pool-vs-cuda-hostalloc/4KiB"), findCheck(c, "pool-vs-cuda-hostalloc/64KiB"),
			findCheck(c, "pool-h2d-vs-hostalloc/64MiB")
		scaling := findCheck(c, poolScalingTarget)
		switch {
		case fake:
			for _, ct := range []checkResult{met4, missed64, unmeasured, scaling} {
				if ct.Status != na || !strings.Contains(ct.Detail, fakeNote) {
					t.Errorf("fake: %+v, want N/A saying %q", ct, fakeNote)
				}
			}
			if c.exitCode() != 0 {
				t.Errorf("fake: exit %d with only N/A targets", c.exitCode())
			}
		default:
			if met4.Status != pass || met4.Value != 12000 || missed64.Status != fail || unmeasured.Status != fail {
				t.Errorf("GPU: %+v, %+v, %+v", met4, missed64, unmeasured)
			}
			if want := map[bool]string{true: pass, false: na}[runtime.NumCPU() >= 16]; scaling.Status != want {
				t.Errorf("scaling on %d cores: %+v, want %s", runtime.NumCPU(), scaling, want)
			}
			if c.exitCode() != 3 {
				t.Errorf("GPU: exit %d with targets missed and every run clean, want 3", c.exitCode())
			}
		}
		if len(c.Checks) < len(issue19Targets) {
			t.Errorf("%d checks for %d targets", len(c.Checks), len(issue19Targets))
		}
		if err := c.write(); err != nil {
			t.Fatal(err)
		}
		md, err := os.ReadFile(filepath.Join(c.cfg.gpucheck, "test.md"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(md), fakeNote) != fake || !strings.Contains(string(md), "pool-vs-cuda-hostalloc/4KiB") {
			t.Errorf("fake %v: report:\n%s", fake, md)
		}
		if _, err := os.Stat(filepath.Join(c.cfg.gpucheck, "test.json")); err != nil {
			t.Error(err)
		}
	}
}

// TestGpucheckHelpers covers the test-output parser's indentation rule, file names and the
// order of the cases.
func TestGpucheckHelpers(t *testing.T) {
	ts := parseTests("x.test", "--- FAIL: TestA (0.50s)\n    a_test.go:3: boom\n    a_test.go:4: more\n    --- PASS: TestA/sub (0.1s)\n--- PASS: TestB (2.00s)\n")
	if len(ts) != 2 || ts[0].Status != fail || ts[0].Detail != "a_test.go:3: boom" || ts[0].Seconds != 0.5 || ts[1].Name != "TestB" {
		t.Errorf("parseTests, logs after the result: %+v", ts)
	}
	ts = parseTests("x.test", "=== RUN   TestA\n=== RUN   TestA/sub\n    a_test.go:3: boom\n    --- FAIL: TestA/sub (0.1s)\n--- FAIL: TestA (0.50s)\n"+
		"=== RUN   TestB\n    b_test.go:1: no CUDA driver\n--- SKIP: TestB (0.00s)\n=== RUN   TestC\n--- PASS: TestC (0.00s)\nFAIL\n")
	if len(ts) != 3 || ts[0].Detail != "a_test.go:3: boom" || ts[1].Detail != "b_test.go:1: no CUDA driver" || ts[2].Detail != "" {
		t.Errorf("parseTests, logs before the result: %+v", ts)
	}
	for in, want := range map[string]string{"NVIDIA H100 80GB HBM3": "nvidia-h100-80gb-hbm3", "  Fake GPU 0 ": "fake-gpu-0", "///": "gpu", "NVIDIA H200": "nvidia-h200"} {
		if got := fileName(in); got != want {
			t.Errorf("fileName(%q) = %q, want %q", in, got, want)
		}
	}
	cs := []benchCase{{name: "uvm-oversub/zipf/managed/1x"}, {name: "gomaxprocs"}, {name: "uvm-oversub/zipf/lru/1x"}, {name: "cuda-pair/4KiB"},
		{name: "uvm-move/4KiB"}, {name: "batch-h2d/4KiB"}, {name: "batch-calibration"}}
	sortCases(cs)
	var got []string
	for _, c := range cs {
		got = append(got, c.name)
	}
	want := "cuda-pair/4KiB uvm-move/4KiB batch-calibration batch-h2d/4KiB gomaxprocs uvm-oversub/zipf/lru/1x uvm-oversub/zipf/managed/1x"
	if strings.Join(got, " ") != want {
		t.Errorf("order %v", got)
	}
}
