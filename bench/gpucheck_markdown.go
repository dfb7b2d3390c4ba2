package main

// The GPU check's report in markdown (gpucheck.go): NAME.md.

import (
	"fmt"
	"io"
	"strings"
	"time"
)

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
	fmt.Fprintf(&b, "| run | commit %s, %s, %s mode, %.0f s (deadline %.0f s, at most %.0f s a case)%s |\n", m.Commit, m.Date, m.Mode, time.Since(c.start).Seconds(),
		c.cfg.deadline.Seconds(), c.cfg.caseLimit.Seconds(), c.casesNote())
	table := func(title, kind string) {
		n := 0
		for _, ct := range c.Checks {
			if ct.Kind == kind {
				n++
			}
		}
		if n == 0 {
			return
		}
		fmt.Fprintf(&b, "\n## %s\n\n| check | status | measured | want |\n|---|---|---|---|\n", title)
		for _, ct := range c.Checks {
			if ct.Kind == kind {
				fmt.Fprintf(&b, "| %s | **%s** | %s | %s |\n", ct.Name, ct.Status, mdCell(ct.Detail), mdCell(ct.Want))
			}
		}
	}
	table("Targets (graded on a GPU: the GPU suites' and the GPU tests' figures)", "target")
	table("Runs", "run")
	fmt.Fprintf(&b, "\n## Not graded\n\n%s\n", notGraded)
	table("Measured here, graded elsewhere", "other")
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
	if len(c.Cases) > 0 || len(c.skipped) > 0 {
		fmt.Fprintf(&b, "\n## Cases, in the order run\n\n| case | status | seconds | results | detail |\n|---|---|---|---|---|\n")
		for _, cr := range c.Cases {
			fmt.Fprintf(&b, "| %s | %s | %.1f | %d | %s |\n", cr.Name, cr.Status, cr.Seconds, cr.Results, mdCell(shorten(cr.Detail)))
		}
		for _, name := range c.skipped {
			fmt.Fprintf(&b, "| %s | not run | | | the deadline |\n", name)
		}
		fmt.Fprintf(&b, "\nNot in the check's plan: uvm-oversub at 1.5x and 3x (%s).\n", notInPlan("uvm-oversub/zipf/lru/3x"))
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

// notGraded says what the check measures or logs and does not grade, and why.
const notGraded = "Every target of the GPU suites and every figure a GPU test records (fakecuda.Figure) is graded above. " +
	"Not graded here: the CPU suite's targets (against mimalloc, sync.Pool, make, mmap+mlock per buffer: bench's CPU run grades them, " +
	"docs/bench.md); figures the GPU tests only log, each graded elsewhere: TestCUDARegisteredBandwidth asserts pinned copies at " +
	"3x pageable itself, TestGPUAcquireRelease's Acquire+Release pair is the suite's uvm-acquire-resident, TestCUDAParallelPin's " +
	"pinning per GiB is the pinning suite's pin-1gib-ms; and pool-scaling-16g on fewer than 16 cores (N/A above)."

// casesNote says when -cases limited the plan.
func (c *check) casesNote() string {
	if c.cfg.filter == nil || c.cfg.filter.String() == "" {
		return ""
	}
	return "; cases limited to -cases " + c.cfg.filter.String()
}

// summary counts the checks by status.
func (c *check) summary() string {
	n := map[string]int{}
	for _, ct := range c.Checks {
		n[ct.Status]++
	}
	s := fmt.Sprintf("%d checks passed, %d failed, %d N/A", n[pass], n[fail], n[na])
	if n[noisy] > 0 {
		s += fmt.Sprintf(", %d too noisy to grade (NOISY: retake on a quiet machine)", n[noisy])
	}
	return s
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
