package main

// Tests of the whole GPU check run as a program (runMain), on the fake driver posing as a GPU,
// on broken drivers and on a machine with a GPU and no driver, with shell scripts standing in
// for the test binaries and the examples (standInBin).

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// reportDoc is what the tests read of a report's JSON.
type reportDoc struct {
	Status  string        `json:"status"`
	Note    string        `json:"note"`
	Seconds float64       `json:"seconds"`
	Device  deviceInfo    `json:"device"`
	Checks  []checkResult `json:"checks"`
	Steps   []stepResult  `json:"steps"`
	Cases   []caseRun     `json:"cases"`
	Results []result      `json:"results"`
	NotRun  []string      `json:"cases_not_run"`
}

// readReport reads DIR/NAME.json.
func readReport(t *testing.T, dir, name string) reportDoc {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		entries, _ := os.ReadDir(dir)
		t.Fatalf("the report: %v (the folder holds %v)", err, entries)
	}
	var doc reportDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	return doc
}

// check returns the check of that name in the report.
func (d reportDoc) check(name string) checkResult {
	for _, ct := range d.Checks {
		if ct.Name == name {
			return ct
		}
	}
	return checkResult{Name: name, Status: "missing"}
}

// needFake skips a test that runs the suites on the fake driver where it cannot (no cgo: no
// suite is compiled in; no C compiler nor prebuilt fake), and returns the fake's library.
func needFake(t *testing.T) string {
	t.Helper()
	if len(gpuSuites) == 0 {
		t.Skip("no GPU suite compiled in (cgo)")
	}
	if err := fakecuda.Available(); err != nil {
		t.Skip(err)
	}
	lib, err := fakecuda.Cached(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

// TestGpucheckFakeNamedAsGPU runs the check on the fake driver named "NVIDIA H200" (as a
// reviewer found it: 13 targets graded PASS on fake timings, the fake known by its name): the
// fake is known by its marker, so the report says so, grades no target (every one N/A,
// cuMemAllocAsync's and the tier's Acquire among them, their fake figures shown for
// information), and gpu-tests is N/A; the run is clean.
func TestGpucheckFakeNamedAsGPU(t *testing.T) {
	lib := needFake(t)
	out := t.TempDir()
	code, log := runMain(t, []string{cuda.LibraryEnv + "=" + lib, fakecuda.NameEnv + "=NVIDIA H200"}, "-gpucheck", out, "-bin", standInBin(t),
		"-quick", "-cases", "^(cuda-device-pair/4KiB|uvm-acquire/resident)$", "-deadline", "2m")
	doc := readReport(t, out, "fake-driver-quick")
	if code != 0 || doc.Status != pass {
		t.Errorf("exit %d, status %s:\n%s", code, doc.Status, log)
	}
	if doc.Device.Name != "NVIDIA H200" || !doc.Device.Fake || doc.Note != fakeNote {
		t.Errorf("device %+v, note %q: the fake named as a GPU must be reported as the fake", doc.Device, doc.Note)
	}
	graded := 0
	for _, ct := range doc.Checks {
		if ct.Kind == "target" {
			graded++
			if ct.Status != na {
				t.Errorf("%s graded %s on the fake named NVIDIA H200: %s", ct.Name, ct.Status, ct.Detail)
			}
		}
	}
	if graded < len(gradedTargets()) || doc.check("gpu-tests").Status != na || doc.check("bench-gpu").Status != pass {
		t.Errorf("%d targets, gpu-tests %+v, bench-gpu %+v", graded, doc.check("gpu-tests"), doc.check("bench-gpu"))
	}
	for _, want := range []string{"device-vs-mallocasync/4KiB", "uvm-acquire-resident"} {
		if ct := doc.check(want); !(ct.Value > 0) || !strings.HasPrefix(ct.Detail, fakeNote) {
			t.Errorf("%s: %+v, want its fake figures shown for information", want, ct)
		}
	}
	if len(doc.Cases) != 2 || len(doc.Results) == 0 {
		t.Errorf("cases %+v, %d results", doc.Cases, len(doc.Results))
	}
}

// TestGpucheckBrokenDrivers runs the check on stub drivers that load and fail (cuInit, a
// missing entry point, out of memory, no device): each fails the run at the device step with
// the driver's reason, in the report and on the console, and nothing else runs.
func TestGpucheckBrokenDrivers(t *testing.T) {
	if err := fakecuda.Available(); err != nil || len(gpuSuites) == 0 {
		t.Skip("no cgo or no C compiler to build the stub drivers")
	}
	for fault, why := range map[fakecuda.StubFault]string{fakecuda.StubInitFails: "CUDA_ERROR_UNKNOWN", fakecuda.StubMissingSymbol: "cuDevicePrimaryCtxRetain",
		fakecuda.StubOutOfMemory: "CUDA_ERROR_OUT_OF_MEMORY", fakecuda.StubNoDevice: "CUDA_ERROR_NO_DEVICE"} {
		lib, err := fakecuda.Stub(t.TempDir(), fault)
		if err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		code, log := runMain(t, []string{cuda.LibraryEnv + "=" + lib}, "-gpucheck", out, "-bin", standInBin(t), "-quick")
		doc := readReport(t, out, "gpucheck")
		if code != 1 || doc.Status != fail || !strings.Contains(log, why) {
			t.Errorf("stub %d: exit %d, status %s, want 1 and FAIL saying %q:\n%s", fault, code, doc.Status, why, log)
		}
		if len(doc.Steps) != 4 || doc.Steps[0].Status != fail || !strings.Contains(doc.Steps[0].Detail, why) || doc.Steps[3].Detail != "not run: the device step failed" {
			t.Errorf("stub %d: steps %+v", fault, doc.Steps)
		}
		if doc.Device.Fake || len(doc.Cases) != 0 {
			t.Errorf("stub %d: device %+v, cases %+v", fault, doc.Device, doc.Cases)
		}
	}
}

// TestGpucheckDriverHangs runs the check on a driver whose cuInit does not return (a GPU in a
// bad state): the device step fails within its share of the deadline, saying the driver did not
// answer, and the run ends by its deadline with its report, rather than never.
func TestGpucheckDriverHangs(t *testing.T) {
	if err := fakecuda.Available(); err != nil || len(gpuSuites) == 0 {
		t.Skip("no cgo or no C compiler to build the stub drivers")
	}
	lib, err := fakecuda.Stub(t.TempDir(), fakecuda.StubHangs)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	const deadline = 4 * time.Second // the device step's limit a second
	t0 := time.Now()
	code, log := runMain(t, []string{cuda.LibraryEnv + "=" + lib}, "-gpucheck", out, "-bin", standInBin(t), "-quick", "-deadline", deadline.String())
	if ran := time.Since(t0); ran > deadline {
		t.Errorf("the run took %v against a deadline of %v", ran, deadline)
	}
	doc := readReport(t, out, "gpucheck")
	if code != 1 || doc.Status != fail || len(doc.Steps) != 4 || doc.Steps[0].Status != fail || !strings.Contains(doc.Steps[0].Detail, "did not answer") {
		t.Errorf("exit %d, steps %+v: want the device step to fail, saying the driver did not answer\n%s", code, doc.Steps, log)
	}
}

// TestGpucheckGPUWithoutDriver runs the check where no CUDA driver loads but nvidia-smi is on
// the PATH: it fails at once, saying a GPU is present and its driver does not load, rather than
// checking the fake and passing; with -fake it runs on the fake, as asked.
func TestGpucheckGPUWithoutDriver(t *testing.T) {
	lib := needFake(t)
	if icuda.Load() == nil {
		t.Skip("libcuda.so.1 loads on this machine: a GPU machine without its driver cannot be staged here")
	}
	path := t.TempDir()
	script(t, path, "nvidia-smi", `echo "GPU 0: NVIDIA H200 (UUID: GPU-0)"`)
	env := []string{"PATH=" + path + string(os.PathListSeparator) + os.Getenv("PATH"), cuda.LibraryEnv + "=", fakecuda.PrebuiltEnv + "=" + lib}
	out := t.TempDir()
	code, log := runMain(t, env, "-gpucheck", out, "-bin", standInBin(t), "-quick")
	doc := readReport(t, out, "gpucheck")
	if code != 1 || !strings.Contains(log, "an NVIDIA GPU is present but the CUDA driver does not load") || !strings.Contains(log, "nvidia-smi at "+path) ||
		!strings.Contains(doc.Steps[0].Detail, "-fake") {
		t.Errorf("exit %d, device step %+v:\n%s", code, doc.Steps[0], log)
	}
	out = t.TempDir()
	code, log = runMain(t, env, "-gpucheck", out, "-bin", standInBin(t), "-quick", "-fake", "-cases", "^uvm-acquire/resident$")
	if doc := readReport(t, out, "fake-driver-quick"); code != 0 || !doc.Device.Fake || len(doc.Cases) != 1 {
		t.Errorf("-fake: exit %d, device %+v, cases %+v:\n%s", code, doc.Device, doc.Cases, log)
	}
}

// TestGpuSigns: an NVIDIA device node, nvidia-smi on the PATH and an NVML library that loads
// each say a GPU is here; none of them, nothing does.
func TestGpuSigns(t *testing.T) {
	dev := t.TempDir()
	none := func(string) (string, error) { return "", errors.New("not found") }
	if s := gpuSigns(dev, none, nvml.Open(filepath.Join(t.TempDir(), "absent.so"))); len(s) != 0 {
		t.Errorf("nothing there: %v", s)
	}
	for _, node := range []string{"nvidiactl", "nvidia0"} {
		if err := os.WriteFile(filepath.Join(dev, node), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	smi := func(string) (string, error) { return "/usr/bin/nvidia-smi", nil }
	s := gpuSigns(dev, smi, nvml.NewFakeDGXH100())
	if len(s) != 3 || !strings.Contains(s[0], filepath.Join(dev, "nvidia0")) || !strings.Contains(s[1], "/usr/bin/nvidia-smi") || s[2] != "NVML initializes" {
		t.Errorf("signs %q", s)
	}
}
