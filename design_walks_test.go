package pinmalloc_test

// The walks of docs/design.md held against the code's calls (TestDesignWalksOrder): a walk is
// a path through the code, so each function it names after its first must be called by one it
// named before, and two functions called by the same one must come in the order of their calls.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// walkDepth is how many calls deep a function a walk names may lie below the one before it
// that calls it: the walks skip small helpers (a lock, a wrapper), not whole layers.
const walkDepth = 3

// indirect are the calls the walks follow that no name shows: a call of a function value (the
// field or variable named) reaches the functions listed, which are what it holds.
var indirect = map[string][]string{
	"free":  {"Pool.freeDeferred"}, // pinned's streamOrder.free, set by New
	"press": {"hookLink.call"},     // device's pressure hook, a uvm tier's link to its Relieve
}

// funcInfo is a function of the module: the names it calls, in the order of their calls.
type funcInfo struct {
	calls []string // callee names: a function's, or a method's without its receiver
}

// moduleFuncs parses every non-test Go file of the module (moduleSources) and
// returns its functions by "dir:Name" and "dir:Recv.Method", and by bare name (a method's
// without its receiver) every key that bears it.
func moduleFuncs(t *testing.T) (funcs map[string]*funcInfo, byName map[string][]string) {
	t.Helper()
	funcs, byName = map[string]*funcInfo{}, map[string][]string{}
	fset := token.NewFileSet()
	moduleSources(t, func(path string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				name = recvName(fd.Recv.List[0].Type) + "." + name
			}
			fi := &funcInfo{}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					switch fn := c.Fun.(type) {
					case *ast.Ident:
						fi.calls = append(fi.calls, fn.Name)
					case *ast.SelectorExpr:
						fi.calls = append(fi.calls, fn.Sel.Name)
					case *ast.IndexExpr: // a generic function or method, instantiated
						if sel, ok := fn.X.(*ast.SelectorExpr); ok {
							fi.calls = append(fi.calls, sel.Sel.Name)
						} else if id, ok := fn.X.(*ast.Ident); ok {
							fi.calls = append(fi.calls, id.Name)
						}
					}
				}
				return true
			})
			key := dir + ":" + name
			funcs[key] = fi
			bare := name[strings.LastIndex(name, ".")+1:]
			byName[bare] = append(byName[bare], key)
		}
		return nil
	})
	return funcs, byName
}

// walkFunc is a function a walk names: its key in moduleFuncs, where the doc names it, and
// whether it starts a new thread of the walk: the first function of a step that opens with
// "Later" (a later call that finds what the walk left, as an allocation finds a deferred free).
type walkFunc struct {
	key, where string
	later      bool
}

// designWalks returns each walk of docs/design.md's Walks section, by title, as the functions
// it names beside a file (or after one, in the same step: resolved in that file's package), in
// the order it names them.
func designWalks(t *testing.T, doc string, funcs map[string]*funcInfo) (titles []string, walks map[string][]walkFunc) {
	t.Helper()
	i := strings.Index(doc, "## Walks")
	if i < 0 {
		t.Fatalf("%s has no Walks section", designDoc)
	}
	sec := doc[i+len("## Walks"):]
	if j := strings.Index(sec, "\n## "); j >= 0 {
		sec = sec[:j]
	}
	walks = map[string][]walkFunc{}
	span := regexp.MustCompile("`[^`]+`")
	ident := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)
	for _, part := range strings.Split(sec, "\n### ")[1:] {
		title := part[:strings.Index(part, "\n")]
		titles = append(titles, title)
		dir := ""
		idx := regexp.MustCompile(`(?m)^(\d+)\. `).FindAllStringSubmatchIndex(part, -1)
		for k, at := range idx {
			end := len(part)
			if k+1 < len(idx) {
				end = idx[k+1][0]
			}
			step := part[at[1]:end]
			where := title + " step " + part[at[2]:at[3]]
			later := strings.HasPrefix(step, "Later")
			for _, sp := range span.FindAllString(step, -1) {
				s := strings.Trim(sp, "`")
				if strings.HasSuffix(s, ".go") {
					dir = filepath.ToSlash(filepath.Dir(s))
					continue
				}
				if dir == "" || !ident.MatchString(s) {
					continue
				}
				if _, ok := funcs[dir+":"+s]; ok {
					walks[title] = append(walks[title], walkFunc{key: dir + ":" + s, where: where, later: later})
					later = false
				}
			}
		}
	}
	return titles, walks
}

