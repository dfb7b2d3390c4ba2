package main

// The GPU check's bench step (gpucheck.go): the suites' cases run one at a time in a worker
// process, this program again with workerEnv set, which opens the suites once, says its plan and
// then runs each case the check names on its standard input, answering with the case's results
// on its standard output, one JSON line each. The check times every case: one still running at
// its limit (-case-limit, or the deadline if sooner) is killed with its worker, recorded as an
// error, and the next case gets a new worker. So a case that hangs in the driver, or takes ten
// times what it should, costs its own limit and nothing else, and the report, rewritten after
// every case, keeps every figure taken before it.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// workerEnv set in the environment makes -gpucheck the bench worker.
const workerEnv = "PINMALLOC_GPUCHECK_WORKER"

// workerMsg is one line a worker writes: first its plan (or why it has none), then one per case.
type workerMsg struct {
	Plan     []planCase `json:"plan,omitempty"`
	Unopened []string   `json:"unopened,omitempty"` // the suites that did not open, and why
	Error    string     `json:"error,omitempty"`
	Case     string     `json:"case,omitempty"`
	Results  []result   `json:"results,omitempty"`
	Seconds  float64    `json:"seconds,omitempty"`
}

// planCase is a case of the plan: its name and its group (the report's tables go by group).
type planCase struct {
	Name  string `json:"name"`
	Group string `json:"group"`
}

// caseRun is what the report says of one case.
type caseRun struct {
	Name    string  `json:"name"`
	Status  string  `json:"status"` // PASS: ran without an error; FAIL: an error, killed or lost
	Seconds float64 `json:"seconds"`
	Results int     `json:"results"`
	Detail  string  `json:"detail,omitempty"`
}

// benchWorker is the worker's side: it opens the GPU suites, writes the plan and runs the cases
// named on its standard input until it closes. Only the protocol goes to the standard output:
// whatever else the suites print goes to the standard error.
func benchWorker(cfg *config) int {
	out, err := protocolOutput()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck worker:", err)
		return 1
	}
	proto := json.NewEncoder(out)
	wcfg := *cfg
	wcfg.filter, wcfg.implFilter = nil, matchAll
	s := &suite{cfg: &wcfg, nulls: nullImpls(), ops: mixedOps(), trace: newTrace(wcfg.traceSteps)}
	impls, cs, closeGPU := openGPUSuites()
	defer closeGPU()
	if len(cs) == 0 {
		proto.Encode(workerMsg{Error: "no GPU suite opened (see the log)"})
		return 1
	}
	s.impls = impls
	s.load = loadAvg()
	cs = planCases(append(cs, benchCase{name: "gomaxprocs", group: "sweep", custom: sweep}), cfg.filter)
	byName := map[string]benchCase{}
	var plan []planCase
	for _, bc := range cs {
		byName[bc.name] = bc
		plan = append(plan, planCase{bc.name, bc.group})
	}
	if err := proto.Encode(workerMsg{Plan: plan, Unopened: gpuUnopened}); err != nil {
		return 1
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		name := strings.TrimSpace(in.Text())
		t0 := time.Now()
		var rs []result
		if bc, ok := byName[name]; !ok {
			rs = []result{{Case: name, Impl: "gpucheck", Metric: "error", Note: "not a case of this worker's plan"}}
		} else if bc.custom != nil {
			rs = bc.custom(s)
		} else {
			rs = s.run(bc, s.selected())
		}
		if err := proto.Encode(workerMsg{Case: name, Results: finite(rs), Seconds: time.Since(t0).Seconds()}); err != nil {
			return 1
		}
	}
	return 0
}

// finite returns rs with every value that JSON cannot carry (NaN, an infinity) set to zero and
// noted as not a number.
func finite(rs []result) []result {
	for i := range rs {
		if v := rs[i].Value; math.IsNaN(v) || math.IsInf(v, 0) {
			rs[i].Value, rs[i].Note = 0, strings.TrimPrefix(rs[i].Note+"; not a number", "; ")
		}
	}
	return rs
}

