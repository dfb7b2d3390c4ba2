package main

// The GPU check's verdict and report (gpucheck.go): the checks, NAME.md and NAME.json.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// issue19Targets are the targets of issue 19, by the names evaluateTargets gives them.
var issue19Targets = func() []string {
	var ts []string
	for _, sz := range cudaPairSizesFor19 {
		ts = append(ts, "pool-vs-cuda-hostalloc/"+sizeName(sz))
	}
	for _, dir := range []string{"h2d", "d2h"} {
		for _, sz := range cudaCopySizesFor19 {
			ts = append(ts, "pool-"+dir+"-vs-hostalloc/"+sizeName(sz))
		}
	}
	ts = append(ts, "uvm-evict-gbps", "uvm-restore-gbps", "uvm-bidir-gbps", "uvm-evict-vs-managed")
	for _, sz := range []int64{4 << 10, 1 << 20} {
		ts = append(ts, "device-vs-mallocasync/"+sizeName(sz))
	}
	return append(ts, poolScalingTarget)
}()

// The sizes issue 19 names (gpu_cuda.go's, which need cgo, are the same).
var (
	cudaPairSizesFor19 = []int64{4 << 10, 64 << 10, 1 << 20}
	cudaCopySizesFor19 = []int64{1 << 20, 16 << 20, 64 << 20, 256 << 20}
)

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
	for _, name := range gradedTargets() {
		t, ok := byName[name]
		if !ok {
			t = target{Name: name, Want: "measured by the -gpu suites", Status: unmeasured, Detail: "no GPU suite ran"}
		}
		c.Checks = append(c.Checks, c.fromTarget(t, "target"))
	}
	in19 := map[string]bool{}
	for _, n := range gradedTargets() {
		in19[n] = true
	}
	for _, name := range order { // the suites' other targets, where measured
		if t := byName[name]; !in19[name] && t.Status != unmeasured {
			ct := c.fromTarget(t, "other")
			ct.Status = na
			ct.Detail = "informational (not an issue 19 or 26 target): " + strings.ToLower(t.Status) + "; " + ct.Detail
			c.Checks = append(c.Checks, ct)
		}
	}
	c.Checks = append(c.Checks, c.runChecks(rs)...)
}

// gradedTargets are the targets the check grades: issue 19's and the anchors' of issue 26.
func gradedTargets() []string {
	return append(append([]string(nil), issue19Targets...), issue26Targets...)
}

