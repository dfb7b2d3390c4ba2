package main

// The GPU check's tests step (gpucheck.go): every test binary of the manifest run through
// test2json, every test and subtest recorded, and the rule that a GPU test run on a GPU either
// passes or fails the check (issue 26: no skip, no test left out, counts a reviewer can trust).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// test2jsonName is the file in BIN of Go's cmd/test2json, which scripts/gpucheck build builds:
// the test binaries run under it with -test.v=test2json, so that every test and subtest comes
// back as a JSON event rather than as lines of -test.v text to guess at.
const test2jsonName = "test2json"

// testBinary is one line of BIN/tests.txt: a test binary, its package's folder and the GPU
// tests it holds (what `-test.list 'CUDA|GPU'` listed when it was built; none for a binary
// built only for the fake-driver twins).
type testBinary struct {
	file, dir string
	gpuTests  []string
}

// readManifest reads BIN/tests.txt: "FILE DIR TESTS" per line, DIR relative to the repository
// root, TESTS the binary's GPU tests separated by commas, or "-" for none.
func readManifest(bin string) ([]testBinary, error) {
	name := filepath.Join(bin, "tests.txt")
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("no test binaries (%w): build them first with scripts/gpucheck build", err)
	}
	var out []testBinary
	for i, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 0:
			continue
		case len(f) != 3:
			return nil, fmt.Errorf("%s line %d: %q, want FILE DIR TESTS (rebuild with scripts/gpucheck build)", name, i+1, l)
		}
		tb := testBinary{file: f[0], dir: f[1]}
		if f[2] != "-" {
			tb.gpuTests = strings.Split(f[2], ",")
		}
		out = append(out, tb)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s lists no test binary", name)
	}
	return out, nil
}

// testResult is one test or subtest (its name has a slash) of a test binary.
type testResult struct {
	Binary  string  `json:"binary"`
	Name    string  `json:"name"`
	Status  string  `json:"status"` // PASS, FAIL or SKIP
	Seconds float64 `json:"seconds"`
	Detail  string  `json:"detail,omitempty"` // a skip's reason, a failure's first line logged
}

// binResult is one test binary's run.
type binResult struct {
	Binary  string  `json:"binary"`
	Dir     string  `json:"dir"`
	Status  string  `json:"status"`
	Seconds float64 `json:"seconds"`
	Detail  string  `json:"detail,omitempty"`
}

// testFigure is a figure a GPU test recorded with fakecuda.Figure, graded by the check.
type testFigure struct {
	Binary string  `json:"binary"`
	Test   string  `json:"test"`
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	AtMost bool    `json:"at_most,omitempty"`
	Limit  float64 `json:"limit"`
}

// contractFirst orders the manifest so that the binary holding the contract tests runs first.
func contractFirst(bins []testBinary) {
	holds := func(tb testBinary) bool {
		for _, name := range tb.gpuTests {
			for _, ct := range contractTests {
				if name == ct.gpu {
					return true
				}
			}
		}
		return false
	}
	for i, tb := range bins {
		if holds(tb) {
			copy(bins[1:i+1], bins[:i])
			bins[0] = tb
			return
		}
	}
}

// childEnv is the environment of the test binaries, the examples and the bench's workers: this
// process's, which on the fake names the fake as the driver (cuda.LibraryEnv), so that a GPU test
// finds no GPU there even on a machine that has one (-fake), and skips.
func (c *check) childEnv() []string { return os.Environ() }

// binaryLimit is the longest a test binary may run.
const binaryLimit = 3 * time.Minute

// runTests runs every test binary of the manifest with the GPU pattern, under test2json, the one
// with the contract tests first, each within its limit and the tests' share of the run.
func (c *check) runTests() (string, error) {
	bins, err := readManifest(c.cfg.bin)
	if err != nil {
		return "", err
	}
	t2j, err := filepath.Abs(filepath.Join(c.cfg.bin, test2jsonName))
	if err == nil {
		_, err = os.Stat(t2j)
	}
	if err != nil {
		return "", fmt.Errorf("no %s in %s (%w): rebuild with scripts/gpucheck build", test2jsonName, c.cfg.bin, err)
	}
	pattern := gpuTestPattern
	if c.fake { // the GPU tests skip (no GPU); the fake-driver twins of the contract tests run
		pattern = fakeTestPattern
	}
	contractFirst(bins)
	c.manifest = bins
	env := c.childEnv()
	var failed []string
	for _, tb := range bins {
		left := c.until(testsShare, 0)
		br := binResult{Binary: tb.file, Dir: tb.dir}
		if left < c.floor() {
			br.Status, br.Detail = fail, "not run: the tests' share of the deadline is spent"
			c.Binaries = append(c.Binaries, br)
			failed = append(failed, tb.file+" (not run)")
			continue
		}
		limit := min(left, binaryLimit)
		path, err := filepath.Abs(filepath.Join(c.cfg.bin, tb.file))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(c.log, "--- %s -test.run '%s' (in %s, at most %v)\n", tb.file, pattern, tb.dir, limit.Round(time.Second))
		var events bytes.Buffer
		secs, err := c.runEvents(limit+10*time.Second, tb.dir, env, &events, t2j, path,
			"-test.v=test2json", "-test.run", pattern, "-test.count=1", "-test.timeout", limit.Round(time.Second).String())
		br.Seconds = secs
		ts, figs, perr := parseEvents(tb.file, events.Bytes())
		c.Tests = append(c.Tests, ts...)
		c.Figures = append(c.Figures, figs...)
		br.Status = pass
		for _, t := range ts {
			if t.Status == fail {
				br.Status = fail
			}
		}
		switch {
		case err != nil:
			br.Status, br.Detail = fail, err.Error()
		case perr != nil:
			br.Status, br.Detail = fail, perr.Error()
		case len(ts) == 0:
			br.Status, br.Detail = fail, "no test ran"
		}
		if br.Status == fail {
			failed = append(failed, tb.file)
		}
		c.Binaries = append(c.Binaries, br)
		c.rewrite()
	}
	n := countTests(c.Tests)
	detail := fmt.Sprintf("%d binaries, pattern '%s': %d tests and subtests passed, %d failed, %d skipped", len(bins), pattern, n[pass], n[fail], n[skip])
	if len(failed) > 0 {
		return detail, fmt.Errorf("failed: %s", strings.Join(failed, ", "))
	}
	return detail, nil
}

