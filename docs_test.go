package pinmalloc_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// docsNotRun are the quoted commands the docs test checks without running (what they name
// still must exist: docscheck_test.go), each with why; a command quoted in a doc that is neither
// run below nor matched here fails the test.
var docsNotRun = []struct{ pattern, why string }{
	{`^(bash )?scripts/gpucheck`, "the GPU check: builds a bundle for a GPU machine and runs it there (minutes, a GPU)"},
	{`^\.ci/`, "CI's own scripts: switch to the user nobody (root) and run whole suites"},
	{`^(cd bench && )?([A-Z_]+=\S+ )*go run \.( |$)`, "the benchmark suite: a minute or more, and bench is a module of its own with plotting dependencies (its flags are checked)"},
	{`^go run \./bench`, "quoted only to say that it fails (bench is a module of its own)"},
	{`^(cd [^&]+ && )?([A-Z_]+=\S+ )*go test`, "a package's tests: go test ./... in its module runs them, and CI in every module (the package, its module, -run and flags are checked)"},
	{`^cd examples/external && go run \.`, "a module of its own that runs its tests on the fake driver (its own go test covers it)"},
	{`^go build$`, "builds the module: go vet and go test do"},
	{`^go run \./examples/<name>`, "stands for each example: every example's command quoted elsewhere runs with -h in its tests"},
}

// TestDocs runs or checks every command quoted in README.md, docs/*.md and bench/results/*.md,
// and checks every file, folder, Go file and PINMALLOC_ variable their prose names.
func TestDocs(t *testing.T) {
	if raceEnabled {
		t.Skip("a check of the docs' text, one goroutine: nothing for the race detector (it runs in every go test without -race)")
	}
	t.Parallel()
	docs := docFiles(t)
	r := &repoTree{root: ".", env: sourceEnv(".")}
	pkgs := publicPackageNames(t)
	var cmds []docCommand
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range r.docPathProblems(doc, string(b)) {
			t.Error(p)
		}
		for _, p := range r.docNameProblems(doc, string(b), pkgs) {
			t.Error(p)
		}
		for _, p := range r.docMemberProblems(doc, string(b), pkgs) {
			t.Error(p)
		}
		cmds = append(cmds, docCommands(doc, string(b))...)
	}
	if len(cmds) < 20 {
		t.Fatalf("found %d commands in %d docs: the extraction is broken", len(cmds), len(docs))
	}
	for _, c := range cmds {
		for _, p := range r.checkDocCommand(c) {
			t.Error(p)
		}
	}

	// Run the cheap ones: go doc. A command may start with a cd (`cd metrics && go doc`); a
	// package of an integration module named by its import path has its doc read in that
	// module's folder, as a module that requires it would. A main package a command runs is run
	// by its own tests (its other flags are checked above): the core's with -h and the
	// quickstart whole (mainTestProblems); an integration module's by that module's (debugpage's
	// viewer: TestView, -h included), which keeps what the module split keeps out of the core's
	// go test (net/http and its closure).
	mains := map[string]map[string]bool{} // module folder → main packages
	for _, c := range cmds {
		dir, w := c.dir, shellWords(c.text)
		if len(w) > 3 && w[0] == "cd" && w[2] == "&&" && !placeholder(w[1]) {
			dir, w = filepath.Join(dir, w[1]), w[3:]
		}
		switch {
		case len(w) == 2 && w[0] == "cd": // checked: the folder exists
		case len(w) >= 2 && w[0] == "go" && w[1] == "doc":
			if err := runGoDoc(r, dir, w[2:], pkgs); err != nil {
				t.Errorf("%s: `%s`: %v", c.where, c.text, err)
			}
		case len(w) >= 3 && w[0] == "go" && w[1] == "run" && runTarget(w) != "" && r.libraryModuleOf(dir, runTarget(w)) != "":
			mod := r.libraryModuleOf(dir, runTarget(w))
			if mains[mod] == nil {
				mains[mod] = map[string]bool{}
			}
			mains[mod][runFolder(dir, runTarget(w))] = true
		default:
			if why := notRunWhy(c.text); why == "" {
				t.Errorf("%s: `%s`: neither run by TestDocs nor in docsNotRun with a reason", c.where, c.text)
			}
		}
	}
	for _, mod := range sortedSet(keysOfSet(mains)) {
		for p := range mains[mod] {
			if src, err := os.ReadFile(filepath.Join(p, "main.go")); err != nil || !strings.Contains(string(src), "\npackage main\n") {
				t.Errorf("go run %s: no main package there (%v)", p, err)
			} else if mod == "." {
				for _, e := range mainTestProblems(p, filepath.ToSlash(p) == "examples/quickstart") {
					t.Errorf("go run %s: %s", p, e)
				}
			}
		}
	}
	if !mains["."]["examples/quickstart"] || !mains["debugpage"]["debugpage/cmd/view"] {
		t.Errorf("found %v: the docs quote go run ./examples/quickstart and debugpage's viewer; the extraction is broken", mains)
	}
}

