// Command bench compares pinmalloc with the allocators a Go program could use instead:
// mimalloc and glibc malloc (native C, timed inside C), make([]byte) with the garbage
// collector counted, a sync.Pool of byte slices, and pinning each buffer with its own
// mmap+mlock. It measures fixed-size alloc+free pairs, size-mixed churn on one and two
// goroutines, producer/consumer frees, churn over 10^4 to 10^6 (-maxlive: 10^7) live blocks,
// the goroutine-safe pool's scaling over GOMAXPROCS against a CPU-bound control, a
// serving-like trace of committed against live bytes and huge objects in a fixed-capacity
// pool, checks the project's targets and writes <out>/<name>.json plus SVG plots. Allocators
// are measured together in rounds (interleave.go), beside null allocators that measure the
// Go and C loops themselves, whose cost the harness-adjusted figures take off (adjust.go).
//
// Usage (bench is a module of its own: run it from bench/, or build it there):
//
//	go run . [-quick] [-cases REGEXP] [-impls REGEXP] [-maxlive N] [-name NAME] [-out DIR] [-gpu]
//	         [-strict]
//	go run . -replay FILE [-out DIR]     replay an allocation trace (replay.go)
//	go run . -record FILE                record the serving trace through a traced pool
//	go run . -gpucheck DIR [-quick]      the GPU check (gpucheck.go; scripts/gpucheck)
//	go run . -commit [-quick] [-out DIR] the pinning suite alone (commit.go), GPU or fake driver
//
// It checks the memlock limit once, up front (memlock.go): below what the suite locks,
// pinmalloc runs on pageable memory, labelled so. mimalloc is loaded at run time from
// libmimalloc.so.2 where installed (mimalloc.go), glibc's malloc from libc.so.6 (glibc.go);
// the run names what it found, and with CGO_ENABLED=0 both are skipped. Their held figures are
// the process's, so their footprint cases (larson, replay) run in a fresh child process, this
// program again (cchild.go). Results and plots go to $TMPDIR/pinmalloc-bench-$USER unless -out
// names a folder (the project's own: -out results). -gpu adds the CUDA competitors and cases
// when a suite is compiled in (gpu.go). -uvm runs the UVM tier suite alone (uvm.go), on the GPU
// or, without a driver, on the fake one.
//
// It exits 1 when an allocator failed on a case; a MISSED target fails the run only under
// -strict (a machine may be unable to meet a target, as CI's unprivileged run cannot).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// config is what the flags decide.
type config struct {
	quick      bool
	target     time.Duration // time one repetition of a measurement should take
	reps       int           // rounds of a measurement (interleave reports their median, measure their mean)
	traceSteps int
	out, name  string
	replay     string // -replay: a trace to replay instead of the suite
	record     string // -record: where to write the serving trace, recorded
	maxLive    int    // live blocks of the largest churn case
	gpu        bool
	wide       bool           // -wide: no line is cut to defaultWidth (fit.go)
	uvm        bool           // run the UVM tier suite alone (uvm.go)
	gpucheck   string         // -gpucheck: the report's folder (gpucheck.go)
	bin        string         // -bin: the gpucheck's prebuilt binaries
	deadline   time.Duration  // -deadline: when the gpucheck ends
	caseLimit  time.Duration  // -case-limit: the longest a gpucheck case may run
	fake       bool           // -fake: the driver-needing suites run on the fake driver, GPU or not
	commit     bool           // run the pinning suite alone (commit.go)
	ucx        bool           // run the UCX suite alone (ucx.go)
	ucxRounds  int            // -ucx-rounds: its rounds (default 5, 3 with -quick)
	ucxLimit   time.Duration  // -ucx-step-limit: the longest one of its steps may run
	footprint  bool           // run the footprint suite alone (footprint_cuda.go)
	strict     bool           // -strict: a MISSED target fails the run (exitStatus)
	filter     *regexp.Regexp // cases to run
	implFilter *regexp.Regexp // allocators to run
}