// fromTarget turns a suite's target into a check: MET passes, MISSED and UNMEASURED fail; on
// the fake driver every performance target is N/A, and so is the 16-core scaling on a machine
// of fewer cores.
func (c *check) fromTarget(t target, kind string) checkResult {
	ct := checkResult{Name: t.Name, Want: t.Want, Value: t.Ratio, Limit: t.Limit, Detail: t.Detail, Kind: kind}
	switch {
	case c.fake:
		ct.Status = na
		ct.Detail = fakeNote + "; " + ct.Detail
	case t.Name == poolScalingTarget && runtime.NumCPU() < 16:
		ct.Status = na
		ct.Detail = fmt.Sprintf("needs 16 cores; this machine has %d", runtime.NumCPU())
	case t.Status == notApplicable: // an anchor the driver cannot run (host pools before 12.6)
		ct.Status = na
	case t.Status == met:
		ct.Status = pass
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
// managed memory's rows and the examples.
func (c *check) runChecks(rs []result) []checkResult {
	var out []checkResult
	add := func(name, want string, ok bool, detail string) {
		out = append(out, checkResult{Name: name, Want: want, Status: map[bool]string{true: pass, false: fail}[ok], Detail: detail, Kind: "run"})
	}
	// The tests: none failed, every binary ran and, on a GPU, every GPU test of the manifest
	// passed with no skip (gpuTestsCheck).
	if c.stepRan("tests") {
		ok, detail := c.gpuTestsCheck()
		add("gpu-tests", "every test matching '"+gpuTestPattern+"' runs and passes; on a GPU every GPU test of the manifest passes and nothing skips", ok, detail)
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
	if c.stepRan("device") {
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
		for _, ex := range c.Examples {
			line := lastLine(ex.Output)
			add("example/"+ex.Name, strings.TrimSpace(ex.Name+" "+strings.Join(ex.Args, " "))+" runs clean (every byte it moved verified)", ex.Status == pass, line)
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
		detail := fmt.Sprintf("%d cases, %d results", len(c.benchRun), len(rs))
		if len(errs) > 0 {
			detail = strings.Join(errs, "; ")
		}
		add("bench-gpu", "the -gpu suites (cuda, batch, uvm) and the sweep run every case without an error", len(errs) == 0, detail)
		managed := 0
		for _, r := range rs {
			if r.Impl == managedPolicy && strings.HasPrefix(r.Case, "uvm-oversub/") && r.Metric == "gbps" {
				managed++
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

// exitCode is the run's exit status (see gpucheck.go).
func (c *check) exitCode() int {
	code := 0
	for _, st := range c.Steps {
		if st.Status != pass {
			return 1
		}
	}
	for _, ct := range c.Checks {
		switch {
		case ct.Status != fail:
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
		Examples []exampleRun  `json:"examples"`
		Results  []result      `json:"results"`
		NotRun   []string      `json:"cases_not_run,omitempty"`
	}{"pinmalloc gpucheck (issues 19 and 26)", "", c.verdict(), m, c.Device, c.start.UTC().Format(time.RFC3339), time.Since(c.start).Seconds(),
		c.cfg.deadline.Seconds(), c.Checks, c.Steps, c.Binaries, c.Tests, c.Examples, rs, c.skipped}
	if c.fake {
		doc.Note = fakeNote
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.cfg.gpucheck, c.name+".json"), buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.cfg.gpucheck, c.name+".md"), []byte(c.markdown(m, rs)), 0o644)
}

// markdown renders the report.
func (c *check) markdown(m machine, rs []result) string {
	var b strings.Builder
	d := c.Device
	fmt.Fprintf(&b, "# pinmalloc GPU check: %s\n\n", d.Name)
	if c.fake {
		fmt.Fprintf(&b, "**%s.** No GPU was found: everything ran against pinmalloc's fake CUDA driver (device memory in host memory, copies by the CPU, timings from its cost model), so the performance targets are N/A; a test, an example or a suite that fails still fails the run.\n\n", fakeNote)
	}
	fmt.Fprintf(&b, "**Result: %s** (%s)\n\n", c.verdict(), c.summary())
	fmt.Fprintln(&b, "| | |\n|---|---|")
	fmt.Fprintf(&b, "| device | %s (device 0): %.1f GiB, compute capability %s, %d multiprocessors |\n", d.Name, float64(d.TotalMem)/(1<<30), d.Compute, d.Multiprocessors)
	smi := d.NvidiaSMI
	if smi == "" {
		smi = "no nvidia-smi"
	}
	fmt.Fprintf(&b, "| driver | CUDA driver API %s; nvidia-smi: %s |\n", d.CUDA, smi)
	if n := d.NVML; n != nil {
		line := fmt.Sprintf("%s, %d MiB, PCI %s", n.Name, n.TotalMem>>20, n.PCIBusID)
		if n.Err != "" {
			line = n.Err
		}
		fmt.Fprintf(&b, "| internal/nvml | %s |\n", mdCell(line))
	}
	fmt.Fprintf(&b, "| host | %s, %d cores, %s, load %s |\n", m.CPU, m.Cores, m.Go, m.Load)
	fmt.Fprintf(&b, "| run | commit %s, %s, %s mode, %.0f s (deadline %.0f s) |\n", m.Commit, m.Date, m.Mode, time.Since(c.start).Seconds(), c.cfg.deadline.Seconds())
	table := func(title, kind string) {
		fmt.Fprintf(&b, "\n## %s\n\n| check | status | measured | want |\n|---|---|---|---|\n", title)
		for _, ct := range c.Checks {
			if ct.Kind == kind {
				fmt.Fprintf(&b, "| %s | **%s** | %s | %s |\n", ct.Name, ct.Status, mdCell(ct.Detail), mdCell(ct.Want))
			}
		}
	}
	table("Targets (issues 19 and 26)", "target")
	table("Runs", "run")
	table("Other targets of the suites (informational)", "other")
	fmt.Fprintf(&b, "\n## Steps\n\n| step | status | seconds | detail |\n|---|---|---|---|\n")
	for _, s := range c.Steps {
		fmt.Fprintf(&b, "| %s | %s | %.1f | %s |\n", s.Name, s.Status, s.Seconds, mdCell(s.Detail))
	}
	if len(c.Binaries) > 0 {
		fmt.Fprintf(&b, "\n## Tests\n\n| binary | status | seconds | passed | failed | skipped |\n|---|---|---|---|---|---|\n")
		for _, bin := range c.Binaries {
			n := map[string][]string{}
			for _, t := range c.Tests {
				if t.Binary == bin.Binary && (topLevel(t.Name) || t.Status != pass) {
					n[t.Status] = append(n[t.Status], t.Name)
				}
			}
			status := bin.Status
			if bin.Detail != "" {
				status += ": " + bin.Detail
			}
			fmt.Fprintf(&b, "| %s | %s | %.1f | %s | %s | %d |\n", bin.Binary, mdCell(status), bin.Seconds,
				mdCell(strings.Join(n[pass], ", ")), mdCell(strings.Join(n[fail], ", ")), len(n[skip]))
		}
		for _, t := range c.Tests {
			switch {
			case t.Status == fail:
				fmt.Fprintf(&b, "\nFAILED %s %s: %s\n", t.Binary, t.Name, t.Detail)
			case t.Status == skip && !c.fake:
				fmt.Fprintf(&b, "\nSKIPPED (a failure on a GPU) %s %s: %s\n", t.Binary, t.Name, t.Detail)
			}
		}
	}
	if len(rs) > 0 && c.bench != nil {
		fmt.Fprintf(&b, "\n## Figures\n")
		if c.fake {
			fmt.Fprintf(&b, "\n(%s.)\n", fakeNote)
		}
		printCaseTable(&b, rs, c.benchRun)
		printSweep(&b, rs)
		printUVMTables(&b, rs)
		printCalibration(&b, rs)
		if len(c.skipped) > 0 {
			fmt.Fprintf(&b, "\nNot run (the deadline): %s\n", strings.Join(c.skipped, ", "))
		}
	}
	for _, ex := range c.Examples {
		fmt.Fprintf(&b, "\n## Example %s %s: %s (%.1f s)\n\n```\n%s\n```\n", ex.Name, strings.Join(ex.Args, " "), ex.Status, ex.Seconds, ex.Output)
	}
	return b.String()
}

// summary counts the checks by status.
func (c *check) summary() string {
	n := map[string]int{}
	for _, ct := range c.Checks {
		n[ct.Status]++
	}
	return fmt.Sprintf("%d checks passed, %d failed, %d N/A", n[pass], n[fail], n[na])
}

// mdCell keeps a table cell on one line, its pipes escaped.
func mdCell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", "; ")
}

// printCaseTable writes the results of the cases of group gpu (the cuda and batch suites), one
// row per case and allocator or method, its metrics in one cell.
func printCaseTable(w io.Writer, rs []result, run []benchCase) {
	fmt.Fprintf(w, "\n### CUDA suites (pinned pool, copies, device heap, copy engine)\n\n| case | impl | figures |\n|---|---|---|\n")
	for _, bc := range run {
		if bc.group != "gpu" {
			continue
		}
		var impls []string
		cells := map[string][]string{}
		for _, r := range rs {
			if r.Case != bc.name {
				continue
			}
			if _, ok := cells[r.Impl]; !ok {
				impls = append(impls, r.Impl)
			}
			v := fmt.Sprintf("%s %.3g %s", r.Metric, r.Value, r.Unit)
			switch {
			case r.Metric == "error":
				v = "error: " + r.Note
			case r.Unit == "ns":
				v = r.Metric + " " + fmtNs(r.Value)
			}
			cells[r.Impl] = append(cells[r.Impl], v)
		}
		for _, im := range impls {
			fmt.Fprintf(w, "| %s | %s | %s |\n", bc.name, im, mdCell(strings.Join(cells[im], ", ")))
		}
	}
}