// mainTestProblems says what the tests of the core's main package in dir lack for the docs test
// to count its quoted command as run: a TestUsage that runs it with -h and, with whole, a test
// named after the package that runs it without flags (TestQuickstart). Those tests run in the
// same go test; a go build here would compile again, from a cold build cache, what go test is
// compiling.
func mainTestProblems(dir string, whole bool) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return []string{err.Error()}
		}
		src.Write(b)
	}
	name := filepath.Base(dir)
	var problems []string
	for _, want := range []struct {
		test string
		need bool
	}{{"TestUsage", true}, {"Test" + strings.ToUpper(name[:1]) + name[1:], whole}} {
		if want.need && !strings.Contains(src.String(), "\nfunc "+want.test+"(t *testing.T) {") {
			problems = append(problems, fmt.Sprintf("its tests have no %s: the command the docs quote is not run", want.test))
		}
	}
	return problems
}

// TestMainTestProblemsCatches: a main package whose tests do not run it is reported.
func TestMainTestProblemsCatches(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "quickstart")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main_test.go"), []byte("package main\n\nfunc TestOther(t *testing.T) {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(mainTestProblems(dir, true), "\n"); !strings.Contains(p, "no TestUsage") || !strings.Contains(p, "no TestQuickstart") {
		t.Errorf("a main package whose tests never run it: %q", p)
	}
	if p := mainTestProblems("examples/quickstart", true); len(p) != 0 {
		t.Errorf("the quickstart: %q", p)
	}
}

// libraryModuleOf returns the folder of the library module (the core, ".", or an integration
// module) whose main package a go run of target from dir runs, or "" when it is none of them
// (bench, examples/external: modules of their own that their own tests cover).
func (r *repoTree) libraryModuleOf(dir, target string) string {
	if mod := r.moduleOf(runFolder(dir, target)); mod == "." || isLibraryModule(mod) {
		return mod
	}
	return ""
}

// runFolder returns the folder, relative to the root, of the package a go run of target from dir
// runs: an import path of this repository, or a path relative to dir.
func runFolder(dir, target string) string {
	if strings.HasPrefix(target, module+"/") {
		return mainDir(target)
	}
	return filepath.Join(dir, target)
}