// worker is the check's handle on a worker process.
type worker struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	msgs chan workerMsg // closed when the worker's standard output ends
	tail *tailWriter    // the end of its standard error, for the report
}

// startWorker starts a worker and reads its plan and the suites it could not open, within limit.
func (c *check) startWorker(limit time.Duration) (*worker, []planCase, []string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, nil, err
	}
	w := &worker{msgs: make(chan workerMsg, 1), tail: &tailWriter{max: 2048}}
	w.cmd = exec.Command(self, os.Args[1:]...)
	w.cmd.Env = append(c.childEnv(), workerEnv+"=1")
	w.cmd.Stderr = io.MultiWriter(c.log, w.tail)
	w.cmd.SysProcAttr = dieWithParent()
	if w.in, err = w.cmd.StdinPipe(); err != nil {
		return nil, nil, nil, err
	}
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := startChild(w.cmd); err != nil {
		return nil, nil, nil, err
	}
	go func() {
		defer close(w.msgs)
		dec := json.NewDecoder(out)
		for {
			var m workerMsg
			if dec.Decode(&m) != nil {
				return
			}
			w.msgs <- m
		}
	}()
	select {
	case m, ok := <-w.msgs:
		switch {
		case !ok:
			return nil, nil, nil, w.stop(errors.New("the bench worker ended before saying its plan"))
		case m.Error != "":
			return nil, nil, nil, w.stop(errors.New("the bench worker: " + m.Error))
		}
		return w, m.Plan, m.Unopened, nil
	case <-time.After(limit):
		return nil, nil, nil, w.stop(fmt.Errorf("the bench worker did not say its plan within %v", limit.Round(time.Second)))
	}
}

// run runs one case on the worker within limit. An error means the worker is gone: killed at
// the limit, or dead.
func (w *worker) run(name string, limit time.Duration, why string) ([]result, float64, error) {
	t0 := time.Now()
	if _, err := io.WriteString(w.in, name+"\n"); err != nil {
		return nil, 0, w.stop(fmt.Errorf("the bench worker: %w", err))
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-w.msgs:
			if !ok {
				return nil, time.Since(t0).Seconds(), w.stop(errors.New("the bench worker died during the case"))
			}
			if m.Case == name {
				return m.Results, m.Seconds, nil
			}
		case <-timer.C:
			return nil, time.Since(t0).Seconds(), w.stop(fmt.Errorf("killed after %v: %s", limit.Round(100*time.Millisecond), why))
		}
	}
}

