package main

// The GPU check's verdict and report (gpucheck.go): the checks, NAME.md and NAME.json.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// gradedTargets are the targets the check grades on a GPU: every target of the GPU suites
// compiled in (issues 19 and 26 among them: the CUDAHost pool against cuMemHostAlloc, CUDA's
// host pool and a PyTorch-style cache; copy bandwidth; the device heap against cuMemAllocAsync;
// the UVM tier, its Acquire of a resident block included; the copy engine; pinning per GiB) and
// the pool's scaling on 16 cores. The GPU tests' figures are graded beside them
// (testFigureNames).
func gradedTargets() []string {
	var names []string
	for _, s := range gpuSuites {
		for _, t := range s.targets(nil) {
			names = append(names, t.Name)
		}
	}
	return append(names, poolScalingTarget)
}

// testFigureNames are the figures the GPU tests record (fakecuda.Figure), each graded as a
// target: the UVM tier's bandwidth by block size in TestGPUTierBandwidth (package uvm).
var testFigureNames = func() []string {
	var names []string
	for _, sz := range uvmBlockSizes {
		for _, what := range []string{"evict", "restore", "both", "evict-vs-managed"} {
			names = append(names, "uvm-tier/"+what+"/"+sizeName(sz))
		}
	}
	return names
}()

// evaluate makes the checks from what the run has so far.
func (c *check) evaluate() {
	c.Checks = nil
	var rs []result
	if c.bench != nil {
		rs = c.bench.results
	}
	byName := map[string]target{}
	var order []string
	for _, t := range evaluateTargets(rs) {
		byName[t.Name] = t
		order = append(order, t.Name)
	}
	graded := map[string]bool{}
	for _, name := range gradedTargets() {
		graded[name] = true
		t, ok := byName[name]
		if !ok {
			t = target{Name: name, Want: "measured by the -gpu suites", Status: unmeasured, Detail: "no GPU suite ran"}
		}
		c.Checks = append(c.Checks, c.fromTarget(t, "target"))
	}
	for _, name := range testFigureNames {
		c.Checks = append(c.Checks, c.fromTarget(c.figureTarget(name), "target"))
	}
	for _, name := range order { // the CPU suite's targets, where measured: not graded here
		if t := byName[name]; !graded[name] && t.Status != unmeasured {
			ct := c.fromTarget(t, "other")
			ct.Status = na
			ct.Detail = "not graded here: a target of the CPU suite, which bench's CPU run grades (" + strings.ToLower(t.Status) + "; " + ct.Detail + ")"
			c.Checks = append(c.Checks, ct)
		}
	}
	c.Checks = append(c.Checks, c.runChecks(rs)...)
	c.Checks = append(c.Checks, c.capabilityChecks()...)
}

// figureTarget grades the GPU tests' figure name: UNMEASURED when no test recorded it, or when
// the test that recorded it did not pass (a figure is logged before its test's verdict: one of
// copies whose bytes came out wrong is no measurement, as lookup takes no figure of an
// allocator that failed on its case).
func (c *check) figureTarget(name string) target {
	for _, f := range c.Figures {
		if f.Name != name {
			continue
		}
		op := ">="
		if f.AtMost {
			op = "<="
		}
		want := fmt.Sprintf("%s %s %g %s (%s, %s)", name, op, f.Limit, f.Unit, strings.TrimSuffix(f.Binary, ".test"), f.Test)
		if st, detail := c.testStatus(f.Binary, f.Test); st != pass {
			return target{Name: name, Want: want, Limit: f.Limit, Status: unmeasured, Detail: fmt.Sprintf(
				"not measured: %s (%s) recorded %.3g %s but did not pass (%s)", f.Test, f.Binary, f.Value, f.Unit, detail)}
		}
		return ratio(name, want, f.Value, 1, true, f.Limit, f.AtMost, fmt.Sprintf("%.3g %s", f.Value, f.Unit))
	}
	return target{Name: name, Want: "recorded by a GPU test (fakecuda.Figure)", Status: unmeasured, Detail: "no GPU test recorded it"}
}

// testStatus is the status of test name of binary and its detail ("not run" when the check
// has no such test).
func (c *check) testStatus(binary, name string) (status, detail string) {
	for _, t := range c.Tests {
		if t.Binary == binary && t.Name == name {
			detail = strings.ToLower(t.Status)
			if t.Detail != "" {
				detail += ": " + t.Detail
			}
			return t.Status, detail
		}
	}
	return "", "no result of it"
}

