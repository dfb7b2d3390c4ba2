package streamcheck

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The checker proves itself on mutants: each is an ordering bug put back into the module, one
// edit of one function (mutants_test.go lists them), built into a test binary with every other
// mutant its package's tests catch (mutant_build_test.go; the tree is not touched) and run as
// CI runs the checker, one mutant at a time. A mutant the checker does not catch fails
// TestMutants: the checker has a blind spot, or the mutant no longer is a bug (then it goes,
// with the reason).
//
// go test ./internal/streamcheck runs the fast subset (the mutants marked fast, each on the
// one case that catches it); PINMALLOC_LONG=1 runs every mutant on the CI run of the checker
// (TestStreamOrder's CI seeds and TestRegressions), which must fail on each;
// STREAMCHECK_MUTANTS=regexp runs the mutants it names.

// longEnv turns on the long runs of the module's tests (CI sets it).
const longEnv = "PINMALLOC_LONG"

// envMutants picks the mutants whose names match it (a regular expression), each run on the
// case that catches it (on the whole CI run with PINMALLOC_LONG=1).
const envMutants = "STREAMCHECK_MUTANTS"

// noMutant is the mutant a binary runs to run the module as it is.
const noMutant = "none"

func long() bool { return os.Getenv(longEnv) == "1" }

// TestMutantsApply checks that every mutant's edit still applies (its text occurs exactly once
// in its file, inside one function whose copy can be called) and says what it is. A change of
// the code a mutant edits fails here first, fast.
func TestMutantsApply(t *testing.T) {
	root := moduleRoot(t)
	names := map[string]bool{}
	for _, m := range mutants {
		if names[m.name] {
			t.Errorf("two mutants named %s", m.name)
		}
		names[m.name] = true
		if m.name == noMutant {
			t.Errorf("a mutant named %s, the name that runs none", noMutant)
		}
		if _, err := m.apply(root); err != nil {
			t.Error(err)
		}
		if m.why == "" || m.catch == "" {
			t.Errorf("mutant %s: say why it is a bug and which case catches it", m.name)
		}
	}
	if _, err := mutantOverlay(root, mutants); err != nil {
		t.Error(err)
	}
	if len(mutants) < 15 {
		t.Errorf("%d mutants; the issue asks for at least the 15 kinds the checker was first tried on", len(mutants))
	}
}

