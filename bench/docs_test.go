package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// GPU figures in the docs: a bandwidth that is no target (GB/s not after ≥, ≤, >= or "at
// least"), or a figure on a line that names a GPU.
var (
	docBandwidth  = regexp.MustCompile(`(\S+\s+)?[0-9][0-9.]*(–[0-9.]+)? GB/s`)
	docGPUFigure  = regexp.MustCompile(`\b(H100|H200|A100)\b.*\b[0-9][0-9.]* ?(GB/s|µs|ns|ms)\b|\b[0-9][0-9.]* ?(GB/s|µs|ns|ms)\b.*\b(H100|H200|A100)\b`)
	docReportRef  = regexp.MustCompile(`results/([A-Za-z0-9._-]+\.md)`)
	docFigureNums = regexp.MustCompile(`([0-9][0-9.]*)(?:–([0-9][0-9.]*))? ?(?:GB/s|µs|ns|ms|×)`)
	// docHostOnly: a bandwidth on a unit that says it was measured on a machine without a GPU
	// (host memory, loopback or shared memory between processes) is no GPU figure.
	docHostOnly = regexp.MustCompile(`\b(2-vCPU|build machine|no GPU)\b`)
)

// gpuFigureProblems checks docs (name to text) against the GPU reports committed (file name to
// the markdown of a report of the GPU check made on a GPU): a paragraph or table that quotes a
// GPU figure must name a committed report (results/NAME.md) and quote each of its figures as one
// such report it names gives it; docs/bench.md's section of unreproduced history is the one place
// other figures are kept.
func gpuFigureProblems(docs, reports map[string]string) []string {
	var problems []string
	for doc, text := range docs {
		history := false
		line := 0
		for _, block := range strings.Split(text, "\n\n") {
			first := line + 1
			line += strings.Count(block, "\n") + 2
			if strings.HasPrefix(strings.TrimSpace(block), "## ") {
				heading := strings.TrimSpace(block)
				history = filepath.Base(doc) == "bench.md" && strings.Contains(heading[:strings.IndexByte(heading+"\n", '\n')], "unreproduced")
			}
			if history {
				continue
			}
			for _, u := range figureUnits(block) {
				problems = append(problems, checkFigures(doc+":"+strconv.Itoa(first), u.text, u.refs, reports)...)
			}
		}
	}
	return problems
}

// figureUnit is a paragraph, joined into one line, or a table's row, with the text of the
// table's header row, which may name the report its rows quote.
type figureUnit struct{ text, refs string }

// figureUnits splits a block of a doc into the units whose figures are checked together.
func figureUnits(block string) []figureUnit {
	lines := strings.Split(strings.TrimSpace(block), "\n")
	table := true
	for _, l := range lines {
		table = table && strings.HasPrefix(strings.TrimSpace(l), "|")
	}
	if !table {
		para := strings.Join(strings.Fields(block), " ")
		return []figureUnit{{para, para}}
	}
	var units []figureUnit
	for _, row := range lines {
		units = append(units, figureUnit{row, lines[0] + " " + row})
	}
	return units
}

// checkFigures checks one unit: if it quotes a GPU figure, refs must name a committed report and
// each figure must be one of a report named.
func checkFigures(where, text, refs string, reports map[string]string) []string {
	quotes := docGPUFigure.MatchString(text)
	for _, m := range docBandwidth.FindAllString(text, -1) {
		if docHostOnly.MatchString(text) {
			break
		}
		if !strings.HasPrefix(m, "≥") && !strings.HasPrefix(m, "≤") && !strings.Contains(m, ">=") && !strings.HasPrefix(m, "least") {
			quotes = true
		}
	}
	if !quotes {
		return nil
	}
	where += ": " + shorten(strings.TrimSpace(text))
	var named []string
	var problems []string
	for _, ref := range docReportRef.FindAllStringSubmatch(refs, -1) {
		if r, ok := reports[ref[1]]; ok {
			named = append(named, r)
		} else {
			problems = append(problems, where+": names "+ref[1]+", which is no committed report of the GPU check on a GPU")
		}
	}
	if len(named) == 0 {
		return append(problems, where+": quotes a GPU figure and names no committed report (bench/results/NAME.md)")
	}
	for _, m := range docFigureNums.FindAllStringSubmatch(text, -1) {
		for _, n := range m[1:3] {
			if n = strings.TrimRight(n, "."); n != "" && !anyContains(named, n) {
				problems = append(problems, where+": "+n+" is not a figure of the report it names")
			}
		}
	}
	return problems
}