// fromTarget turns a target into a check: MET passes, MISSED and UNMEASURED fail, NOISY (its
// rounds disagree by more than its margin: noise.go) stays NOISY, neither passed nor failed; on
// the fake driver every target is N/A (whatever its name, the device is the fake's), and so is
// the 16-core scaling on a machine of fewer cores.
func (c *check) fromTarget(t target, kind string) checkResult {
	ct := checkResult{Name: t.Name, Want: t.Want, Value: t.Ratio, Limit: t.Limit, Detail: t.Detail, Kind: kind}
	switch {
	case c.fake:
		ct.Status = na
		ct.Detail = fakeNote + "; " + ct.Detail
	case t.Name == poolScalingTarget && runtime.NumCPU() < 16:
		ct.Status = na
		ct.Detail = fmt.Sprintf("needs 16 cores; this machine has %d", runtime.NumCPU())
	case t.Status == notApplicable: // a capability the driver lacks (host pools): the detail says which
		ct.Status = na
	case t.Status == met:
		ct.Status = pass
	case t.Status == noisy:
		ct.Status = noisy
	case t.Status == missed:
		ct.Status = fail
	default:
		ct.Status = fail
		if ct.Detail == "" {
			ct.Detail = "not measured"
		}
	}
	return ct
}

// runChecks are the checks that things ran clean: the tests, the contract tests, the suites,
// managed memory's rows and the examples. A step with nothing behind it (no binary, no example,
// no case) fails its check.
func (c *check) runChecks(rs []result) []checkResult {
	var out []checkResult
	add := func(name, want string, ok bool, detail string) {
		out = append(out, checkResult{Name: name, Want: want, Status: map[bool]string{true: pass, false: fail}[ok], Detail: detail, Kind: "run"})
	}
	if c.stepRan("tests") {
		status, detail := c.gpuTestsCheck()
		out = append(out, checkResult{Name: "gpu-tests", Want: "on a GPU every GPU test of the manifest ('" + gpuTestPattern + "') runs and passes, and nothing skips but for a capability the device lacks",
			Status: status, Detail: detail, Kind: "run"})
		for _, ct := range contractTests {
			name := ct.gpu
			if c.fake {
				name = ct.fake
			}
			status, detail := "not run", ""
			for _, t := range c.Tests {
				if t.Name == name {
					status, detail = t.Status, t.Detail
				}
			}
			add(ct.check, name+" passes: "+ct.what, status == pass, strings.TrimSuffix(status+"; "+detail, "; "))
		}
	}
	if c.stepRan("device") && c.Device.Name != "" {
		// internal/nvml against nvidia-smi: the name, the memory and the PCI bus id.
		ct := checkResult{Name: "nvml-vs-nvidia-smi", Want: "internal/nvml's name, total memory and PCI bus id of the device are nvidia-smi's", Kind: "run"}
		switch {
		case c.fake:
			ct.Status, ct.Detail = na, "the fake driver: no NVML, no nvidia-smi"
		case c.Device.NvidiaSMI == "":
			ct.Status, ct.Detail = na, "no nvidia-smi on this machine to compare with"
		default:
			ok, detail := compareNVML(c.Device.NvidiaSMI, c.Device.NVML)
			ct.Status, ct.Detail = map[bool]string{true: pass, false: fail}[ok], detail
		}
		out = append(out, ct)
	}
	if c.stepRan("examples") {
		if len(c.Examples) == 0 {
			add("examples", "kvcache and loadweights run clean", false, "no example ran: "+c.stepDetail("examples"))
		}
		for _, ex := range c.Examples {
			add("example/"+ex.Name, strings.TrimSpace(ex.Name+" "+strings.Join(ex.Args, " "))+" runs clean (every byte it moved verified)", ex.Status == pass, lastLine(ex.Output))
		}
	}
	if c.stepRan("bench") {
		var errs []string
		for _, r := range rs {
			if r.Metric == "error" && !c.naError(r) {
				errs = append(errs, r.Case+" "+r.Impl+": "+shorten(r.Note))
			}
		}
		for _, s := range c.skipped {
			errs = append(errs, s+": not run (deadline)")
		}
		detail := fmt.Sprintf("%d cases, %d results", len(c.Cases), len(rs))
		switch {
		case len(c.Cases) == 0:
			errs = append(errs, "no case ran: "+c.stepDetail("bench"))
			detail = strings.Join(errs, "; ")
		case len(errs) > 0:
			detail = strings.Join(errs, "; ")
		}
		add("bench-gpu", "the -gpu suites (cuda, batch, commit, uvm) and the sweep run every case of the plan without an error", len(errs) == 0, detail)
		managed := 0
		for _, r := range rs {
			if r.Impl == managedPolicy && strings.HasPrefix(r.Case, "uvm-oversub/") && r.Metric == "gbps" {
				if v, ok := lookup(rs, r.Case, r.Impl, r.Metric); ok && v > 0 { // a figure, not a row left empty
					managed++
				}
			}
		}
		if c.fake {
			out = append(out, checkResult{Name: "bench-uvm-managed", Want: "bench -uvm's managed-memory rows measured", Status: na, Kind: "run",
				Detail: "the fake driver's cuMemPrefetchAsync moves no bytes: no managed-memory rows"})
		} else {
			add("bench-uvm-managed", "bench -uvm's managed-memory rows measured", managed > 0, fmt.Sprintf("%d managed-memory cases measured", managed))
		}
	}
	return out
}