// TestMutants builds the mutants, one binary for the mutants each package's tests catch, and
// runs the checker on each mutant: the fast subset by default, every mutant on the whole CI run
// with PINMALLOC_LONG=1, which also runs what catches them on each binary with no mutant: it
// must pass there, or a mutant would count as caught for a failure that is not its own. That is
// each package's catches and TestRegressions before the mutants run, and after them each seed
// of TestStreamOrder a mutant of the checker was caught on (not the seeds no mutant reached:
// TestStreamOrder runs them all in the long form).
func TestMutants(t *testing.T) {
	if os.Getenv(envMutant) != "" {
		t.Skip("in a mutant's binary") // the mutant suite does not run itself
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the mutant suite builds with the go command: %v", err)
	}
	root := moduleRoot(t)
	all := long()
	var pick *regexp.Regexp
	if re := os.Getenv(envMutants); re != "" {
		var err error
		if pick, err = regexp.Compile(re); err != nil {
			t.Fatalf("%s=%q: %v", envMutants, re, err)
		}
	}
	byPkg := map[string][]mutant{}
	for _, m := range mutants {
		switch {
		case pick != nil && !pick.MatchString(m.name):
			continue
		case pick == nil && !all && !m.fast:
			continue
		}
		byPkg[m.testPkg()] = append(byPkg[m.testPkg()], m)
	}
	if len(byPkg) == 0 {
		t.Fatal("no mutant ran")
	}
	var mu sync.Mutex
	bins := map[string]string{}
	dir := t.TempDir() // the binaries outlive their builds' subtests
	t.Run("build", func(t *testing.T) {
		for i, pkg := range slices.Sorted(maps.Keys(byPkg)) {
			t.Run(pkg, func(t *testing.T) {
				// A build is mostly one package after another, then a link: two side by side
				// keep the CPUs busy (-test.parallel, GOMAXPROCS by default).
				t.Parallel()
				start := time.Now()
				d := filepath.Join(dir, strconv.Itoa(i))
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
				bin := buildMutants(t, root, d, pkg, byPkg[pkg])
				t.Logf("%d mutants built in %v", len(byPkg[pkg]), time.Since(start).Round(time.Millisecond))
				mu.Lock()
				bins[pkg] = bin
				mu.Unlock()
			})
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	if all && !t.Run("unmutated", func(t *testing.T) { checkUnmutated(t, bins, byPkg) }) {
		t.FailNow()
	}
	// The subtests of TestStreamOrder (its seeds) the checker's mutants were caught on, each
	// with those mutants: checked on the module once the mutants have run.
	caughtOn := map[string][]string{}
	t.Run("mutant", func(t *testing.T) {
		for _, pkg := range slices.Sorted(maps.Keys(byPkg)) {
			for _, m := range byPkg[pkg] {
				t.Run(m.name, func(t *testing.T) {
					t.Parallel()
					start := time.Now()
					args := []string{"-test.run=" + m.catch}
					if all && m.pkg == "" {
						args = []string{"-test.run=" + ciRun}
					}
					out, caught := runMutant(t, bins[pkg], m.name, args)
					if !caught {
						t.Fatalf("mutant %s (%s) not caught by %s in %v:\n%s", m.name, m.why, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), tail(out, 40))
					}
					test, what := firstFailure(out)
					t.Logf("caught in %v: %s: %s", time.Since(start).Round(time.Millisecond), test, what)
					if all && m.pkg == "" && !strings.HasPrefix(test, "TestRegressions") {
						mu.Lock()
						caughtOn[test] = append(caughtOn[test], m.name)
						mu.Unlock()
					}
				})
			}
		}
	})
	if len(caughtOn) > 0 {
		t.Run("unmutated-seeds", func(t *testing.T) { checkCaughtOn(t, bins[checkerPkg], caughtOn) })
	}
}

// checkerPkg is the checker's package, the one whose binary holds the mutants the CI run of
// the checker catches.
const checkerPkg = "./internal/streamcheck"

// testPkg is the package whose test binary holds m: the one its pkg names, or the checker's.
func (m mutant) testPkg() string { return cmp.Or(m.pkg, checkerPkg) }

// checkUnmutated runs what catches the mutants of each binary with none of them on, and must
// pass: for each package some mutants are caught in, their tests; for the checker's mutants,
// which the CI run of the checker catches, the part of it that runs first, TestRegressions
// (TestStreamOrder's seeds, each a fresh heap, pool and tier, are checked once the mutants have
// run, only those a mutant was caught on: checkCaughtOn). The binaries run side by side.
func checkUnmutated(t *testing.T, bins map[string]string, byPkg map[string][]mutant) {
	for _, pkg := range slices.Sorted(maps.Keys(byPkg)) {
		t.Run(pkg, func(t *testing.T) {
			t.Parallel()
			var catches []string
			for _, m := range byPkg[pkg] {
				c := m.catch
				if m.pkg == "" {
					c = "^TestRegressions$"
				}
				if !slices.Contains(catches, c) {
					catches = append(catches, c)
				}
			}
			for _, catch := range catches {
				if out, failed := runMutant(t, bins[pkg], noMutant, []string{"-test.run=" + catch}); failed {
					t.Errorf("%s fails on the module itself:\n%s", catch, tail(out, 40))
				}
			}
		})
	}
}

// checkCaughtOn runs, in the checker's mutant binary with no mutant on, each test outside
// TestRegressions that the CI run caught a checker's mutant on (caughtOn: the test, a seed of
// TestStreamOrder as a rule, and those mutants), as that run ran it: each must pass, or its
// mutants were caught by a failure that is not theirs. A seed is a fresh heap, pool and tier:
// it runs alone (STREAMCHECK_SEED: the test runs in fakecuda.Run's child process, which no
// -test.run of a subtest reaches), with the steps of the CI run; any other test runs whole.
func checkCaughtOn(t *testing.T, bin string, caughtOn map[string][]string) {
	for _, test := range slices.Sorted(maps.Keys(caughtOn)) {
		top, sub, _ := strings.Cut(test, "/")
		args, env := []string{"-test.run=^" + regexp.QuoteMeta(top) + "$"}, []string(nil)
		if seed, ok := strings.CutPrefix(sub, "seed="); ok && top == "TestStreamOrder" {
			env = []string{envSeed + "=" + seed}
		}
		if out, failed := runMutant(t, bin, noMutant, args, env...); failed {
			t.Errorf("%s %s fails on the module itself: the mutants caught on %s, %v, are not shown caught:\n%s", strings.Join(env, " "), args[0], test, caughtOn[test], tail(out, 40))
			continue
		}
		t.Logf("%s passes on the module: %d mutants were caught there", test, len(caughtOn[test]))
	}
}

// moduleRoot is the module's root directory, two above this package's.
func moduleRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

// apply returns the mutated text of m's file, or why the edit does not apply.
func (m mutant) apply(root string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(root, m.file))
	if err != nil {
		return nil, fmt.Errorf("mutant %s: %w", m.name, err)
	}
	if n := strings.Count(string(b), m.old); n != 1 {
		return nil, fmt.Errorf("mutant %s: %q occurs %d times in %s, want once", m.name, m.old, n, m.file)
	}
	return []byte(strings.Replace(string(b), m.old, m.new, 1)), nil
}

// runMutant runs mutant name (or noMutant) in a mutant binary with args and env added to
// the environment, shrinking nothing, and reports whether the checker failed.
func runMutant(t *testing.T, bin, name string, args []string, env ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(bin, append(args, "-test.count=1", "-test.failfast")...) // caught at the first failure
	cmd.Env = append(os.Environ(), envShrink+"=1ms", envMutant+"="+name, longEnv+"=", fmt.Sprintf("%s=%d", envSteps, ciSteps))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return string(out), false
	}
	if _, ok := err.(*exec.ExitError); !ok {
		t.Fatalf("run %s: %v", bin, err)
	}
	if !strings.Contains(string(out), "--- FAIL") {
		t.Fatalf("%s failed without a test failing (a crash of the checker?): %v\n%s", bin, err, tail(string(out), 40))
	}
	return string(out), true
}

// firstFailure is the test of out that failed first (its first subtest that failed, if one
// did), and the first line that says what failed.
func firstFailure(out string) (test, what string) {
	what = "(no failure line)"
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if name, ok := strings.CutPrefix(l, "--- FAIL: "); ok && (test == "" || strings.Contains(name, "/") && !strings.Contains(test, "/")) {
			test, _, _ = strings.Cut(name, " ")
		}
		if what == "(no failure line)" && (strings.Contains(l, " failed: ") || strings.Contains(l, "(found as")) {
			what = l
		}
	}
	return test, what
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
