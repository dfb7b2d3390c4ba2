package streamcheck

import (
	"cmp"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// One test binary holds every mutant its package's tests catch. Each mutated function keeps
// its text and gains a first statement, on the line of its opening brace (no line moves), that
// calls its mutated copy when the binary runs that mutant: the copy is the function as the
// mutant's edit leaves it, renamed name_mutantN and appended to the file under a //line
// directive that gives its lines as the original's. The binary runs the mutant that
// envMutant names, or none. A build compiles each mutated package and every package above it
// again, and links: a mutant built alone did all that for itself (79 builds of 1 – 5 s each,
// most of the long form's time on 2 CPUs); one build a package does it 8 times.

// envMutant names the mutant a mutant binary runs (noMutant: none of them); set, it also tells
// TestMutants that it runs inside such a binary.
const envMutant = "STREAMCHECK_MUTANT"

// mutantSelector is the variable a mutant binary's dispatching statements compare with their
// mutant's name, in a file added to each mutated package.
const mutantSelector = "streamcheckMutant"

// mutantOverlay returns the files of a build holding ms, by absolute path: each file the
// mutants edit, its functions dispatching to their mutated copies, and in each package one
// more file declaring mutantSelector. It fails when an edit does not apply or does not lie in
// one function whose receiver and parameters are all named.
func mutantOverlay(root string, ms []mutant) (map[string][]byte, error) {
	byFile := map[string][]int{}
	for i, m := range ms {
		byFile[m.file] = append(byFile[m.file], i)
	}
	overlay := map[string][]byte{}
	for _, file := range slices.Sorted(maps.Keys(byFile)) {
		path := filepath.Join(root, file)
		orig, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, orig, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		type insert struct {
			at   int
			text string
		}
		var inserts []insert
		var copies strings.Builder
		for _, i := range byFile[file] {
			m := ms[i]
			mutated, err := m.apply(root)
			if err != nil {
				return nil, err
			}
			at := strings.Index(string(orig), m.old)
			fd := funcAround(fset, f, at, at+len(m.old))
			if fd == nil {
				return nil, fmt.Errorf("mutant %s: its edit of %s does not lie inside one function", m.name, file)
			}
			name := fmt.Sprintf("%s_mutant%d", fd.Name.Name, i)
			call, err := dispatchCall(fd, name)
			if err != nil {
				return nil, fmt.Errorf("mutant %s: %w", m.name, err)
			}
			inserts = append(inserts, insert{fset.Position(fd.Body.Lbrace).Offset + 1,
				fmt.Sprintf(" if %s == %q { %s };", mutantSelector, m.name, call)})
			c, err := renamedCopy(path, mutated, fset.Position(fd.Pos()).Offset, name)
			if err != nil {
				return nil, fmt.Errorf("mutant %s: %w", m.name, err)
			}
			fmt.Fprintf(&copies, "\n//line %s:%d\n%s\n", path, fset.Position(fd.Pos()).Line, c)
		}
		// Splice from the end, so that each offset still points into the original text.
		slices.SortFunc(inserts, func(a, b insert) int { return cmp.Compare(b.at, a.at) })
		out := slices.Clone(orig)
		for _, in := range inserts {
			out = slices.Insert(out, in.at, []byte(in.text)...)
		}
		overlay[path] = append(out, copies.String()...)
		sel := filepath.Join(filepath.Dir(path), "zz_streamcheck_mutant.go")
		overlay[sel] = fmt.Appendf(nil, "package %s\n\nimport \"os\"\n\nvar %s = os.Getenv(%q)\n", f.Name.Name, mutantSelector, envMutant)
	}
	return overlay, nil
}

// funcAround is the function of f whose declaration (signature and body) holds the bytes
// [from, to), or nil.
func funcAround(fset *token.FileSet, f *ast.File, from, to int) *ast.FuncDecl {
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if ok && fd.Body != nil && fset.Position(fd.Pos()).Offset <= from && to <= fset.Position(fd.End()).Offset {
			return fd
		}
	}
	return nil
}

// dispatchCall is the statement that calls fd's copy named name with fd's receiver, type
// parameters and parameters, and returns what it returns.
func dispatchCall(fd *ast.FuncDecl, name string) (string, error) {
	named := func(f *ast.Field, what string) ([]string, error) {
		var ns []string
		for _, n := range f.Names {
			if n.Name == "_" {
				return nil, fmt.Errorf("%s has a %s named _: name it, so that its mutated copy can be called", fd.Name.Name, what)
			}
			ns = append(ns, n.Name)
		}
		if len(ns) == 0 {
			return nil, fmt.Errorf("%s has an unnamed %s: name it, so that its mutated copy can be called", fd.Name.Name, what)
		}
		return ns, nil
	}
	call := name
	if fd.Recv != nil {
		r, err := named(fd.Recv.List[0], "receiver")
		if err != nil {
			return "", err
		}
		call = r[0] + "." + name
	}
	if fd.Type.TypeParams != nil {
		var tps []string
		for _, f := range fd.Type.TypeParams.List {
			for _, n := range f.Names {
				tps = append(tps, n.Name)
			}
		}
		call += "[" + strings.Join(tps, ", ") + "]"
	}
	var args []string
	for _, f := range fd.Type.Params.List {
		ns, err := named(f, "parameter")
		if err != nil {
			return "", err
		}
		if _, ok := f.Type.(*ast.Ellipsis); ok {
			ns[len(ns)-1] += "..."
		}
		args = append(args, ns...)
	}
	call += "(" + strings.Join(args, ", ") + ")"
	if fd.Type.Results == nil {
		return call + "; return", nil
	}
	return "return " + call, nil
}

