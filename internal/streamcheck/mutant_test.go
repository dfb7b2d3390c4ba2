package streamcheck

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The checker proves itself on mutants: each is an ordering bug put back into the module, one
// edit of one file (mutants.go lists them), built into a test binary of this package with
// go build's -overlay (the tree is not touched) and run as CI runs the checker. A mutant the
// checker does not catch fails TestMutants: the checker has a blind spot, or the mutant no
// longer is a bug (then it goes, with the reason).
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

func long() bool { return os.Getenv(longEnv) == "1" }

// TestMutantsApply checks that every mutant's edit still applies: its text occurs exactly once
// in its file. A change of the code a mutant edits fails here first, fast.
func TestMutantsApply(t *testing.T) {
	root := moduleRoot(t)
	names := map[string]bool{}
	for _, m := range mutants {
		if names[m.name] {
			t.Errorf("two mutants named %s", m.name)
		}
		names[m.name] = true
		if _, err := m.apply(root); err != nil {
			t.Error(err)
		}
		if m.why == "" || m.catch == "" {
			t.Errorf("mutant %s: say why it is a bug and which case catches it", m.name)
		}
	}
	if len(mutants) < 15 {
		t.Errorf("%d mutants; the issue asks for at least the 15 kinds the checker was first tried on", len(mutants))
	}
}

// TestMutants builds each mutant and runs the checker on it: the fast subset by default, every
// mutant on the whole CI run with PINMALLOC_LONG=1.
func TestMutants(t *testing.T) {
	if os.Getenv("STREAMCHECK_MUTANT") != "" {
		t.Skip("in a mutant's binary") // the mutant suite does not run itself
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the mutant suite builds with the go command: %v", err)
	}
	root := moduleRoot(t)
	all := long()
	if all && !t.Run("unmutated", func(t *testing.T) { checkUnmutated(t, root) }) {
		t.FailNow()
	}
	var pick *regexp.Regexp
	if re := os.Getenv(envMutants); re != "" {
		var err error
		if pick, err = regexp.Compile(re); err != nil {
			t.Fatalf("%s=%q: %v", envMutants, re, err)
		}
	}
	ran := 0
	for _, m := range mutants {
		switch {
		case pick != nil && !pick.MatchString(m.name):
			continue
		case pick == nil && !all && !m.fast:
			continue
		}
		ran++
		t.Run(m.name, func(t *testing.T) {
			// A mutant's build is mostly one package after another, then a link: two or
			// more side by side keep the CPUs busy (-test.parallel, GOMAXPROCS by default).
			t.Parallel()
			start := time.Now()
			bin := buildMutant(t, root, m)
			built := time.Since(start)
			args := []string{"-test.run=" + m.catch}
			if all && m.pkg == "" {
				args = []string{"-test.run=" + ciRun}
			}
			out, caught := runMutant(t, bin, args)
			if !caught {
				t.Fatalf("mutant %s (%s) not caught by %s in %v:\n%s", m.name, m.why, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), tail(out, 40))
			}
			t.Logf("caught in %v (build %v): %s", time.Since(start).Round(time.Millisecond), built.Round(time.Millisecond), firstFailure(out))
		})
	}
	if ran == 0 {
		t.Fatal("no mutant ran")
	}
}

// checkUnmutated builds the module as it is, as the long form builds its mutants (without
// inlining: mutantBuildFlags), and runs what catches them there: the checker's CI run and, for
// each package some mutants are caught in, their tests, which must pass: a mutant counts as
// caught only then. The packages build side by side.
func checkUnmutated(t *testing.T, root string) {
	catches := map[string][]string{"": {ciRun}}
	for _, m := range mutants {
		if m.pkg != "" && !slices.Contains(catches[m.pkg], m.catch) {
			catches[m.pkg] = append(catches[m.pkg], m.catch)
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(catches)) {
		t.Run(cmp.Or(pkg, "checker"), func(t *testing.T) {
			t.Parallel()
			bin := buildMutant(t, root, mutant{name: "none", file: "go.mod", old: "module", new: "module", pkg: pkg})
			for _, catch := range catches[pkg] {
				if out, failed := runMutant(t, bin, []string{"-test.run=" + catch}); failed {
					t.Errorf("%s fails on the module itself:\n%s", catch, tail(out, 40))
				}
			}
		})
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

// buildMutant builds this package's test binary with m's edit, through an overlay.
func buildMutant(t *testing.T, root string, m mutant) string {
	t.Helper()
	dir := t.TempDir()
	src, err := m.apply(root)
	if err != nil {
		t.Fatal(err)
	}
	mutated := filepath.Join(dir, filepath.Base(m.file))
	if err := os.WriteFile(mutated, src, 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(root, m.file): mutated}})
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	pkg := m.pkg
	if pkg == "" {
		pkg = "./internal/streamcheck"
	}
	bin := filepath.Join(dir, "mutant.test")
	cmd := exec.Command("go", append(mutantBuildFlags(), "-overlay="+ov, "-c", "-o", bin, pkg)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mutant %s does not build: %v\n%s", m.name, err, out)
	}
	return bin
}

// mutantBuildFlags are go test's flags for a mutant's build, most of a mutant's time (some 8 s
// of CPU; the long form builds every mutant): no vet (a mutant is checked code with one edit),
// no symbol table or DWARF (nothing reads them), and in the long form no inlining in this
// module's packages, which halves what a mutant's dependents take to compile again (they
// inline the mutated package's functions otherwise); the module's builds without inlining are
// made once (checkUnmutated) and shared by every mutant. The fast subset keeps the inlining: it
// builds one mutant, beside test binaries built with it.
func mutantBuildFlags() []string {
	const modulePath = "github.com/pinmalloc/pinmalloc"
	flags := []string{"test", "-vet=off", "-ldflags=-s -w"}
	if long() {
		flags = append(flags, "-gcflags="+modulePath+"/...=-l")
	}
	return flags
}

// runMutant runs a mutant's binary with args, shrinking nothing, and reports whether the
// checker failed.
func runMutant(t *testing.T, bin string, args []string) (string, bool) {
	t.Helper()
	cmd := exec.Command(bin, append(args, "-test.count=1", "-test.failfast")...) // caught at the first failure
	cmd.Env = append(os.Environ(), envShrink+"=1ms", "STREAMCHECK_MUTANT=1", longEnv+"=", fmt.Sprintf("%s=%d", envSteps, ciSteps))
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

// firstFailure is the first subtest of out that failed, and the first line that says what
// failed.
func firstFailure(out string) string {
	test, what := "", "(no failure line)"
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if name, ok := strings.CutPrefix(l, "--- FAIL: "); ok && (test == "" || strings.Contains(name, "/") && !strings.Contains(test, "/")) {
			test, _, _ = strings.Cut(name, " ")
		}
		if what == "(no failure line)" && (strings.Contains(l, " failed: ") || strings.Contains(l, "(found as")) {
			what = l
		}
	}
	return test + ": " + what
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