func parseFlags() *config {
	cfg := &config{}
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run . [flags]   (in bench/, a module of its own)\n\n"+
			"Measures pinmalloc beside mimalloc, glibc, make([]byte), sync.Pool and mmap+mlock per buffer, in one\n"+
			"process, interleaved, and prints tables and targets (bench/main.go says how it measures).\n\n")
		flag.PrintDefaults()
	}
	quick := flag.Bool("quick", false, "short run, about a minute on 2 cores (a full run takes about two): 10 ms runs and 5 rounds instead of 20 ms and 7, a shorter trace")
	flag.StringVar(&cfg.out, "out", defaultOut(), "directory for the JSON results and SVG plots (the project's own are in bench/results)")
	flag.StringVar(&cfg.replay, "replay", "", "replay this allocation trace (pinned.Options.Trace) against every Go-side allocator instead of running the suite")
	flag.StringVar(&cfg.record, "record", "", "record the serving trace through a traced pool into this file and exit")
	flag.StringVar(&cfg.name, "name", "", "results name (default cpu-<cores>core, with -quick appended in quick mode)")
	flag.IntVar(&cfg.maxLive, "maxlive", defaultMaxLive, "live blocks of the largest churn case (10000, 100000, ... up to this; 10000000 adds half a minute to a minute and 3.5 GB resident)")
	flag.BoolVar(&cfg.gpu, "gpu", false, "add the CUDA suites compiled in (see gpu.go)")
	flag.BoolVar(&cfg.uvm, "uvm", false, "run only the UVM tier suite (uvm.go): on the GPU when a driver is found, else on the fake driver")
	flag.StringVar(&cfg.gpucheck, "gpucheck", "", "run the GPU check (gpucheck.go: GPU tests, examples, -gpu suites, targets) and write its report into this directory")
	flag.StringVar(&cfg.bin, "bin", ".gpu/bin", "-gpucheck: the folder of the prebuilt test binaries and examples (scripts/gpucheck build)")
	flag.DurationVar(&cfg.deadline, "deadline", 8*time.Minute, "-gpucheck: the run ends by then: a test binary or case still running is killed, one that cannot have its minimum is not started")
	flag.DurationVar(&cfg.caseLimit, "case-limit", time.Minute, "-gpucheck: a case of the suites still running after this long is killed and fails")
	flag.BoolVar(&cfg.fake, "fake", false, "-gpucheck, -uvm, -commit, -footprint: run on pinmalloc's fake driver even where a GPU and its driver are found (without a GPU they do anyway)")
	flag.BoolVar(&cfg.commit, "commit", false, "run only the pinning suite (commit.go): cost per GiB by commit workers, latency during a precommit; on the GPU when a driver is found, else on the fake driver")
	flag.BoolVar(&cfg.ucx, "ucx", false, "run only the UCX suite (ucx.go): package remote against ucx_perftest and Go net sockets, two processes on this host (UCX_TLS, default tcp on lo)")
	flag.IntVar(&cfg.ucxRounds, "ucx-rounds", 0, "-ucx: rounds of each row, the competitors interleaved (default 5, 3 with -quick)")
	flag.DurationVar(&cfg.ucxLimit, "ucx-step-limit", 0, "-ucx: a step (the registration, one size's puts and gets, the batch) still running after this long fails, timed out, and the next runs (default a minute a round, plus one)")
	flag.BoolVar(&cfg.footprint, "footprint", false, "run only the footprint suite (footprint_cuda.go): what each allocator holds for its live buffers, busy and idle, the CUDAHost pool beside the locked one, a device heap beside cuMemAllocAsync; on the GPU when a driver is found, else on the fake driver")
	flag.BoolVar(&cfg.strict, "strict", false, "exit 1 when a target reads MISSED (by default only an allocator's failure does: a machine may be unable to meet a target, which its \"why\" says); NOISY, UNMEASURED and N/A targets do not count")
	flag.BoolVar(&cfg.wide, "wide", false, "print tables and lines at their full width (by default a table wider than 120 columns is cut into narrower ones that repeat its first column, and longer lines are wrapped)")
	pattern := flag.String("cases", "", "run only the cases whose name matches this regular expression")
	implPattern := flag.String("impls", "", "run only the allocators whose name matches this regular expression")
	flag.Parse()
	cfg.quick = *quick
	cfg.target, cfg.reps, cfg.traceSteps = 20*time.Millisecond, 7, 5*wavePeriod
	if cfg.quick {
		cfg.target, cfg.reps, cfg.traceSteps = 10*time.Millisecond, 5, 2*wavePeriod
	}
	if cfg.name == "" && !cfg.uvm && cfg.gpucheck == "" { // -uvm and -gpucheck name theirs after the device
		cfg.name = fmt.Sprintf("cpu-%dcore", runtime.NumCPU())
		if cfg.quick {
			cfg.name += "-quick"
		}
	}
	var err error
	if cfg.filter, err = regexp.Compile(*pattern); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -cases:", err)
		os.Exit(2)
	}
	if cfg.implFilter, err = regexp.Compile(*implPattern); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -impls:", err)
		os.Exit(2)
	}
	return cfg
}

