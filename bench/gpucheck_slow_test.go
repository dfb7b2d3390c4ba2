package main

// The GPU check on a slow GPU: the fake driver named "NVIDIA H200" and slowed in wall time
// (fakecuda.SlowEnv), so that its suites take longer than the deadline allows. The run must end
// by its deadline with its report whole, every case run in it, the rest listed as not run, and a
// case that outlives its limit killed without taking the run with it; a run killed outright
// keeps every figure taken.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// slowEnv is the environment of a run on the fake named as an H200, slowed by factor.
func slowEnv(lib string, factor int) []string {
	return []string{cuda.LibraryEnv + "=" + lib, fakecuda.NameEnv + "=NVIDIA H200", fakecuda.SlowEnv + "=" + strconv.Itoa(factor)}
}

// slowCases are the cases of the slow runs, in the plan's order: copy bandwidth, the host pools'
// pairs, the tier's moves (fixed work: slowed the most), the device heap's pairs, Acquire.
const slowCases = "^(cuda-h2d/1MiB|cuda-d2h/1MiB|cuda-pair/4KiB|uvm-move/64KiB|uvm-move/256KiB|cuda-device-pair/4KiB|uvm-acquire/resident)$"

// checkPartial checks a report cut short by its deadline: whole (its JSON read), every case run
// listed with its time and results or its error, the rest listed as not run, bench-gpu failing
// for them, no target graded on the fake, and the markdown written beside it.
func checkPartial(t *testing.T, out string, doc reportDoc, ran time.Duration, deadline time.Duration) {
	t.Helper()
	if ran > deadline+2*time.Second || doc.Seconds > deadline.Seconds()+0.5 {
		t.Errorf("the run took %v (the report says %.1f s) against a deadline of %v", ran, doc.Seconds, deadline)
	}
	if len(doc.Cases) == 0 || len(doc.NotRun) == 0 && !strings.Contains(doc.Cases[len(doc.Cases)-1].Detail, "the deadline") {
		t.Errorf("cases run %+v, not run %v: want a run cut short by the deadline", doc.Cases, doc.NotRun)
	}
	for _, cr := range doc.Cases {
		if cr.Status == pass && cr.Results == 0 || cr.Status == fail && cr.Detail == "" {
			t.Errorf("case %+v: a case run is listed with its results or its error", cr)
		}
	}
	if ct := doc.check("bench-gpu"); ct.Status != fail || !strings.Contains(ct.Detail, "deadline") {
		t.Errorf("bench-gpu %+v: want a failure naming the deadline", ct)
	}
	for _, ct := range doc.Checks {
		if ct.Kind == "target" && ct.Status != na {
			t.Errorf("%s graded %s on the fake named NVIDIA H200", ct.Name, ct.Status)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "fake-driver-quick.md"))
	if err != nil || !strings.Contains(string(md), "## Cases, in the order run") || !strings.Contains(string(md), fakeNote) {
		t.Errorf("the markdown report: %v\n%s", err, md)
	}
}

// TestGpucheckSlowGPU runs the check on a slow GPU. Short form (every run): a case that outlives
// -case-limit is killed, a new worker runs the next, and the deadline cuts the rest, the run
// ending by it with its report whole. With PINMALLOC_LONG=1, first the bench of slowCases is
// timed with no deadline to cut it, then run again with a deadline that leaves it half that
// time: it must end inside the deadline, with a complete, partial report.
func TestGpucheckSlowGPU(t *testing.T) {
	lib := needFake(t)
	bin := standInBin(t)
	if os.Getenv("PINMALLOC_LONG") == "" {
		// A case that outlives -case-limit is killed, and a new worker runs the next.
		out := t.TempDir()
		// (uvm-move/256KiB, fixed work, takes 5 s at factor 20 on a quiet 2-core machine; the
		// device heap's pair, timed to a target, half a second, one on a machine 10 times busier.)
		code, log := runMain(t, slowEnv(lib, 20), "-gpucheck", out, "-bin", bin, "-quick", "-case-limit", "2.5s", "-cases", "^(uvm-move/256KiB|cuda-device-pair/4KiB)$")
		doc := readReport(t, out, "fake-driver-quick")
		if code != 1 || len(doc.Cases) != 2 || !strings.Contains(doc.Cases[0].Detail, "killed after 2.5s: the per-case limit") || doc.Cases[1].Status != pass ||
			doc.Cases[1].Results == 0 {
			t.Errorf("exit %d, cases %+v: want the first killed at its limit and the next run whole by a new worker\n%s", code, doc.Cases, log)
		}
		// The deadline cuts the run: the case running is stopped, the rest are not started.
		out = t.TempDir()
		const deadline = 2500 * time.Millisecond
		t0 := time.Now()
		code, log = runMain(t, slowEnv(lib, 20), "-gpucheck", out, "-bin", bin, "-quick", "-deadline", deadline.String(), "-cases", slowCases)
		if code != 1 {
			t.Errorf("exit %d, want 1\n%s", code, log)
		}
		checkPartial(t, out, readReport(t, out, "fake-driver-quick"), time.Since(t0), deadline)
		return
	}
	const factor = 10
	out := t.TempDir()
	code, log := runMain(t, slowEnv(lib, factor), "-gpucheck", out, "-bin", bin, "-quick", "-deadline", "30m", "-case-limit", "10m", "-cases", slowCases)
	full := readReport(t, out, "fake-driver-quick")
	if code != 0 || len(full.Steps) != 4 || len(full.NotRun) != 0 {
		t.Fatalf("the uncut run: exit %d, steps %+v, not run %v\n%s", code, full.Steps, full.NotRun, log)
	}
	bench := time.Duration(full.Steps[3].Seconds * float64(time.Second))
	before := time.Duration((full.Seconds - full.Steps[3].Seconds) * float64(time.Second))
	deadline := before + bench/2 + time.Second
	t.Logf("the bench of %d cases took %v at slow factor %d (%v before it); again with a deadline of %v", len(full.Cases), bench.Round(time.Millisecond), factor,
		before.Round(time.Millisecond), deadline.Round(time.Millisecond))
	out = t.TempDir()
	t0 := time.Now()
	code, log = runMain(t, slowEnv(lib, factor), "-gpucheck", out, "-bin", bin, "-quick", "-deadline", deadline.String(), "-cases", slowCases)
	ran := time.Since(t0)
	doc := readReport(t, out, "fake-driver-quick")
	if code != 1 {
		t.Errorf("the cut run exited %d, want 1\n%s", code, log)
	}
	checkPartial(t, out, doc, ran, deadline)
	for i, cr := range doc.Cases[:len(doc.Cases)-1] {
		if cr.Name != full.Cases[i].Name || cr.Status != pass {
			t.Errorf("case %d: %+v, want %s run whole", i, cr, full.Cases[i].Name)
		}
	}
}