// skip is a test's status when it skipped.
const skip = "SKIP"

// countTests counts tests and subtests by status.
func countTests(ts []testResult) map[string]int {
	n := map[string]int{}
	for _, t := range ts {
		n[t.Status]++
	}
	return n
}

// runLogged runs a program in dir with env, its output copied to the log, killed after
// limit; it returns the output and the seconds it ran.
func (c *check) runLogged(limit time.Duration, dir string, env []string, prog string, args ...string) (string, float64, error) {
	var buf bytes.Buffer
	secs, err := c.run(limit, dir, env, io.MultiWriter(&buf, c.logFile), prog, args...)
	return buf.String(), secs, err
}

// runEvents runs a test binary (prog, args) in dir and Go's test2json (t2j) beside it, both
// children of this process, the binary's output piped into test2json (test2json -t -p DIR, which
// reads it on its standard input): the JSON events go to events, the tests' output to the log as
// text. The binary is started by this process, not by test2json, so that it dies with the check
// (dieWithParent) and is killed at limit.
func (c *check) runEvents(limit time.Duration, dir string, env []string, events io.Writer, t2j, prog string, args ...string) (float64, error) {
	w := &eventLog{log: c.logFile}
	conv := exec.Command(t2j, "-t", "-p", dir)
	conv.Dir, conv.Env = dir, env
	conv.Stdout, conv.Stderr = io.MultiWriter(events, w), c.logFile
	conv.SysProcAttr = dieWithParent()
	in, err := conv.StdinPipe()
	if err == nil {
		err = startChild(conv)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Base(t2j), err)
	}
	secs, err := c.run(limit, dir, env, in, prog, args...)
	in.Close()
	if cerr := conv.Wait(); cerr != nil && err == nil {
		err = fmt.Errorf("%s: %w", filepath.Base(t2j), cerr)
	}
	w.flush()
	return secs, err
}