// stop ends the worker (closing its input, then killing it if it is still there), and returns
// err with what it last wrote to its standard error, if err is not nil.
func (w *worker) stop(err error) error {
	w.in.Close()
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	var exit error
	select {
	case exit = <-done:
	case <-time.After(map[bool]time.Duration{true: 0, false: 5 * time.Second}[err != nil]):
		w.cmd.Process.Kill()
		exit = <-done
	}
	if err == nil {
		return nil
	}
	if exit != nil && !strings.Contains(err.Error(), "killed after") {
		err = fmt.Errorf("%w (%v)", err, exit)
	}
	if t := strings.TrimSpace(w.tail.String()); t != "" {
		err = fmt.Errorf("%w; its last output: %s", err, shorten(lastLine(t)))
	}
	return err
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	max int
	b   []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string { return string(t.b) }

// runBench runs the plan's cases on workers until the deadline, rewriting the report after each.
func (c *check) runBench() (string, error) {
	c.bench = &suite{cfg: c.cfg}
	c.bench.load = loadAvg()
	w, plan, unopened, err := c.startWorker(min(time.Minute, c.left(c.endMargin())))
	if err != nil {
		return "", err
	}
	var errs []string
	for _, why := range unopened { // a suite that did not open: its cases are not in the plan
		name, _, _ := strings.Cut(why, ":")
		c.bench.results = append(c.bench.results, result{Case: "suite/" + name, Impl: "gpucheck", Metric: "error", Note: "the suite did not open: " + why})
		errs = append(errs, "suite "+why)
	}
	defer func() {
		if w != nil {
			w.stop(nil)
		}
	}()
	if len(plan) == 0 {
		return "", errors.New("the plan has no case (-cases matched none)")
	}
	fmt.Fprintf(c.log, "bench: %d cases, %s mode, GOMAXPROCS=%d, load %s, at most %v a case\n", len(plan),
		map[bool]string{true: "quick", false: "full"}[c.cfg.quick], runtime.GOMAXPROCS(0), c.bench.load, c.cfg.caseLimit)
	for i, pc := range plan {
		limit, why, ok := c.caseLimit()
		if ok && w == nil { // a new worker after one killed or dead: its start is not the case's time
			if w, _, _, err = c.startWorker(limit); err != nil {
				w = nil
			}
			limit, why, ok = c.caseLimit()
		}
		if !ok {
			for _, rest := range plan[i:] {
				c.skipped = append(c.skipped, rest.Name)
			}
			break
		}
		t0 := time.Now()
		var rs []result
		var secs float64
		if err == nil {
			rs, secs, err = w.run(pc.Name, limit, why)
		}
		cr := caseRun{Name: pc.Name, Status: pass, Seconds: time.Since(t0).Seconds()}
		if err != nil {
			w = nil
			rs = append(rs, result{Case: pc.Name, Impl: "gpucheck", Metric: "error", Note: strings.ReplaceAll(err.Error(), "\n", "; ")})
			err = nil
		} else {
			cr.Seconds = secs
		}
		for _, r := range rs {
			if r.Metric == "error" && !c.naError(r) {
				cr.Status, cr.Detail = fail, strings.TrimPrefix(cr.Detail+"; "+r.Impl+": "+r.Note, "; ")
			}
		}
		cr.Results = len(rs)
		c.bench.results = append(c.bench.results, rs...)
		c.benchRun = append(c.benchRun, benchCase{name: pc.Name, group: pc.Group})
		c.Cases = append(c.Cases, cr)
		if cr.Status == fail {
			errs = append(errs, pc.Name+": "+shorten(cr.Detail))
		}
		fmt.Fprintf(c.log, "[%2d/%d] %-32s %d results (%.1fs)%s\n", i+1, len(plan), pc.Name, len(rs), cr.Seconds,
			map[bool]string{true: ": " + shorten(cr.Detail)}[cr.Status == fail])
		c.rewrite()
	}
	detail := fmt.Sprintf("%d of %d cases run, %d results", len(c.Cases), len(plan), len(c.bench.results))
	if len(c.skipped) > 0 {
		errs = append(errs, fmt.Sprintf("%d cases not run: the deadline (from %s)", len(c.skipped), c.skipped[0]))
	}
	if len(errs) > 0 {
		return detail, errors.New(strings.Join(errs, "; "))
	}
	return detail, nil
}

// caseLimit returns the time the next case may run and why it ends then: -case-limit, or the
// deadline if sooner; ok is false when the deadline leaves less than the least worth starting.
func (c *check) caseLimit() (limit time.Duration, why string, ok bool) {
	limit, why = c.cfg.caseLimit, fmt.Sprintf("the per-case limit (-case-limit %v)", c.cfg.caseLimit)
	if left := c.left(c.endMargin()); left < limit {
		return left, "the deadline", left >= c.floor()
	}
	return limit, why, true
}

// naError reports whether an error result is no failure: a case that cannot run on the fake
// driver, or a row a capability the driver lacks leaves empty (its note says which).
func (c *check) naError(r result) bool {
	return (c.fake && strings.HasPrefix(r.Note, "not measured on the fake driver")) || strings.HasPrefix(r.Note, lacksNote)
}