// runGoDoc runs go doc with args in dir, or, for a package of an integration module named by
// its import path, in that module's folder. A package argument that names one of the library's
// public packages by its name, or none (the folder's package), must print the library's package,
// not the standard library's of the same name (`go doc metrics` prints runtime/metrics).
func runGoDoc(r *repoTree, dir string, args []string, pkgs map[string]string) error {
	pkg := ""
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			pkg = a
			break
		}
	}
	// pkg is [path/]name[.Symbol[.Member]]: the package is up to the first dot after the last slash.
	path, name := "", pkg
	if i := strings.LastIndex(pkg, "/"); i >= 0 {
		path, name = pkg[:i+1], pkg[i+1:]
	}
	name, _, _ = strings.Cut(name, ".")
	if strings.HasPrefix(path+name, module+"/") {
		if mod := r.moduleOf(strings.TrimPrefix(path+name, module+"/")); isLibraryModule(mod) {
			dir = mod
		}
	}
	cmd := exec.Command("go", append([]string{"doc"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v\n%s", err, out)
	}
	if _, ours := pkgs[name]; (ours || pkg == "") && !strings.Contains(string(out), `// import "`+module) {
		return fmt.Errorf("prints another package than the library's %s:\n%s", name, firstLine(string(out)))
	}
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func keysOfSet[V any](m map[string]V) map[string]bool {
	s := map[string]bool{}
	for k := range m {
		s[k] = true
	}
	return s
}

// TestGoDocCatches: a go doc command that prints the standard library's package of a name the
// library uses fails (`go doc metrics` from the root prints runtime/metrics), and one run in an
// integration module's folder passes.
func TestGoDocCatches(t *testing.T) {
	t.Parallel()
	r, pkgs := &repoTree{root: "."}, publicPackageNames(t)
	if err := runGoDoc(r, ".", []string{"metrics"}, pkgs); err == nil || !strings.Contains(err.Error(), "runtime/metrics") {
		t.Errorf("go doc metrics from the root: %v; want it refused for printing runtime/metrics", err)
	}
	if err := runGoDoc(r, "metrics", nil, pkgs); err != nil {
		t.Errorf("cd metrics && go doc: %v", err)
	}
}

// TestDocsCheckCatches: the checks find each kind of mistake a doc has made: a file, a
// package, a flag, a build tag, a test, a variable that does not exist, and a command run from
// the wrong module.
func TestDocsCheckCatches(t *testing.T) {
	if raceEnabled {
		t.Skip("a check of the docs' text, one goroutine: nothing for the race detector (it runs in every go test without -race)")
	}
	t.Parallel()
	r := &repoTree{root: ".", env: sourceEnv(".")}
	for _, tc := range []struct{ line, want string }{
		{"See `docs/nosuch.md` for more.", "no such file"},
		{"See [the notes](docs/nosuch.md).", "no such file"},
		{"The suite (`bench/nosuch.go`) ...", "no such file"},
		{"as `nosuch_impl.go` does", "no file of that name"},
		{"Set `" + "PINMALLOC_" + "NO_SUCH_VAR=1` to ...", "no source file reads"},
		{"Generated by `go run -tags mimalloc ./bench`", "main module does not contain package"},
		{"Run `go test ./debugpage -run TestHandler`", "debugpage is in the module at debugpage, not in the one at ."},
		{"Run `cd bench && go run -tags mimalloc .`", "has a //go:build line with mimalloc"},
		{"Run `go run ./examples/quickstart -nosuchflag`", "defines no flag -nosuchflag"},
		{"Run `go run ./examples/nosuch`", "no package examples/nosuch"},
		{"Run `go test ./pinned -run TestNoSuchThing`", "matches no test"},
		{"Run `go test ./pinned -run Soak -nosoak 2m`", "defines no flag -nosoak"},
		{"Run `cd nosuchdir && go run .`", "no folder nosuchdir"},
		{"```sh\ncd bench\ngo run . -nosuchflag\n```", "bench defines no flag -nosuchflag"},
		{"Reproduce: `cd bench && go run . -quick -out results`", "writes over the committed results"},
		{"Use `pinned.NoSuchFunc(n)` to ...", "package pinned declares no NoSuchFunc"},
		{"as `device.Heap.NoSuchMethod` does", "device.Heap has no method or field NoSuchMethod"},
		{"set `Options.NoSuchField`", "no public type Options has a method or field NoSuchField"},
	} {
		var problems []string
		for _, c := range docCommands("README.md", tc.line) {
			problems = append(problems, r.checkDocCommand(c)...)
		}
		problems = append(problems, r.docPathProblems("README.md", tc.line)...)
		problems = append(problems, r.docNameProblems("README.md", tc.line, publicPackageNames(t))...)
		problems = append(problems, r.docMemberProblems("README.md", tc.line, publicPackageNames(t))...)
		if !strings.Contains(strings.Join(problems, "\n"), tc.want) {
			t.Errorf("%q: problems %q, want one saying %q", tc.line, problems, tc.want)
		}
	}
	// And the right ones pass.
	for _, ok := range []string{"`go run ./examples/quickstart -h`", "`cd bench && go run . -quick -cases trace`",
		"`cd bench && go run . -out results -name mine`",
		"`go test ./pinned -run TestSteadyStateNoSyscalls -v`", "see `docs/ipcpool.md` and `memlock.go`",
		"`cd debugpage && go test . -run TestHandler`", "`cd debugpage && go run ./cmd/view snapshot.json`"} {
		var problems []string
		for _, c := range docCommands("README.md", ok) {
			problems = append(problems, r.checkDocCommand(c)...)
		}
		if problems = append(problems, r.docPathProblems("README.md", ok)...); len(problems) > 0 {
			t.Errorf("%q: problems %q, want none", ok, problems)
		}
	}
}

// publicPackageNames maps the name of each public package to its folder (cudatest to
// cuda/cudatest, pinmalloc to the root).
func publicPackageNames(t *testing.T) map[string]string {
	m := map[string]string{"pinmalloc": "."}
	for _, dir := range publicPackages(t) {
		if dir != "." {
			m[filepath.Base(dir)] = dir
		}
	}
	return m
}

// docFiles returns the docs the test reads.
func docFiles(t *testing.T) []string {
	docs := []string{"README.md"}
	for _, pat := range []string{"docs/*.md", "bench/results/*.md"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, m...)
	}
	return docs
}

// mainDir is the folder of a go run package argument.
func mainDir(p string) string {
	if strings.HasPrefix(p, module+"/") {
		return strings.TrimPrefix(p, module+"/")
	}
	return filepath.Clean(p)
}

// runTarget returns the package of a go run command's words, "" for a placeholder.
func runTarget(w []string) string {
	for i := 2; i < len(w); i++ {
		switch {
		case goFlagArgs[w[i]]:
			i++
		case strings.HasPrefix(w[i], "-"):
		case placeholder(w[i]):
			return ""
		default:
			return w[i]
		}
	}
	return ""
}

// notRunWhy returns why a command is not run, from docsNotRun, or "".
func notRunWhy(cmd string) string {
	for _, n := range docsNotRun {
		if regexp.MustCompile(n.pattern).MatchString(cmd) {
			return n.why
		}
	}
	return ""
}

func sortedSet(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}