// suite is the state of one run.
type suite struct {
	cfg     *config
	impls   []impl
	nulls   []impl   // the null allocators, which measure the harness (null.go)
	ops     []uint32 // the mixed cases' sequence, shared by every allocator
	trace   *trace
	traces  []*traceResult
	results []result
	load    string // /proc/loadavg at the start
}

// result is one number measured for one allocator on one case.
type result struct {
	Case   string  `json:"case"`
	Impl   string  `json:"impl"`
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Note   string  `json:"note,omitempty"`
}

// allImpls lists the allocators under test, in the order of the table's columns.
func allImpls() []impl {
	return []impl{
		newPinmallocHeap(),
		newPinmallocPool(),
		newMimalloc(),
		newGlibc(),
		newGoMake(),
		newGoSyncPool(),
		newPercallMlock(),
		newTorchCachingHost(),
	}
}

// selected returns the allocators this run measures: those built that match -impls, and the
// null allocators that those name as their harness.
func (s *suite) selected() []impl {
	var out []impl
	need := map[string]bool{}
	for _, im := range s.impls {
		if im.skip == "" && s.cfg.implFilter.MatchString(im.name) {
			out = append(out, im)
			need[im.harness] = true
		}
	}
	for _, im := range s.nulls {
		if im.skip == "" && need[im.name] {
			out = append(out, im)
		}
	}
	return out
}

// foundLine says which C allocators were found and which are skipped, in one line.
func foundLine(ims []impl) string {
	var found, skipped []string
	for _, im := range ims {
		switch {
		case im.found != "":
			found = append(found, im.found)
		case im.skip != "":
			skipped = append(skipped, im.name+" "+im.skip)
		}
	}
	line := "bench: allocators: found " + strings.Join(found, ", ")
	if len(found) == 0 {
		line = "bench: allocators: no C allocator found"
	}
	if len(skipped) > 0 {
		line += "; " + strings.Join(skipped, "; ")
	}
	return line
}

// defaultOut is where results go without -out: a run's results are the machine's, not the
// source tree's, and the user's (another user's folder of that name may not be writable).
func defaultOut() string {
	name := strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	return filepath.Join(os.TempDir(), "pinmalloc-bench-"+name)
}

// width is the widest line the run prints (0: no limit).
func (cfg *config) width() int {
	if cfg.wide {
		return 0
	}
	return defaultWidth
}

