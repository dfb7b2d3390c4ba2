package pinmalloc_test

// docs/design.md held against the tree: the floors of its Layers table against the imports
// of every package of the module (TestLayers), and every file and function its walks name
// against the source (TestDesignWalks). A package added, an import that points upward, a
// function renamed or moved: each fails here until the doc says so.

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const (
	module    = "github.com/pinmalloc/pinmalloc"
	designDoc = "docs/design.md"
	rootName  = "pinmalloc" // the root package's name in the Layers table
)

// readDesign returns docs/design.md.
func readDesign(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(designDoc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// floorsOf parses the Layers table of the doc: package (relative to the module, rootName for
// the root) to floor.
func floorsOf(t *testing.T, doc string) map[string]int {
	t.Helper()
	i := strings.Index(doc, "## Layers")
	if i < 0 {
		t.Fatalf("%s has no Layers section", designDoc)
	}
	sec := doc[i+len("## Layers"):]
	if j := strings.Index(sec, "\n## "); j >= 0 {
		sec = sec[:j]
	}
	row := regexp.MustCompile(`(?m)^\|\s*(\d+)\s*\|([^|]*)\|`)
	pkg := regexp.MustCompile("`([^`]+)`")
	floors := map[string]int{}
	for _, m := range row.FindAllStringSubmatch(sec, -1) {
		f, _ := strconv.Atoi(m[1])
		for _, p := range pkg.FindAllStringSubmatch(m[2], -1) {
			if prev, ok := floors[p[1]]; ok {
				t.Errorf("%s: package %s on floors %d and %d", designDoc, p[1], prev, f)
			}
			floors[p[1]] = f
		}
	}
	if len(floors) < 10 {
		t.Fatalf("%s: the Layers table names %d packages; want every package of the module", designDoc, len(floors))
	}
	return floors
}

// ignored reports whether a file is left out of every build (//go:build ignore: a generator).
func ignored(f *ast.File) bool {
	for _, g := range f.Comments {
		if g.Pos() > f.Package {
			break
		}
		for _, c := range g.List {
			if constraint.IsGoBuild(c.Text) {
				if x, err := constraint.Parse(c.Text); err == nil && strings.Contains(x.String(), "ignore") {
					return true
				}
			}
		}
	}
	return false
}

// modulePackages returns the library's packages (relative paths, rootName for the root), each
// with the library packages its non-test files import under any build tags: moduleSources' files.
func modulePackages(t *testing.T) map[string]map[string]bool {
	t.Helper()
	pkgs := map[string]map[string]bool{}
	fset := token.NewFileSet()
	moduleSources(t, func(path string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if ignored(f) {
			return nil
		}
		pkg := filepath.ToSlash(filepath.Dir(path))
		if pkg == "." {
			pkg = rootName
		}
		if pkgs[pkg] == nil {
			pkgs[pkg] = map[string]bool{}
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			switch {
			case p == module:
				pkgs[pkg][rootName] = true
			case strings.HasPrefix(p, module+"/"):
				pkgs[pkg][strings.TrimPrefix(p, module+"/")] = true
			}
		}
		return nil
	})
	return pkgs
}

// moduleSources calls f with the path of every non-test Go file of the library, the integration
// modules' (metrics, debugpage) included: directories with a go.mod of their own that are not the
// library's (bench, examples/external), testdata, vendor and hidden directories are left out.
func moduleSources(t *testing.T, f func(path string) error) {
	t.Helper()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if path != "." && !isLibraryModule(path) {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		return f(path)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLayers checks that every import points down the Layers table of docs/design.md (on the
// ground floor, sideways too),
// that every package of the module stands on a floor, and that every package the table names
// exists.
func TestLayers(t *testing.T) {
	floors := floorsOf(t, readDesign(t))
	pkgs := modulePackages(t)
	var names []string
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		fp, ok := floors[p]
		if !ok {
			t.Errorf("package %s stands on no floor of %s's Layers table: place it", p, designDoc)
			continue
		}
		var imps []string
		for q := range pkgs[p] {
			imps = append(imps, q)
		}
		sort.Strings(imps)
		for _, q := range imps {
			switch fq, ok := floors[q]; {
			case !ok:
			case fq > fp:
				t.Errorf("%s (floor %d) imports %s (floor %d): an import that points upward", p, fp, q, fq)
			case fq == fp && fp > 1:
				t.Errorf("%s imports %s, on its own floor %d: only the ground floor's leaves import each other", p, q, fp)
			}
		}
	}
	for p := range floors {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("%s's Layers table names %s, which is no package of the module", designDoc, p)
		}
	}
}

// walkStep matches a file and a function named side by side: `heap/alloc.go` `Heap.Alloc`.
var walkStep = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.go)`\\s+`([A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)?)`")

// TestDesignWalks checks that every function docs/design.md names beside a file is declared
// in that file: Recv.Method for a method (pointer or not), Func for a function. Steps that go
// on naming functions without a file (`Heap.alloc` after `device/alloc.go` `Heap.Alloc`) are
// checked in the file named last before them in the same walk step.
func TestDesignWalks(t *testing.T) {
	doc := readDesign(t)
	i := strings.Index(doc, "## Walks")
	if i < 0 {
		t.Fatalf("%s has no Walks section", designDoc)
	}
	walks := doc[i:]
	if j := strings.Index(walks[len("## Walks"):], "\n## "); j >= 0 {
		walks = walks[:len("## Walks")+j]
	}
	decls := map[string]map[string]bool{} // file -> declared names
	declsOf := func(file string) map[string]bool {
		if d, ok := decls[file]; ok {
			return d
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("%s names %s: %v", designDoc, file, err)
			decls[file] = nil
			return nil
		}
		d := map[string]bool{}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				name = recvName(fd.Recv.List[0].Type) + "." + name
			}
			d[name] = true
		}
		decls[file] = d
		return d
	}

	// A step is a numbered item: from "\n1. " to the next one or a heading.
	step := regexp.MustCompile(`(?m)^\d+\. `)
	bare := regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_]*\\.[A-Za-z_][A-Za-z0-9_]*)`")
	checked := 0
	idx := step.FindAllStringIndex(walks, -1)
	for k, at := range idx {
		end := len(walks)
		if k+1 < len(idx) {
			end = idx[k+1][0]
		}
		text := walks[at[0]:end]
		walk := walks[strings.LastIndex(walks[:at[0]], "\n### ")+len("\n### "):]
		walk = walk[:strings.Index(walk, "\n")] + " step " + strings.Fields(text)[0]
		if h := strings.Index(text, "\n#"); h >= 0 {
			text = text[:h]
		}
		// Walk the step's code spans in order: a file sets the file for what follows.
		spans := regexp.MustCompile("`[^`]+`").FindAllStringIndex(text, -1)
		file := ""
		for n, sp := range spans {
			s := text[sp[0]:sp[1]]
			if m := walkStep.FindStringSubmatch(text[sp[0]:]); m != nil && strings.HasPrefix(text[sp[0]:], m[0]) {
				file = m[1]
				if d := declsOf(file); d != nil && !d[m[2]] {
					t.Errorf("%s: %s names %s, which %s does not declare", designDoc, walk, m[2], file)
				}
				checked++
				continue
			}
			if strings.HasSuffix(s, ".go`") {
				continue // a file on its own, or the file of the pair checked above
			}
			if n > 0 && strings.HasSuffix(text[spans[n-1][0]:spans[n-1][1]], ".go`") && strings.TrimSpace(text[spans[n-1][1]:sp[0]]) == "" {
				continue // the function of a pair, checked above
			}
			if m := bare.FindStringSubmatch(s); m != nil && m[0] == s && file != "" {
				if d := declsOf(file); d != nil && !d[m[1]] && !declaredNear(t, file, m[1]) {
					t.Errorf("%s: %s names %s after %s, and no file of that package declares it", designDoc, walk, m[1], file)
				}
				checked++
			}
		}
	}
	t.Logf("%d functions named by the walks checked", checked)
	if checked < 60 {
		t.Fatalf("%s's walks name %d functions; the parse has gone wrong", designDoc, checked)
	}
}

// declaredNear reports whether a file of file's package declares method or function name, for a
// function a step names after a file of the same package.
func declaredNear(t *testing.T, file, name string) bool {
	t.Helper()
	dir := filepath.Dir(file)
	matches, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, path := range matches {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok {
				n := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) == 1 {
					n = recvName(fd.Recv.List[0].Type) + "." + n
				}
				if n == name {
					return true
				}
			}
		}
	}
	return false
}

// recvName is the type name of a receiver: T for T, *T, T[P] and *T[P].
func recvName(x ast.Expr) string {
	for {
		switch e := x.(type) {
		case *ast.StarExpr:
			x = e.X
		case *ast.IndexExpr:
			x = e.X
		case *ast.IndexListExpr:
			x = e.X
		case *ast.Ident:
			return e.Name
		default:
			return ""
		}
	}
}