// TestDesignWalksOrder checks that every walk of docs/design.md follows the calls of the
// code: each function it names after its first is called by a function it named before, at
// most walkDepth calls below it (a method call reaches every method of its name: the check
// is by name, not by type; a call of a function value reaches what indirect lists), and when
// two functions it names one after the other are both called by the same function it named
// before them, their first calls there come in the walk's order.
func TestDesignWalksOrder(t *testing.T) {
	funcs, byName := moduleFuncs(t)
	titles, walks := designWalks(t, readDesign(t), funcs)
	imports := modulePackages(t)
	pkgOf := func(key string) string {
		if p := key[:strings.Index(key, ":")]; p != "." {
			return p
		}
		return rootName
	}
	sees := func(from, to string) bool { // a function of package from may call one of to
		return from == to || imports[from][to]
	}
	callees := func(key string) []string { // the keys a function's calls may reach
		var out []string
		from := pkgOf(key)
		for _, c := range funcs[key].calls {
			for _, k := range byName[c] {
				if sees(from, pkgOf(k)) {
					out = append(out, k)
				}
			}
			for _, ind := range indirect[c] {
				out = append(out, byName[ind[strings.LastIndex(ind, ".")+1:]]...)
			}
		}
		return out
	}
	reach := map[string]map[string]bool{} // key -> keys reachable within walkDepth
	reachable := func(from string) map[string]bool {
		if r, ok := reach[from]; ok {
			return r
		}
		r := map[string]bool{}
		frontier := []string{from}
		for range walkDepth {
			var next []string
			for _, k := range frontier {
				for _, c := range callees(k) {
					if !r[c] {
						r[c] = true
						next = append(next, c)
					}
				}
			}
			frontier = next
		}
		reach[from] = r
		return r
	}
	position := func(caller, callee string) int { // the first direct call of callee in caller
		name := callee[strings.LastIndex(callee, ".")+1:]
		name = name[strings.LastIndex(name, ":")+1:]
		for i, c := range funcs[caller].calls {
			if c == name {
				return i
			}
			for _, ind := range indirect[c] {
				if strings.HasSuffix(ind, "."+name) || ind == name {
					return i
				}
			}
		}
		return -1
	}
	checked := 0
	for _, title := range titles {
		w := walks[title]
		if len(w) < 3 {
			t.Errorf("%s: walk %q names %d functions of the module; a walk follows a path through the code", designDoc, title, len(w))
			continue
		}
		caller := make([]string, len(w)) // the nearest function named before that calls each
		for k := 1; k < len(w); k++ {
			f := w[k]
			if f.key == w[k-1].key || f.later {
				continue
			}
			for j := k - 1; j >= 0 && caller[k] == ""; j-- {
				if reachable(w[j].key)[f.key] {
					caller[k] = w[j].key
				}
			}
			checked++
			if caller[k] == "" {
				t.Errorf("%s: %s names %s, which no function the walk named before calls (within %d calls)", designDoc, f.where, f.key, walkDepth)
				continue
			}
			// Named after the one before it: where functions the walk named before both call
			// them directly, in the order of their calls there (in one of them at least).
			reversed, inOrder := "", false
			for j := k - 2; j >= 0; j-- {
				g := w[j].key
				pf, pp := position(g, f.key), position(g, w[k-1].key)
				switch {
				case pf < 0 || pp < 0 || pf == pp:
				case pf < pp:
					reversed = g
				default:
					inOrder = true
				}
			}
			if reversed != "" && !inOrder {
				t.Errorf("%s: %s names %s after %s, but %s calls it first", designDoc, f.where, f.key, w[k-1].key, reversed)
			}
		}
	}
	t.Logf("%d steps of %d walks checked against the calls", checked, len(titles))
	if checked < 50 {
		t.Fatalf("%s's walks name %d functions in order; the parse has gone wrong", designDoc, checked)
	}
}