// stepDetail returns the detail of the step of that name.
func (c *check) stepDetail(name string) string {
	for _, s := range c.Steps {
		if s.Name == name {
			return s.Detail
		}
	}
	return ""
}

// stepRan reports whether the step was run.
func (c *check) stepRan(name string) bool {
	for _, s := range c.Steps {
		if s.Name == name {
			return true
		}
	}
	return false
}

// lastLine returns the last line of s.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// exitCode is the run's exit status (see gpucheck.go): a NOISY target is no pass (3).
func (c *check) exitCode() int {
	code := 0
	for _, st := range c.Steps {
		if st.Status != pass {
			return 1
		}
	}
	for _, ct := range c.Checks {
		switch {
		case ct.Status != fail && ct.Status != noisy:
		case ct.Kind == "run":
			return 1
		default:
			code = 3
		}
	}
	return code
}

// verdict is the report's one-word result.
func (c *check) verdict() string {
	if c.exitCode() == 0 {
		return pass
	}
	return fail
}

// write writes NAME.json and NAME.md into the output folder.
func (c *check) write() error {
	if c.name == "" {
		c.name = "gpucheck"
	}
	var rs []result
	if c.bench != nil {
		rs = c.bench.results
	}
	m := thisMachine(c.cfg.quick, loadAvg())
	if c.commit != "" {
		m.Commit = c.commit
	}
	doc := struct {
		Check    string        `json:"check"`
		Note     string        `json:"note,omitempty"`
		Status   string        `json:"status"`
		Machine  machine       `json:"machine"`
		Device   deviceInfo    `json:"device"`
		Started  string        `json:"started"`
		Seconds  float64       `json:"seconds"`
		Deadline float64       `json:"deadline_seconds"`
		Checks   []checkResult `json:"checks"`
		Steps    []stepResult  `json:"steps"`
		Binaries []binResult   `json:"binaries"`
		Tests    []testResult  `json:"tests"`
		Figures  []testFigure  `json:"test_figures,omitempty"`
		Examples []exampleRun  `json:"examples"`
		Cases    []caseRun     `json:"cases"`
		Results  []result      `json:"results"`
		NotRun   []string      `json:"cases_not_run,omitempty"`
	}{"pinmalloc gpucheck (issues 19, 26 and 36)", "", c.verdict(), m, c.Device, c.start.UTC().Format(time.RFC3339), time.Since(c.start).Seconds(),
		c.cfg.deadline.Seconds(), c.Checks, c.Steps, c.Binaries, c.Tests, c.Figures, c.Examples, c.Cases, rs, c.skipped}
	if c.fake {
		doc.Note = fakeNote
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(c.cfg.gpucheck, c.name+".json"), buf.Bytes()); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(c.cfg.gpucheck, c.name+".md"), []byte(c.markdown(m, rs)))
}

// writeAtomic writes b to a file beside path and renames it into place: a reader, or a run
// killed while writing, finds the old report or the new one, whole.
func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