// TestGpucheckKilled kills the check (SIGKILL, as a command limit does): once its report holds a
// case's figures, run on the fake named as a GPU and on the fake it chose itself (-fake: the
// check runs in a child of the process killed), the report on disk is whole and keeps them; and
// while a test binary runs. Each time no process of the check outlives it: no worker, no test
// binary, no child on the fake.
func TestGpucheckKilled(t *testing.T) {
	lib := needFake(t)
	args := []string{"-quick", "-cases", "^(cuda-device-pair/4KiB|uvm-acquire/resident)$"}
	for _, run := range []struct {
		name string
		env  []string
		args []string
	}{
		{"on the fake named as a GPU", slowEnv(lib, 5), args},
		{"on the fake it chose (-fake)", []string{cuda.LibraryEnv + "=", fakecuda.PrebuiltEnv + "=" + lib, fakecuda.SlowEnv + "=5"}, append([]string{"-fake"}, args...)},
	} {
		t.Run(run.name, func(t *testing.T) {
			out := t.TempDir()
			cmd := startMain(t, run.env, append([]string{"-gpucheck", out, "-bin", standInBin(t)}, run.args...)...)
			waitFor(t, func() bool {
				b, err := os.ReadFile(filepath.Join(out, "fake-driver-quick.json"))
				return err == nil && strings.Contains(string(b), `"cuda-device-pair/4KiB"`) && strings.Contains(string(b), `"cases"`)
			}, "no case's figures in the report")
			kill(t, cmd)
			doc := readReport(t, out, "fake-driver-quick")
			found := false
			for _, r := range doc.Results {
				found = found || r.Case == "cuda-device-pair/4KiB" && r.Metric == "ns_per_pair" && r.Value > 0
			}
			if !found || len(doc.Cases) == 0 {
				t.Errorf("the report after the kill lacks the figures taken: cases %+v", doc.Cases)
			}
			noneLeft(t, out, "")
		})
	}
	t.Run("while a test binary runs", func(t *testing.T) {
		bin, pkg := standInBin(t), t.TempDir()
		script(t, bin, "pinned.test", "exec sleep 60") // its folder, pkg, tells it
		if err := os.WriteFile(filepath.Join(bin, "tests.txt"), []byte("pinned.test "+pkg+" TestCUDAPoolCopiesMixedSizes\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		cmd := startMain(t, slowEnv(lib, 1), "-gpucheck", out, "-bin", bin, "-quick")
		waitFor(t, func() bool { return len(processesIn(pkg)) > 0 }, "the test binary never started")
		kill(t, cmd)
		noneLeft(t, out, pkg)
	})
}

// startMain starts bench's main in a child process, as runMain runs it.
func startMain(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := mainCmd(env, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// waitFor polls cond for a minute.
func waitFor(t *testing.T, cond func() bool, failure string) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > time.Minute {
			t.Fatal(failure, "after a minute")
		}
	}
}

// kill kills cmd's process with SIGKILL and reaps it.
func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
}

// noneLeft fails the test if, a moment after the check was killed, a process of it lives on: one
// whose arguments name its folder out, or that runs in the folder dir.
func noneLeft(t *testing.T, out, dir string) {
	t.Helper()
	time.Sleep(300 * time.Millisecond) // the death signals
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), out) {
			t.Errorf("a process of the killed check lives on: %s: %q", p, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if dir != "" {
		for _, p := range processesIn(dir) {
			t.Errorf("a test binary of the killed check lives on: %s", p)
		}
	}
}

// processesIn lists the processes whose working folder is dir.
func processesIn(dir string) []string {
	var out []string
	cwds, _ := filepath.Glob("/proc/[0-9]*/cwd")
	for _, c := range cwds {
		if d, err := os.Readlink(c); err == nil && d == dir {
			out = append(out, filepath.Dir(c))
		}
	}
	return out
}
