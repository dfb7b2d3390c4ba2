package pinmalloc_test

import (
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// godocWords are what a user's `go doc` must not send them to: a source file (its name moves
// and they do not read it), an issue of this project, "the notes above" of a comment go doc
// does not print.
var godocWords = regexp.MustCompile(`\b[A-Za-z0-9_/]+\.go\b|\b[Ii]ssue #?[0-9]+|\bnotes? above\b`)

// TestPublicDocs: the doc comments `go doc -all` prints for the public packages (the package's,
// and those of exported names, fields and methods) describe behaviour, not files or issues.
func TestPublicDocs(t *testing.T) {
	if raceEnabled {
		t.Skip("a check of the docs' text, one goroutine: nothing for the race detector (it runs in every go test without -race)")
	}
	t.Parallel()
	n := 0
	r := &repoTree{root: "."}
	pkgs := publicPackageNames(t)
	for _, dir := range publicPackages(t) {
		docs, unexported := publicDocs(t, dir)
		for _, d := range docs {
			n++
			// The names it gives (pkg.Name, pkg.Type.Member, Type.Member) are declared, as
			// the docs test checks the markdown's.
			text := "`" + strings.ReplaceAll(d.text, "`", "") + "`"
			text = strings.ReplaceAll(text, "\n", " ")
			for _, p := range append(r.docNameProblems(d.where, text, pkgs), r.docMemberProblems(d.where, text, pkgs)...) {
				_, why, _ := strings.Cut(p, ": `")
				if i := strings.LastIndex(why, "`: "); i >= 0 {
					why = why[i+3:]
				}
				t.Errorf("%s: the doc of %s: %s", d.where, d.name, why)
			}
			for _, m := range godocWords.FindAllString(d.text, -1) {
				t.Errorf("%s: the doc of %s names %q", d.where, d.name, m)
			}
			for _, w := range regexp.MustCompile(`\b[a-z]+[A-Z][A-Za-z0-9]*\b`).FindAllString(d.text, -1) {
				if unexported[w] {
					t.Errorf("%s: the doc of %s names %s, which the user cannot see", d.where, d.name, w)
				}
			}
		}
	}
	if n < 200 {
		t.Fatalf("read %d doc comments: the walk is looking in the wrong place", n)
	}
}

// TestPublicDocsCatches: the check finds each word it looks for.
func TestPublicDocsCatches(t *testing.T) {
	for _, s := range []string{"see kept.go", "(arena/numa.go)", "issue 25", "the notes above"} {
		if !godocWords.MatchString(s) {
			t.Errorf("%q passes the check", s)
		}
	}
	for _, s := range []string{"go.mod", "the Go runtime", "it issues 25 calls"} {
		if m := godocWords.FindString(s); m != "" && s != "go.mod" {
			t.Errorf("%q fails the check (%q)", s, m)
		}
	}
}

// publicPackages returns the folders of the library's packages a user imports, the integration
// modules' included: not internal, not a command or an example, not another nested module.
func publicPackages(t *testing.T) []string {
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		base := d.Name()
		if path != "." && (strings.HasPrefix(base, ".") || base == "internal" || base == "examples" || base == "cmd" || base == "testdata" || base == "vendor") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != "." && !isLibraryModule(path) {
			return filepath.SkipDir
		}
		if m, _ := filepath.Glob(filepath.Join(path, "*.go")); len(m) > 0 {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

type docText struct{ where, name, text string }

// membersOf returns the fields of a struct type or the methods of an interface type, else nil.
func membersOf(t ast.Expr) *ast.FieldList {
	switch t := t.(type) {
	case *ast.StructType:
		return t.Fields
	case *ast.InterfaceType:
		return t.Methods
	}
	return nil
}

// publicDocs returns the doc comments go doc prints for the package in dir, and the package's
// unexported names (functions, methods, types, constants, variables).
func publicDocs(t *testing.T, dir string) ([]docText, map[string]bool) {
	fset := token.NewFileSet()
	var files []*ast.File
	m, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range m {
		if ok, err := build.Default.MatchFile(dir, filepath.Base(f)); err != nil || !ok || strings.HasSuffix(f, "_test.go") {
			continue // a test, or a file no build of the package includes (mksizeclasses.go)
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, af)
	}
	if len(files) == 0 {
		return nil, nil
	}
	unexported := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				unexported[d.Name.Name] = !d.Name.IsExported()
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						unexported[s.Name.Name] = !s.Name.IsExported()
					case *ast.ValueSpec:
						for _, n := range s.Names {
							unexported[n.Name] = !n.IsExported()
						}
					}
				}
			}
		}
	}
	p, err := doc.NewFromFiles(fset, files, module+"/"+dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []docText
	add := func(name string, pos token.Pos, text string) {
		if text != "" {
			out = append(out, docText{fset.Position(pos).String(), name, text})
		}
	}
	add("package "+p.Name, files[0].Package, p.Doc)
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			add(strings.Join(v.Names, ", "), v.Decl.Pos(), v.Doc)
			for _, s := range v.Decl.Specs {
				if vs, ok := s.(*ast.ValueSpec); ok && vs.Names[0].IsExported() {
					add(vs.Names[0].Name, vs.Pos(), vs.Doc.Text()+vs.Comment.Text())
				}
			}
		}
	}
	funcs := func(prefix string, fs []*doc.Func) {
		for _, f := range fs {
			add(prefix+f.Name, f.Decl.Pos(), f.Doc)
		}
	}
	values(p.Consts)
	values(p.Vars)
	funcs("", p.Funcs)
	for _, ty := range p.Types {
		add(ty.Name, ty.Decl.Pos(), ty.Doc)
		values(ty.Consts)
		values(ty.Vars)
		funcs("", ty.Funcs)
		funcs(ty.Name+".", ty.Methods)
		for _, s := range ty.Decl.Specs {
			ts, ok := s.(*ast.TypeSpec)
			if !ok {
				continue
			}
			fields := membersOf(ts.Type)
			if fields == nil {
				continue
			}
			for _, f := range fields.List {
				if len(f.Names) == 0 || !f.Names[0].IsExported() {
					continue
				}
				add(ty.Name+"."+f.Names[0].Name, f.Pos(), f.Doc.Text()+f.Comment.Text())
			}
		}
	}
	return out, unexported
}