// renamedCopy is the text of the function starting at offset at in src (a version of the file
// at path), named name.
func renamedCopy(path string, src []byte, at int, name string) (string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return "", fmt.Errorf("the edited file does not parse: %w", err)
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fset.Position(fd.Pos()).Offset == at {
			start, end := fset.Position(fd.Name.Pos()).Offset, fset.Position(fd.Name.End()).Offset
			return string(src[at:start]) + name + string(src[end:fset.Position(fd.End()).Offset]), nil
		}
	}
	return "", fmt.Errorf("the edit moved the start of its function in %s", path)
}

// buildMutants builds the test binary of pkg holding ms in dir, through an overlay (the tree
// is not touched).
func buildMutants(t *testing.T, root, dir, pkg string, ms []mutant) string {
	t.Helper()
	files, err := mutantOverlay(root, ms)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "mutants.test")
	cmd := exec.Command("go", "test", "-vet=off", "-ldflags=-s -w", "-overlay="+writeOverlay(t, dir, files), "-c", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the build of %s with %d mutants fails: %v\n%s", pkg, len(ms), err, out)
	}
	return bin
}

// writeOverlay writes files (their texts by absolute path) into dir, and the overlay file that
// puts them in place for go build's -overlay, whose path it returns.
func writeOverlay(t *testing.T, dir string, files map[string][]byte) string {
	t.Helper()
	replace := map[string]string{}
	for i, path := range slices.Sorted(maps.Keys(files)) {
		tmp := filepath.Join(dir, fmt.Sprintf("%d-%s", i, filepath.Base(path)))
		if err := os.WriteFile(tmp, files[path], 0o644); err != nil {
			t.Fatal(err)
		}
		replace[path] = tmp
	}
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": replace})
	path := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(path, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMutantOverlay checks the dispatch of a mutant build on a module of its own: the calls of
// a variadic function with no results, of a generic one and of a method, a build that compiles,
// and the edits it refuses.
func TestMutantOverlay(t *testing.T) {
	root := t.TempDir()
	src := `package p

var x = 1

type T struct{ n int }

func f(a int, b ...string) { println(a, len(b)) }

func g[V any](v V) V { return v }

func (t *T) m(d int) int { return t.n + d }

func (_ *T) under() {}

func unnamed(int) {}
`
	for name, text := range map[string]string{"go.mod": "module example.com/p\n\ngo 1.24\n", "p/p.go": src} {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mut := func(name, old, new string) mutant { return mutant{name: name, file: "p/p.go", old: old, new: new} }
	ms := []mutant{
		mut("variadic", "println(a, len(b))", "println(a+1, len(b))"),
		mut("generic", "return v }", "var z V; return z }"),
		mut("method", "return t.n + d", "return t.n - d"),
	}
	files, err := mutantOverlay(root, ms)
	if err != nil {
		t.Fatal(err)
	}
	got := string(files[filepath.Join(root, "p/p.go")])
	for _, want := range []string{
		`{ if streamcheckMutant == "variadic" { f_mutant0(a, b...); return };`,
		`{ if streamcheckMutant == "generic" { return g_mutant1[V](v) };`,
		`{ if streamcheckMutant == "method" { return t.m_mutant2(d) };`,
		"func (t *T) m_mutant2(d int) int { return t.n - d }",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the mutated file lacks %q:\n%s", want, got)
		}
	}
	if _, err := exec.LookPath("go"); err == nil {
		cmd := exec.Command("go", "build", "-overlay="+writeOverlay(t, t.TempDir(), files), "./p")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("the mutant build does not compile: %v\n%s", err, out)
		}
	}
	for _, m := range []mutant{
		mut("outside", "var x = 1", "var x = 2"),
		mut("blank-receiver", "func (_ *T) under() {}", "func (_ *T) under() { println() }"),
		mut("unnamed", "func unnamed(int) {}", "func unnamed(int) { println() }"),
		mut("absent", "no such text", ""),
	} {
		if _, err := mutantOverlay(root, []mutant{m}); err == nil {
			t.Errorf("mutant %s: built an overlay", m.name)
		} else {
			t.Log(err)
		}
	}
}
