package main

// Tests of the GPU check's verdict on capabilities, empty steps and suites that do not open.

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestGpucheckCapabilities runs a stand-in binary whose GPU test skips for want of a capability
// (internal/cuda.Lacks) and another that records a figure (fakecuda.Figure): on a GPU the skip
// is N/A, naming the capability, only when the check saw the device lack it, and fails when the
// device has it or the skip names nothing the check knows; the figure is graded as a target.
func TestGpucheckCapabilities(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shell scripts stand in for test binaries")
	}
	bin, pkg := t.TempDir(), t.TempDir()
	script(t, bin, test2jsonName, test2jsonStandIn)
	const contract = "TestCUDAPoolCopiesMixedSizes,TestCUDAHostProvidersCopy"
	script(t, bin, "pinned.test", events(cat(passing("TestCUDAPoolCopiesMixedSizes"), passing("TestCUDAHostProvidersCopy"))...))
	figure := "    gpu_test.go:41: " + fakecuda.FigureTag + " uvm-tier/evict/4KiB 51.5 GB/s >= 48\n"
	script(t, bin, "uvm.test", events(cat([]string{ev("run", "TestGPUTierBandwidth", ""), ev("output", "TestGPUTierBandwidth", figure)},
		[]string{ev("pass", "TestGPUTierBandwidth", "")}, skipping("TestCUDABatch", icuda.Lacks(icuda.CapBatchAPI, "driver 12.8")))...))
	if err := os.WriteFile(filepath.Join(bin, "tests.txt"), []byte("uvm.test "+pkg+" TestGPUTierBandwidth,TestCUDABatch\npinned.test "+pkg+" "+contract+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(fake bool, caps map[string]capability) *check {
		c := newCheck(t, bin, fake)
		c.caps = caps
		c.step("tests", c.runTests)
		return c
	}
	c := run(false, map[string]capability{icuda.CapBatchAPI: {false, "cuMemcpyBatchAsync_v2 needs a CUDA 13.0 driver"}})
	if c.Binaries[0].Binary != "pinned.test" {
		t.Errorf("the contract tests' binary ran %s", c.Binaries[0].Binary)
	}
	if ct := findCheck(c, "gpu-tests"); ct.Status != pass || !strings.Contains(ct.Detail, "TestCUDABatch (batch-api)") {
		t.Errorf("a skip for a capability the device lacks: %+v", ct)
	}
	if ct := findCheck(c, "capability/batch-api"); ct.Status != na || !strings.Contains(ct.Detail, "uvm.test TestCUDABatch") {
		t.Errorf("capability/batch-api: %+v", ct)
	}
	if ct := findCheck(c, "uvm-tier/evict/4KiB"); ct.Status != pass || ct.Kind != "target" || ct.Value != 51.5 {
		t.Errorf("the test's figure: %+v, want a graded target that passed", ct)
	}
	for why, caps := range map[string]map[string]capability{"but it has it": {icuda.CapBatchAPI: {true, "cuMemcpyBatchAsync_v2 resolves"}},
		"does not know": {}} {
		c := run(false, caps)
		if ct := findCheck(c, "gpu-tests"); ct.Status != fail || !strings.Contains(ct.Detail, why) || c.exitCode() != 1 {
			t.Errorf("a skip that %s: %+v", why, ct)
		}
	}
	c = run(true, nil)
	if findCheck(c, "gpu-tests").Status != na || findCheck(c, "uvm-tier/evict/4KiB").Status != na || findCheck(c, "capability/batch-api").Status != "missing" {
		t.Errorf("fake: %+v", c.Checks)
	}
}

// TestGpucheckEmptySteps: a step that produced nothing fails its check: the tests with no
// binary run, the examples with none run, the bench with no case; N/A never stands for nothing.
func TestGpucheckEmptySteps(t *testing.T) {
	for _, fake := range []bool{false, true} {
		c := newCheck(t, t.TempDir(), fake)
		c.Steps = []stepResult{{Name: "device", Status: pass}, {Name: "tests", Status: fail, Detail: "no test binaries"},
			{Name: "examples", Status: pass}, {Name: "bench", Status: fail, Detail: "no GPU suite opened"}}
		c.evaluate()
		for _, name := range []string{"gpu-tests", "examples", "bench-gpu"} {
			if ct := findCheck(c, name); ct.Status != fail {
				t.Errorf("fake %v: %s: %+v, want FAIL", fake, name, ct)
			}
		}
		if c.exitCode() != 1 {
			t.Errorf("fake %v: exit %d", fake, c.exitCode())
		}
	}
}

// brokenSuite is a GPU suite that does not open.
type brokenSuite struct{}

func (brokenSuite) name() string              { return "broken" }
func (brokenSuite) open() error               { return errors.New("cuda: device 0: CUDA_ERROR_OUT_OF_MEMORY") }
func (brokenSuite) impls() []impl             { return nil }
func (brokenSuite) cases() []benchCase        { return nil }
func (brokenSuite) close() error              { return nil }
func (brokenSuite) targets([]result) []target { return nil }

// TestOpenGPUSuitesSaysWhich: a suite that does not open is recorded with its reason, which the
// worker passes on and the check reports as an error of bench-gpu (its cases are not in the
// plan: without it, their targets would be the only trace).
func TestOpenGPUSuitesSaysWhich(t *testing.T) {
	saved, savedT, savedU := gpuSuites, gpuTargets, gpuUnopened
	defer func() { gpuSuites, gpuTargets, gpuUnopened = saved, savedT, savedU }()
	gpuSuites, gpuUnopened = []gpuSuite{brokenSuite{}}, nil
	_, cs, closeAll := openGPUSuites()
	closeAll()
	if len(cs) != 0 || len(gpuUnopened) != 1 || !strings.HasPrefix(gpuUnopened[0], "broken: cuda: device 0") {
		t.Errorf("cases %d, unopened %q", len(cs), gpuUnopened)
	}
}