// anyContains reports whether any of texts holds s.
func anyContains(texts []string, s string) bool {
	for _, t := range texts {
		if strings.Contains(t, s) {
			return true
		}
	}
	return false
}

// gpuReports reads the reports of the GPU check made on a GPU committed under results/.
func gpuReports(t *testing.T) map[string]string {
	t.Helper()
	reports := map[string]string{}
	files, _ := filepath.Glob(filepath.Join("results", "*.md"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(string(b), "# pinmalloc GPU check:") && !strings.Contains(string(b), fakeNote) {
			reports[filepath.Base(f)] = string(b)
		}
	}
	return reports
}

// TestDocsQuoteNoGPUFigureWithoutAReport: README.md and docs/*.md quote a GPU figure only with
// the report of the GPU check it comes from, committed under bench/results and named on the
// line, and as that report gives it; docs/bench.md's history of unreproduced figures is the one
// place others are kept, so labelled.
func TestDocsQuoteNoGPUFigureWithoutAReport(t *testing.T) {
	docs := map[string]string{}
	files, _ := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	for _, f := range append(files, filepath.Join("..", "README.md")) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = string(b)
	}
	for _, p := range gpuFigureProblems(docs, gpuReports(t)) {
		t.Error(p)
	}
}

// TestGPUFigureRule: the rule holds whether or not a report is committed: a figure with no
// report, one naming a report not committed (or the fake's), and one the report does not give
// are each refused; a target, the history and a figure quoted from its report pass.
func TestGPUFigureRule(t *testing.T) {
	reports := map[string]string{"nvidia-h200.md": "# pinmalloc GPU check: NVIDIA H200\n| uvm-evict-gbps | PASS | 256KiB 47.7, 2MiB 51.7 |\ncuda-hostalloc 5.16 µs, pinmalloc-pool 46.2 ns"}
	for doc, want := range map[string]int{
		"eviction reaches 48–51 GB/s on the H100.":                                                        1,
		"the pool's pair: 46.2 ns against 5.16 µs (H200, bench/results/nvidia-h200.md)":                   0,
		"eviction 47.7–51.7 GB/s (bench/results/nvidia-h200.md)":                                          0,
		"eviction 47.7–52.4 GB/s (bench/results/nvidia-h200.md)":                                          1,
		"eviction 47.7 GB/s (bench/results/fake-driver.md)":                                               1,
		"evict and restore ≥ 48 GB/s at every block size":                                                 0,
		"## History: unreproduced\n\n| gather kernel on an H100 | 52.4 GB/s |":                            -1,
		"| what (H200, bench/results/nvidia-h200.md) | measured |\n|---|---|\n| evict | 47.7–51.7 GB/s |": 0,
		"| what (H200) | measured |\n|---|---|\n| evict | 47.7–51.7 GB/s |":                               1,
		"both ways at once ≥\n80 GB/s":                                                                    0,
		"over shared memory on the 2-vCPU build machine, 2.0–9.5 GB/s":                                    0,
		"on the 2-vCPU build machine, the H100 gave 52.4 GB/s":                                            1,
	} {
		name := "../docs/uvm.md"
		if want < 0 {
			name, want = "../docs/bench.md", 0
		}
		if got := gpuFigureProblems(map[string]string{name: doc}, reports); (len(got) > 0) != (want > 0) {
			t.Errorf("%q: %d problems %q, want %d", doc, len(got), got, want)
		}
	}
}