// run runs a program in dir with env, its output and errors to out, killed after limit.
func (c *check) run(limit time.Duration, dir string, env []string, out io.Writer, prog string, args ...string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = dieWithParent()
	cmd.Stdout, cmd.Stderr = out, out
	t0 := time.Now()
	err := startChild(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	secs := time.Since(t0).Seconds()
	if ctx.Err() != nil {
		err = fmt.Errorf("killed after %v: %w", limit.Round(time.Second), ctx.Err())
	} else if err != nil {
		err = fmt.Errorf("%s: %w", filepath.Base(prog), err)
	}
	return secs, err
}

// event is one line of test2json's output.
type event struct {
	Action  string
	Test    string
	Output  string
	Elapsed float64
}

// eventLog writes the Output of each JSON event written to it, and any other line as it is.
type eventLog struct {
	log  io.Writer
	line []byte
}

func (w *eventLog) Write(p []byte) (int, error) {
	for _, b := range p {
		w.line = append(w.line, b)
		if b == '\n' {
			w.flush()
		}
	}
	return len(p), nil
}

// flush writes the line held.
func (w *eventLog) flush() {
	if len(w.line) == 0 {
		return
	}
	var e event
	if json.Unmarshal(w.line, &e) == nil && e.Action != "" {
		if e.Action == "output" {
			io.WriteString(w.log, e.Output)
		}
	} else {
		w.log.Write(w.line)
	}
	w.line = w.line[:0]
}

// parseEvents reads every test's and subtest's result from test2json's events, and the figures
// the tests recorded (fakecuda.Figure). A skip's or a failure's detail is the first line the
// test logged (its own, else its first failing or skipping subtest's); a test that started and
// has no result (the binary crashed or was killed) FAILS with "did not finish". A line that is
// not an event is an error: test2json writes nothing else.
func parseEvents(binary string, out []byte) ([]testResult, []testFigure, error) {
	var ts []testResult
	var figs []testFigure
	index := map[string]int{}
	logs := map[string]string{}
	var bad string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			if bad == "" {
				bad = string(line)
			}
			continue
		}
		if e.Test == "" {
			continue
		}
		switch e.Action {
		case "run":
			if _, ok := index[e.Test]; !ok {
				index[e.Test] = len(ts)
				ts = append(ts, testResult{Binary: binary, Name: e.Test, Status: fail, Detail: "did not finish"})
			}
		case "output":
			text := strings.TrimSpace(e.Output)
			if strings.Contains(text, fakecuda.FigureTag) {
				if name, v, unit, atMost, limit, err := fakecuda.ParseFigure(text); err == nil {
					figs = append(figs, testFigure{binary, e.Test, name, v, unit, atMost, limit})
				}
				continue
			}
			if logs[e.Test] == "" && text != "" && !strings.HasPrefix(text, "=== ") && !strings.HasPrefix(text, "--- ") {
				logs[e.Test] = text
			}
		case "pass", "fail", "skip":
			i, ok := index[e.Test]
			if !ok {
				index[e.Test] = len(ts)
				i = len(ts)
				ts = append(ts, testResult{Binary: binary, Name: e.Test})
			}
			ts[i].Status, ts[i].Seconds, ts[i].Detail = strings.ToUpper(e.Action), e.Elapsed, ""
		}
	}
	for i := range ts {
		t := &ts[i]
		if t.Status == pass {
			continue
		}
		if l := logs[t.Name]; l != "" {
			t.Detail = strings.TrimSpace(strings.TrimPrefix(t.Detail+"; "+l, "; "))
			continue
		}
		for _, sub := range ts { // the first subtest that did not pass says why
			if sub.Status != pass && strings.HasPrefix(sub.Name, t.Name+"/") && logs[sub.Name] != "" {
				t.Detail = strings.TrimSpace(strings.TrimPrefix(t.Detail+"; "+sub.Name+": "+logs[sub.Name], "; "))
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return ts, figs, fmt.Errorf("reading the events of %s: %w", binary, err)
	}
	if bad != "" {
		return ts, figs, fmt.Errorf("%s: not a test2json event: %q", binary, shorten(bad))
	}
	return ts, figs, nil
}

// topLevel reports whether a test's name is a top-level test's.
func topLevel(name string) bool { return !strings.Contains(name, "/") }

// gpuTestsCheck is the verdict on the tests, with the status it gives: none failed, every
// binary ran clean and, on a GPU, every GPU test of the manifest ran and passed, and nothing
// (test or subtest) skipped but for a capability the check saw the device lack: a skip on a GPU
// machine is a test that did not test, and fails the check with its reason. On the fake driver
// the GPU tests cannot run (no GPU): the check is N/A there, unless something failed.
func (c *check) gpuTestsCheck() (status, detail string) {
	n := countTests(c.Tests)
	binsOK := len(c.Binaries) > 0
	for _, b := range c.Binaries {
		binsOK = binsOK && b.Status == pass
	}
	detail = fmt.Sprintf("%d binaries; tests and subtests: %d passed, %d failed, %d skipped", len(c.Binaries), n[pass], n[fail], n[skip])
	ok := binsOK && n[fail] == 0
	if !binsOK && len(c.Binaries) == 0 {
		detail += "; no test binary ran"
	}
	if c.fake {
		if !ok {
			return fail, detail + " (on the fake driver)"
		}
		return na, detail + " (no GPU: the GPU tests skip on the fake driver; the fake-driver twins of the contract tests run)"
	}
	result := map[string]testResult{}
	for _, t := range c.Tests {
		result[t.Binary+" "+t.Name] = t
	}
	var notRun, skips, lacked []string
	want := 0
	for _, tb := range c.manifest {
		for _, name := range tb.gpuTests {
			want++
			if t, found := result[tb.file+" "+name]; !found || t.Status != pass && t.Status != fail && t.Status != skip {
				notRun = append(notRun, tb.file+" "+name)
			}
		}
	}
	for _, t := range c.Tests {
		if t.Status != skip {
			continue
		}
		if cp, isLacked, why := c.lackedBy(t); isLacked {
			lacked = append(lacked, t.Binary+" "+t.Name+" ("+cp+")")
		} else {
			skips = append(skips, fmt.Sprintf("%s %s skipped (%s): %s", t.Binary, t.Name, why, t.Detail))
		}
	}
	detail += fmt.Sprintf("; %d GPU tests in the manifest, %d not run", want, len(notRun))
	if want == 0 {
		ok = false
		detail += "; the manifest lists no GPU test"
	}
	if len(notRun) > 0 {
		ok = false
		detail += " (" + strings.Join(notRun, ", ") + ")"
	}
	if len(lacked) > 0 {
		detail += "; N/A for a capability the device lacks (see capability/...): " + strings.Join(lacked, ", ")
	}
	if len(skips) > 0 {
		ok = false
		detail += "; a skip on a GPU fails: " + strings.Join(skips, "; ")
	}
	return map[bool]string{true: pass, false: fail}[ok], detail
}