func main() {
	if inFootprintChild() {
		os.Exit(cFootprintChild())
	}
	cfg := parseFlags()
	stdout, stderr := newFitWriter(os.Stdout, cfg.width()), newFitWriter(os.Stderr, cfg.width())
	if cfg.gpucheck != "" {
		os.Exit(gpucheck(cfg))
	}
	if cfg.ucx {
		os.Exit(ucxBench(cfg))
	}
	if !cfg.uvm && !cfg.commit { // those suites lock nothing of their own beyond the driver's
		hostMemory = checkMemlock()
		fmt.Fprintln(stderr, hostMemory.line())
	}
	if cfg.record != "" || cfg.replay != "" {
		var err error
		if cfg.record != "" {
			err = recordServing(cfg.record, cfg.traceSteps)
		} else {
			err = runReplay(cfg, allImpls(), cfg.replay)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	s := &suite{cfg: cfg, impls: allImpls(), nulls: nullImpls(), ops: mixedOps(), trace: newTrace(cfg.traceSteps)}
	if !cfg.uvm && !cfg.commit {
		fmt.Fprintln(stderr, foundLine(s.impls))
	}
	cs := cases(cfg.maxLive)
	if cfg.uvm {
		uvmCases, closeUVM := uvmOnly(cfg)
		defer closeUVM()
		s.impls, cs = nil, uvmCases
	} else if cfg.commit {
		commitCases, closeCommit := commitOnly(cfg)
		defer closeCommit()
		s.impls, cs = nil, commitCases
	} else if cfg.footprint {
		fpCases, host, closeFootprint := footprintOnly(cfg)
		defer closeFootprint()
		s.impls, cs = append(s.impls, host), fpCases
	} else if cfg.gpu {
		impls, extra, closeGPU := openGPUSuites()
		defer closeGPU()
		s.impls = append(s.impls, impls...)
		cs = append(cs, extra...)
	}
	var run []benchCase
	for _, c := range cs {
		if cfg.filter.MatchString(c.name) {
			run = append(run, c)
		}
	}
	s.load = loadAvg()
	ims := s.selected()
	fmt.Fprintf(stderr, "bench: %d cases, %d allocators (null ones included), %s mode, GOMAXPROCS=%d, load %s\n",
		len(run), len(ims), map[bool]string{true: "quick", false: "full"}[cfg.quick], runtime.GOMAXPROCS(0), s.load)
	var l1 float64
	if _, err := fmt.Sscan(s.load, &l1); err == nil && l1 > 0.5 {
		fmt.Fprintln(stderr, "bench: warning: the machine is busy; timings will be noisy (a target whose rounds disagree reads NOISY)")
	}
	start := time.Now()
	for i, c := range run {
		t0 := time.Now()
		var line []string
		if c.custom != nil {
			rs := c.custom(s)
			s.results = append(s.results, rs...)
			line = append(line, fmt.Sprintf("%d results", len(rs)))
		} else {
			rs := s.run(c, ims)
			s.results = append(s.results, rs...)
			for _, im := range ims {
				if mine := resultsOf(rs, im.name); len(mine) > 0 {
					line = append(line, im.name+" "+headline(c.group, mine))
				}
			}
		}
		fmt.Fprintf(stderr, "[%2d/%d] %-13s %s (%.1fs)\n", i+1, len(run), c.name, strings.Join(line, ", "), time.Since(t0).Seconds())
	}
	s.results = append(s.results, hugeMax(s.results)...)
	s.results = append(s.results, adjusted(s.results, ims)...)
	targets := evaluateTargets(s.results)
	if cfg.uvm {
		targets = uvmTargetsOnly(targets)
	}
	if cfg.commit {
		targets = commitTargetsOnly(targets)
	}
	printTables(stdout, s, run)
	printAdjusted(stdout, s, ims, run)
	printSweep(stdout, s.results)
	printUVMTables(stdout, s.results)
	printCalibration(stdout, s.results)
	printCommitTables(stdout, s.results)
	printFootprint(stdout, s.results)
	printFootprintCUDA(stdout, s.results)
	printTargets(stdout, targets)
	stdout.Flush()
	fmt.Fprintf(os.Stderr, "bench: done in %.0fs\n", time.Since(start).Seconds())
	if cfg.uvm {
		if err := writeUVMTables(s, targets); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if err := s.write(targets); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if status := exitStatus(os.Stderr, cfg, s.results, targets); status != 0 {
		os.Exit(status)
	}
}

// machine describes where the results were taken.
type machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	Go     string `json:"go"`
	Date   string `json:"date"`
	Commit string `json:"commit"`
	Mode   string `json:"mode"`
	// Load is /proc/loadavg when the run began: other work on the machine skews the timings.
	Load string `json:"load"`
	// Memory says when pinmalloc ran on pageable memory (a low memlock limit: memlock.go).
	Memory string `json:"memory,omitempty"`
	// Driver says when -gpu's suites ran on pinmalloc's fake driver (gpu.go).
	Driver string `json:"driver,omitempty"`
}

// thisMachine describes the machine.
func thisMachine(quick bool, load string) machine {
	m := machine{CPU: "unknown", Cores: runtime.NumCPU(), Go: runtime.Version(),
		Date: time.Now().UTC().Format(time.RFC3339), Commit: "unknown", Mode: "full", Load: load,
		Memory: hostMemory.memoryNote(), Driver: gpuDriver}
	if quick {
		m.Mode = "quick"
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(b))
	}
	return m
}

// loadAvg returns the first three fields of /proc/loadavg, or "unknown".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// write stores the results JSON and the plots under cfg.out.
func (s *suite) write(targets []target) error {
	if err := os.MkdirAll(s.cfg.out, 0o755); err != nil {
		return err
	}
	skipped := map[string]string{}
	for _, im := range s.impls {
		if im.skip != "" {
			skipped[im.name] = im.skip
		}
	}
	doc := struct {
		Machine machine           `json:"machine"`
		Results []result          `json:"results"`
		Targets []target          `json:"targets"`
		Skipped map[string]string `json:"skipped,omitempty"`
	}{thisMachine(s.cfg.quick, s.load), s.results, targets, skipped}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	path := filepath.Join(s.cfg.out, s.cfg.name+".json")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return err
	}
	files, err := writePlots(s)
	names := []string{filepath.Base(path)}
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	w := newFitWriter(os.Stderr, s.cfg.width())
	fmt.Fprintf(w, "bench: wrote the results and %d plot(s) into %s: %s\n", len(files), s.cfg.out, strings.Join(names, ", "))
	w.Flush()
	return err
}
