package main

// Tests of the GPU check's orchestration and verdict (gpucheck.go), with shell scripts standing in
// for the test binaries and the examples. Their names avoid "GPU" and "CUDA": scripts/gpucheck
// builds the packages whose tests have those names for the GPU machine.

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
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
	cfg := &config{gpucheck: out, bin: bin, deadline: time.Minute, caseLimit: time.Minute}
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

// ev is one test2json event as a line of a stand-in test binary's output.
func ev(action, test, output string) string {
	b, err := json.Marshal(struct {
		Action string `json:",omitempty"`
		Test   string `json:",omitempty"`
		Output string `json:",omitempty"`
	}{action, test, output})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// events is a shell script body that prints the lines of evs.
func events(evs ...string) string { return "cat <<'EOF'\n" + strings.Join(evs, "\n") + "\nEOF" }

// passing, skipping and failing are a test's events: it runs, logs a line and ends so.
func passing(name string) []string { return []string{ev("run", name, ""), ev("pass", name, "")} }
func skipping(name, why string) []string {
	return []string{ev("run", name, ""), ev("output", name, "    x_test.go:9: "+why+"\n"), ev("skip", name, "")}
}
func failing(name, why string) []string {
	return []string{ev("run", name, ""), ev("output", name, "    x_test.go:9: "+why+"\n"), ev("fail", name, "")}
}

// cat joins lists of events.
func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestGpucheckTests runs stand-in test binaries (shell scripts printing test2json events, run
// by a stand-in test2json that runs its command) through the tests step, and checks issue 26's
// rules: every test and subtest is counted; a failing test or subtest, a binary that exits
// non-zero or prints what is not an event, or a test that never finishes fails the run; on a GPU
// a skip anywhere (a subtest whose provider did not open, say) and a GPU test of the manifest
// that did not run fail the gpu-tests check, with the reason; on the fake the GPU tests may skip.
func TestGpucheckTests(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shell scripts stand in for test binaries")
	}
	bin := t.TempDir()
	pkg := t.TempDir()
	script(t, bin, test2jsonName, `[ "$1 $2 $3" = "-t -p `+pkg+`" ] || { echo "bad test2json args: $*"; exit 2; }; `+test2jsonStandIn)
	const contract = "TestCUDAPoolCopiesMixedSizes,TestCUDAHostProvidersCopy"
	good := cat(passing("TestCUDAPoolCopiesMixedSizes"), []string{ev("run", "TestCUDAHostProvidersCopy", "")},
		passing("TestCUDAHostProvidersCopy/vmm"), passing("TestCUDAHostProvidersCopy/register"), []string{ev("pass", "TestCUDAHostProvidersCopy", "")})
	script(t, bin, "good.test", `case "$*" in *"-test.v=test2json -test.run CUDA|GPU "*) ;; *) echo "bad args: $*"; exit 2;; esac
`+events(good...))
	write := func(lines ...string) {
		if err := os.WriteFile(filepath.Join(bin, "tests.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(fake bool) *check {
		c := newCheck(t, bin, fake)
		c.step("tests", c.runTests)
		c.evaluate()
		return c
	}

	write("good.test " + pkg + " " + contract)
	c := run(false)
	if c.Steps[0].Status != pass || len(c.Tests) != 4 || c.Tests[2].Name != "TestCUDAHostProvidersCopy/vmm" {
		t.Fatalf("good binary: step %+v, tests %+v", c.Steps[0], c.Tests)
	}
	for _, name := range []string{"gpu-tests", "pinned-contract/mixed-sizes", "pinned-contract/host-providers"} {
		if ct := findCheck(c, name); ct.Status != pass {
			t.Errorf("%s: %+v", name, ct)
		}
	}
	if c.exitCode() == 1 { // 3: the targets, no suite having run
		t.Errorf("good binary: exit %d", c.exitCode())
	}

	// On a GPU, a subtest that skips fails gpu-tests though its parent passed (issue 26: the
	// host providers' subtests skipped when a provider did not open), and says why.
	script(t, bin, "skipsub.test", events(cat(passing("TestCUDAPoolCopiesMixedSizes"), []string{ev("run", "TestCUDAHostProvidersCopy", "")},
		skipping("TestCUDAHostProvidersCopy/vmm", "vmm provider: not supported"), passing("TestCUDAHostProvidersCopy/register"),
		[]string{ev("pass", "TestCUDAHostProvidersCopy", "")})...))
	write("skipsub.test " + pkg + " " + contract)
	c = run(false)
	if ct := findCheck(c, "gpu-tests"); ct.Status != fail || !strings.Contains(ct.Detail, "TestCUDAHostProvidersCopy/vmm skipped") ||
		!strings.Contains(ct.Detail, "x_test.go:9: vmm provider: not supported") || c.exitCode() != 1 {
		t.Errorf("a subtest skipped on a GPU: %+v, exit %d", ct, c.exitCode())
	}
	if c = run(true); findCheck(c, "gpu-tests").Status != na { // the fake: no GPU, N/A whatever skipped
		t.Errorf("a subtest skipped on the fake: %+v", findCheck(c, "gpu-tests"))
	}

	// On a GPU, a GPU test of the manifest that did not run fails gpu-tests, naming it.
	write("good.test " + pkg + " " + contract + ",TestGPUElsewhere")
	c = run(false)
	if ct := findCheck(c, "gpu-tests"); ct.Status != fail || !strings.Contains(ct.Detail, "good.test TestGPUElsewhere") {
		t.Errorf("a manifest test not run: %+v", ct)
	}

	// A failing test, a failing subtest, a crash (not an event, exit 2), a test that never ends.
	script(t, bin, "bad.test", events(failing("TestGPUThing", "it broke")...)+"\nexit 1")
	script(t, bin, "badsub.test", events(cat([]string{ev("run", "TestGPUThing", "")}, failing("TestGPUThing/sub", "sub broke"),
		[]string{ev("fail", "TestGPUThing", "")})...))
	script(t, bin, "crash.test", `echo "panic: boom"; exit 2`)
	script(t, bin, "hang.test", events(ev("run", "TestGPUThing", ""), ev("output", "TestGPUThing", "=== RUN   TestGPUThing\n")))
	for bad, detail := range map[string]string{"bad.test": "x_test.go:9: it broke", "badsub.test": "TestGPUThing/sub: x_test.go:9: sub broke",
		"crash.test": "", "hang.test": "did not finish"} {
		write("good.test "+pkg+" "+contract, bad+" "+pkg+" TestGPUThing")
		c := run(false)
		if c.Steps[0].Status != fail || findCheck(c, "gpu-tests").Status != fail || c.exitCode() != 1 {
			t.Errorf("%s: step %+v, gpu-tests %+v, exit %d", bad, c.Steps[0], findCheck(c, "gpu-tests"), c.exitCode())
		}
		found := false
		for _, tr := range c.Tests {
			found = found || tr.Binary == bad && tr.Name == "TestGPUThing" && tr.Status == fail && tr.Detail == detail
		}
		if !found && detail != "" {
			t.Errorf("%s: tests %+v, want TestGPUThing failing with %q", bad, c.Tests, detail)
		}
	}

	// On a GPU, tests that all skip (a driver the tests cannot find) fail the check; a missing
	// contract test fails its check.
	script(t, bin, "skips.test", events(skipping("TestCUDAPoolCopiesMixedSizes", "no CUDA driver")...))
	write("skips.test " + pkg + " TestCUDAPoolCopiesMixedSizes")
	c = run(false)
	if findCheck(c, "gpu-tests").Status != fail || findCheck(c, "pinned-contract/mixed-sizes").Status != fail ||
		findCheck(c, "pinned-contract/host-providers").Detail != "not run" {
		t.Errorf("all skipped on a GPU: %+v", c.Checks)
	}
	// On the fake the pattern adds the contract tests' twins, and the GPU tests may all skip.
	script(t, bin, "fake.test", `case "$*" in *TestFakePoolCopiesMixedSizes*) ;; *) exit 2;; esac
`+events(cat(skipping("TestCUDAPoolCopiesMixedSizes", "no CUDA driver"), passing("TestFakePoolCopiesMixedSizes"), passing("TestFakeHostProvidersCopy"))...))
	write("fake.test " + pkg + " TestCUDAPoolCopiesMixedSizes")
	c = run(true)
	for _, name := range []string{"pinned-contract/mixed-sizes", "pinned-contract/host-providers"} {
		if ct := findCheck(c, name); ct.Status != pass {
			t.Errorf("fake: %s: %+v", name, ct)
		}
	}
	if ct := findCheck(c, "gpu-tests"); ct.Status != na {
		t.Errorf("fake: gpu-tests %+v, want N/A: no GPU test can run there", ct)
	}

	write()
	c = newCheck(t, bin, false)
	if _, err := c.runTests(); err == nil || !strings.Contains(err.Error(), "lists no test binary") {
		t.Errorf("empty manifest: %v", err)
	}
	write("good.test " + pkg) // a manifest of before issue 26
	if _, err := c.runTests(); err == nil || !strings.Contains(err.Error(), "want FILE DIR TESTS") {
		t.Errorf("old manifest: %v", err)
	}
	if _, err := readManifest(t.TempDir()); err == nil || !strings.Contains(err.Error(), "scripts/gpucheck build") {
		t.Errorf("no manifest: %v", err)
	}
	write("good.test " + pkg + " " + contract)
	if err := os.Remove(filepath.Join(bin, test2jsonName)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.runTests(); err == nil || !strings.Contains(err.Error(), "no test2json") {
		t.Errorf("no test2json: %v", err)
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

// TestGpucheckTargets checks the verdict on the suites' figures and the GPU tests': on a GPU a
// met target passes and a missed or unmeasured one fails (exit status 3 when nothing else
// failed), every target of the GPU suites graded (the copy engine's, the pinning suite's, the
// tier's Acquire among them, once "informational"); on the fake every target is N/A and the
// report says the figures are not GPU figures; the 16-core scaling is N/A on fewer cores.
func TestGpucheckTargets(t *testing.T) {
	rs := []result{
		{Case: "cuda-pair/4KiB", Impl: "cuda-hostalloc", Metric: "ns_per_pair", Value: 1.2e6},
		{Case: "cuda-pair/4KiB", Impl: "pinmalloc-pool", Metric: "ns_per_pair", Value: 100},
		{Case: "cuda-pair/64KiB", Impl: "cuda-hostalloc", Metric: "ns_per_pair", Value: 1e5},
		{Case: "cuda-pair/64KiB", Impl: "pinmalloc-pool", Metric: "ns_per_pair", Value: 100},
		{Case: "gomaxprocs/16", Impl: "pinmalloc-pool", Metric: "speedup", Value: 13},
		{Case: "uvm-oversub/zipf/managed/1x", Impl: "managed", Metric: "gbps", Value: 5},
		{Case: "uvm-acquire/resident", Impl: "uvm", Metric: "ns_per_acquire", Value: 150},
		{Case: "batch-h2d/4KiB", Impl: "pinmalloc-kernel", Metric: "gbps", Value: 20},
	}
	figs := []testFigure{{Binary: "uvm.test", Test: "TestGPUTierBandwidth", Name: "uvm-tier/evict/4KiB", Value: 50, Unit: "GB/s", Limit: 48},
		{Binary: "uvm.test", Test: "TestGPUTierBandwidth", Name: "uvm-tier/restore/4KiB", Value: 0.2, Unit: "GB/s", Limit: 48}}
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
		c.Cases = []caseRun{{Name: "cuda-pair/4KiB", Status: pass}}
		c.Figures = figs
		c.Tests = []testResult{{Binary: "uvm.test", Name: "TestGPUTierBandwidth", Status: pass}}
		c.Steps = []stepResult{{Name: "bench", Status: pass}}
		c.evaluate()
		acquire, kernel, figMet, figMissed, figNone := findCheck(c, "uvm-acquire-resident"), findCheck(c, "kernel-h2d/4KiB"),
			findCheck(c, "uvm-tier/evict/4KiB"), findCheck(c, "uvm-tier/restore/4KiB"), findCheck(c, "uvm-tier/both/2MiB")
		for _, ct := range []checkResult{acquire, kernel, figMet, figMissed, figNone} {
			if ct.Kind != "target" {
				t.Errorf("fake %v: %+v is not graded", fake, ct)
			}
		}
		if fake {
			for _, ct := range c.Checks {
				if ct.Kind == "target" && ct.Status != na {
					t.Errorf("fake: %s graded %s", ct.Name, ct.Status)
				}
			}
		} else if acquire.Status != pass || kernel.Status != fail || figMet.Status != pass || figMissed.Status != fail || figNone.Status != fail {
			t.Errorf("GPU: acquire %s, kernel %s, figures %s %s %s; want PASS FAIL PASS FAIL FAIL", acquire.Status, kernel.Status, figMet.Status, figMissed.Status, figNone.Status)
		}
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
		if len(c.Checks) < len(gradedTargets())+len(testFigureNames) {
			t.Errorf("%d checks for %d targets and %d figures", len(c.Checks), len(gradedTargets()), len(testFigureNames))
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
	out := strings.Join(cat(failing("TestA", "boom"), []string{ev("output", "TestA", "    a_test.go:4: more\n")}, passing("TestB"),
		[]string{ev("run", "TestC", "")}, skipping("TestC/sub", "no CUDA driver"), []string{ev("pass", "TestC", ""), ev("output", "", "PASS\n")}), "\n")
	ts, _, err := parseEvents("x.test", []byte(out))
	if err != nil || len(ts) != 4 || ts[0].Status != fail || ts[0].Detail != "x_test.go:9: boom" || ts[1].Name != "TestB" || ts[1].Status != pass ||
		ts[3].Name != "TestC/sub" || ts[3].Status != skip || ts[3].Detail != "x_test.go:9: no CUDA driver" || ts[2].Status != pass {
		t.Errorf("parseEvents: %+v, %v", ts, err)
	}
	if _, _, err := parseEvents("x.test", []byte(out+"\n--- PASS: TestD (0.00s)\n")); err == nil {
		t.Error("parseEvents took a line of text for an event")
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

// TestGpucheckScriptArgs checks that scripts/gpucheck parses its arguments strictly (issue 26:
// `scripts/gpucheck -quick` once took -quick for the output folder): a missing DIR, a flag in
// DIR's place, an unknown flag or a flag without its value exits 2 before anything is built.
func TestGpucheckScriptArgs(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	for _, args := range [][]string{{}, {"-quick"}, {dir, "-bogus"}, {dir, "-deadline"}, {dir, "-quick", "extra"}, {"run"},
		{"run", "-quick", dir}, {"run", dir, "-name"}, {"build", dir}, {dir, "-cases"}, {"run", dir, "-fake", "-case-limit"}, {"run", dir, "-fake=1"}} {
		cmd := exec.Command("bash", append([]string{filepath.Join("..", "scripts", "gpucheck")}, args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "usage") {
			t.Errorf("scripts/gpucheck %q: %v, want exit status 2 and the usage:\n%s", args, err, out)
		}
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("a usage error wrote into DIR: %v %v", entries, err)
	}
}

// TestGpucheckBuildFailsWhenGoListFails: scripts/gpucheck build stops, non-zero, when go list
// of the packages fails (a package that does not load), instead of building a bundle without
// that package's GPU tests. Run on a copy of the script with a stub go that fails go list and
// does nothing else, so it builds nothing.
func TestGpucheckBuildFailsWhenGoListFails(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	root, stubs := t.TempDir(), t.TempDir()
	script, err := os.ReadFile(filepath.Join("..", "scripts", "gpucheck"))
	if err != nil {
		t.Fatal(err)
	}
	goStub := "#!/bin/sh\n" +
		"[ \"$1\" = list ] && { echo 'go: a package does not load' >&2; exit 1; }\n" +
		"exit 0\n"
	files := map[string]string{
		filepath.Join(root, "scripts", "gpucheck"):                     string(script),
		filepath.Join(root, "bench", "go.mod"):                         "module stub\n",
		filepath.Join(root, "internal", "fakecuda", "fakedriver.c.in"): "",
		filepath.Join(stubs, "go"):                                     goStub,
	}
	for path, text := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "gpucheck"), "build")
	path := stubs + string(os.PathListSeparator) + os.Getenv("PATH")
	cmd.Env = append(os.Environ(), "PATH="+path, "CC=true")
	out, err := cmd.CombinedOutput()
	if err == nil || strings.Contains(string(out), "gpucheck: built") {
		t.Errorf("scripts/gpucheck build with go list failing: %v, want a failure before the "+
			"bundle:\n%s", err, out)
	}
}

// TestGpucheckNVML checks the comparison of internal/nvml with nvidia-smi: the same device in
// their two spellings passes, a different name, memory or bus id fails, and so does NVML
// unavailable on a GPU machine.
func TestGpucheckNVML(t *testing.T) {
	n := &nvmlInfo{Name: "NVIDIA H100 80GB HBM3", TotalMem: 81559 << 20, PCIBusID: "0000:1b:00.0"}
	smi := "NVIDIA H100 80GB HBM3, 580.65.06, 81559 MiB, 00000000:1B:00.0"
	if ok, detail := compareNVML(smi, n); !ok {
		t.Errorf("the same device: %s", detail)
	}
	for _, bad := range []string{"NVIDIA H200, 580.65.06, 81559 MiB, 00000000:1B:00.0", "NVIDIA H100 80GB HBM3, 580.65.06, 40000 MiB, 00000000:1B:00.0",
		"NVIDIA H100 80GB HBM3, 580.65.06, 81559 MiB, 00000000:2A:00.0", "garbage"} {
		if ok, detail := compareNVML(bad, n); ok {
			t.Errorf("%q passed: %s", bad, detail)
		}
	}
	if ok, _ := compareNVML(smi, &nvmlInfo{Err: "nvml: NVML unavailable"}); ok {
		t.Error("NVML unavailable passed")
	}
	c := newCheck(t, t.TempDir(), false)
	c.Steps = []stepResult{{Name: "device", Status: pass}}
	c.Device.NvidiaSMI, c.Device.NVML = smi, n
	c.Device.Name = n.Name
	c.evaluate()
	if ct := findCheck(c, "nvml-vs-nvidia-smi"); ct.Status != pass {
		t.Errorf("report check: %+v", ct)
	}
}

// TestWorkerNaNIsNoFigure: a figure that is not a number comes back from a bench worker as 0,
// noted (finite), after any note it had; no target may read that 0 as a measurement. The
// footprint target at low occupancy adds 1 MiB to the live bytes, so a live figure read as 0
// would grade it MET on the idle bytes alone.
func TestWorkerNaNIsNoFigure(t *testing.T) {
	c := "footprint/larson-low"
	rs := finite([]result{
		{Case: c, Impl: "pinmalloc-pool", Metric: "live_bytes", Value: math.NaN(), Unit: "B", Note: "sampled at the end"},
		{Case: c, Impl: "pinmalloc-pool", Metric: "held_idle_bytes", Value: 512 << 10, Unit: "B"},
	})
	if v, ok := lookup(rs, c, "pinmalloc-pool", "live_bytes"); ok {
		t.Errorf("lookup found %g, noted %q: a figure that was not a number", v, rs[0].Note)
	}
	for _, tg := range footprintTargets(rs) {
		if tg.Name == "footprint-low-idle" && tg.Status != unmeasured {
			t.Errorf("%s %s ratio %g (%s), want UNMEASURED", tg.Name, tg.Status, tg.Ratio, tg.Detail)
		}
	}
}

// TestGpucheckFigureOfAFailedTest: a figure a GPU test recorded is graded only when that test
// passed; one recorded by a test that failed (its bytes moved wrong, its tier's stats off: the
// figure is logged before the test's verdict) or did not finish is UNMEASURED, failing, never
// PASS, as a bench figure of an allocator that failed on its case is no measurement (lookup).
func TestGpucheckFigureOfAFailedTest(t *testing.T) {
	c := newCheck(t, t.TempDir(), false)
	c.Figures = []testFigure{
		{Binary: "uvm.test", Test: "TestGPUTierBandwidth", Name: "uvm-tier/evict/4KiB", Value: 50, Unit: "GB/s", Limit: 48},
		{Binary: "other.test", Test: "TestGPUOther", Name: "uvm-tier/restore/4KiB", Value: 50, Unit: "GB/s", Limit: 48},
		{Binary: "third.test", Test: "TestGPUThird", Name: "uvm-tier/both/4KiB", Value: 90, Unit: "GB/s", Limit: 80},
	}
	c.Tests = []testResult{
		{Binary: "uvm.test", Name: "TestGPUTierBandwidth", Status: fail, Detail: "4 KiB: stats {Failures:3}"},
		{Binary: "other.test", Name: "TestGPUOther", Status: fail, Detail: "did not finish"},
		{Binary: "third.test", Name: "TestGPUThird", Status: pass},
	}
	for _, name := range []string{"uvm-tier/evict/4KiB", "uvm-tier/restore/4KiB"} {
		ct := c.fromTarget(c.figureTarget(name), "target")
		if ct.Status != fail || !strings.Contains(ct.Detail, "not measured") {
			t.Errorf("%s, recorded by a test that failed: %s (%s), want FAIL saying not measured", name, ct.Status, ct.Detail)
		}
	}
	if ct := c.fromTarget(c.figureTarget("uvm-tier/both/4KiB"), "target"); ct.Status != pass {
		t.Errorf("uvm-tier/both/4KiB, recorded by a test that passed: %s (%s), want PASS", ct.Status, ct.Detail)
	}
}

// TestGpucheckManagedRowsMeasured: bench-uvm-managed passes only on a managed-memory row with a
// figure; one whose bandwidth was not a number (noted so by the worker: finite), or whose case
// recorded an error, is no row measured.
func TestGpucheckManagedRowsMeasured(t *testing.T) {
	c := newCheck(t, t.TempDir(), false)
	c.Steps = []stepResult{{Name: "bench", Status: pass}}
	c.Cases = []caseRun{{Name: "uvm-oversub/zipf/managed/1x", Status: pass}}
	row := result{Case: "uvm-oversub/zipf/managed/1x", Impl: managedPolicy, Metric: "gbps", Unit: "GB/s"}
	nan := row
	nan.Note = "not a number"
	failed := row
	failed.Case, failed.Value = "uvm-oversub/zipf/managed/2x", 5
	for _, tc := range []struct {
		name string
		rs   []result
		want string
	}{
		{"not a number", []result{nan}, fail},
		{"of a failed case", []result{failed, {Case: failed.Case, Impl: managedPolicy, Metric: "error", Note: "verify: block 3"}}, fail},
		{"measured", []result{{Case: row.Case, Impl: managedPolicy, Metric: "gbps", Value: 5}}, pass},
	} {
		var ct checkResult
		for _, x := range c.runChecks(tc.rs) {
			if x.Name == "bench-uvm-managed" {
				ct = x
			}
		}
		if ct.Status != tc.want {
			t.Errorf("a managed row %s: bench-uvm-managed %s (%s), want %s", tc.name, ct.Status, ct.Detail, tc.want)
		}
	}
}
