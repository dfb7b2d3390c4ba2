package pinmalloc_test

// The commands, paths, flags and environment variables the docs quote, held against the tree:
// docCommands extracts every shell command of README.md, docs/*.md and bench/results/*.md (code
// blocks and inline code), checkDocCommand checks what each names (a package a go command can
// build from the folder it runs in, a flag its program or test binary defines, a build tag some
// file uses, a test -run can match, a script, a variable the code reads), and docPathProblems
// checks the files and variables the prose names. docs_test.go runs the cheap commands for real.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// docCommand is one shell command quoted in a doc: where (doc:line), its text, and the folder,
// relative to the repository root, it runs in.
type docCommand struct {
	where, text, dir string
}

// docHome is the folder a doc's paths and its commands without a cd are relative to, besides
// the repository's root: docs/bench.md speaks of bench's own `go run .` and `results/`, as
// bench/results' notes do.
func docHome(doc string) string {
	if doc == "docs/bench.md" || strings.HasPrefix(doc, "bench/") {
		return "bench"
	}
	return "."
}

// docDotRun matches a command that runs the package of the folder it is in.
var docDotRun = regexp.MustCompile(`^(?:[A-Z][A-Z0-9_]*=\S*\s+)*go (?:run|test|build|vet)(?: -\S+)* \.(?: |$)`)

// startDir is the folder a command outside a code block (or first in one) starts in.
func startDir(doc, cmd string) string {
	if docDotRun.MatchString(cmd) {
		return docHome(doc)
	}
	return "."
}

var (
	docFence    = regexp.MustCompile("^\\s*```\\s*([A-Za-z]*)")
	docInline   = regexp.MustCompile("`([^`\n]+)`")
	docIsShell  = regexp.MustCompile(`^(?:[A-Z][A-Z0-9_]*=\S*\s+)*(?:go (?:run|test|build|vet|doc|install|generate)\b|cd \S+ && |scripts/|bash scripts/|\.ci/|\./)`)
	docLinkRe   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	docPathRe   = regexp.MustCompile(`^(?:\./)?[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+/?$`)
	docGoFileRe = regexp.MustCompile(`^[A-Za-z0-9_]+\.go$`)
	docIdentRe  = regexp.MustCompile(`\.[A-Z]\w*$`) // internal/cuda.Lacks: a name, not a file
	docEnvRe    = regexp.MustCompile(`\bPINMALLOC_[A-Z0-9_]*[A-Z0-9]\b`)
)

// docCommands returns the shell commands of one doc: each line of a sh, bash or unlabelled code
// block that starts like a command (a cd on its own line carries to the block's next lines), and
// each inline code span that does.
func docCommands(doc, text string) []docCommand {
	var cmds []docCommand
	lines := strings.Split(text, "\n")
	inBlock, shell := false, false
	dir := ""
	for i, l := range lines {
		where := doc + ":" + strconv.Itoa(i+1)
		if m := docFence.FindStringSubmatch(l); m != nil {
			inBlock = !inBlock
			lang := strings.ToLower(m[1])
			shell = inBlock && (lang == "" || lang == "sh" || lang == "bash" || lang == "shell" || lang == "console")
			dir = ""
			continue
		}
		if inBlock {
			if !shell {
				continue
			}
			c := strings.TrimSpace(stripComment(l))
			if c == "" || !docIsShell.MatchString(c) && !strings.HasPrefix(c, "cd ") {
				continue
			}
			if dir == "" {
				dir = startDir(doc, c)
			}
			cmds = append(cmds, docCommand{where, c, dir})
			if w := shellWords(c); len(w) > 1 && w[0] == "cd" && (len(w) == 2 || w[2] == "&&") {
				dir = filepath.Join(dir, w[1]) // the shell stays there for the block's next lines
			}
			continue
		}
		for _, m := range docInline.FindAllStringSubmatch(l, -1) {
			if c := strings.TrimSpace(m[1]); docIsShell.MatchString(c) {
				cmds = append(cmds, docCommand{where, c, startDir(doc, c)})
			}
		}
	}
	return cmds
}

// stripComment removes a shell comment (a # after a space, outside quotes).
func stripComment(l string) string {
	quote := byte(0)
	for i := 0; i < len(l); i++ {
		switch c := l[i]; {
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '\'' || c == '"'):
			quote = c
		case quote == 0 && c == '#' && (i == 0 || l[i-1] == ' '):
			return l[:i]
		}
	}
	return l
}

// shellWords splits a command into words, single and double quotes kept together and removed.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	quote, in := byte(0), false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			w.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// placeholder reports whether a word stands for something the reader supplies (DIR, FILE,
// <name>, [-quick], REGEXP).
func placeholder(w string) bool {
	return strings.ContainsAny(w, "<>[]$*") || regexp.MustCompile(`^-?[A-Z][A-Z0-9_]*$`).MatchString(w)
}

// repoTree answers what the checks ask of the repository at root.
type repoTree struct {
	root  string
	env   map[string]bool        // the PINMALLOC_ variables some source file names
	names map[string]bool        // the base names of the repository's files (fileNamed)
	files map[string][]*ast.File // goFiles' answers, by folder and kind
	// exported holds exportedNames' answers by folder; members maps each public type name to
	// its members over every public package (docMemberProblems).
	exported map[string]map[string]bool
	members  map[string]map[string]bool
}

func (r *repoTree) exists(rel string) bool {
	_, err := os.Stat(filepath.Join(r.root, rel))
	return err == nil
}

// moduleOf returns the folder (relative to root) of the go.mod that governs rel.
func (r *repoTree) moduleOf(rel string) string {
	for d := filepath.Clean(rel); ; d = filepath.Dir(d) {
		if r.exists(filepath.Join(d, "go.mod")) {
			return d
		}
		if d == "." || d == "/" {
			return "."
		}
	}
}

// goFiles parses the Go files of a package folder: its test files or the others.
func (r *repoTree) goFiles(dir string, tests bool) []*ast.File {
	key := fmt.Sprint(dir, tests)
	if files, ok := r.files[key]; ok {
		return files
	}
	if r.files == nil {
		r.files = map[string][]*ast.File{}
	}
	ents, _ := os.ReadDir(filepath.Join(r.root, dir))
	var files []*ast.File
	defer func() { r.files[key] = files }()
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") != tests {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(r.root, dir, n), nil, parser.ParseComments)
		if err == nil {
			files = append(files, f)
		}
	}
	return files
}

// definedFlags returns the flags the Go files define (flag.Bool("name", ...), fs.IntVar(&v,
// "name", ...), ...), each mapped to whether it is a boolean flag (which takes no value).
func definedFlags(files []*ast.File) map[string]bool {
	nameArg := map[string]int{"Bool": 0, "BoolFunc": 0, "Int": 0, "Int64": 0, "Uint": 0, "Uint64": 0, "String": 0,
		"Float64": 0, "Duration": 0, "Func": 0, "BoolVar": 1, "IntVar": 1, "Int64Var": 1, "UintVar": 1,
		"Uint64Var": 1, "StringVar": 1, "Float64Var": 1, "DurationVar": 1, "Var": 1, "TextVar": 1}
	flags := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			i, ok := nameArg[sel.Sel.Name]
			if !ok || len(call.Args) <= i+1 {
				return true
			}
			if lit, ok := call.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				name, _ := strconv.Unquote(lit.Value)
				flags[name] = strings.HasPrefix(sel.Sel.Name, "Bool")
			}
			return true
		})
	}
	return flags
}

// testNames returns the Test, Benchmark, Example and Fuzz functions of test files.
func testNames(files []*ast.File) []string {
	var names []string
	for _, f := range files {
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && regexp.MustCompile(`^(Test|Benchmark|Example|Fuzz)`).MatchString(fn.Name.Name) {
				names = append(names, fn.Name.Name)
			}
		}
	}
	return names
}

// buildTags returns the identifiers the //go:build lines of the Go files of a module use (its
// folder, nested modules included: a tag is rare enough).
func (r *repoTree) buildTags(mod string) map[string]bool {
	tags := map[string]bool{}
	_ = filepath.WalkDir(filepath.Join(r.root, mod), func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "vendor" {
			return filepath.SkipDir
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "//go:build ") {
				for _, w := range regexp.MustCompile(`[A-Za-z0-9_.]+`).FindAllString(l[len("//go:build "):], -1) {
					tags[w] = true
				}
			}
		}
		return nil
	})
	return tags
}

// goFlagArgs are the go command's own flags that take a value (go run, test, build).
var goFlagArgs = map[string]bool{"-tags": true, "-run": true, "-bench": true, "-count": true, "-timeout": true,
	"-o": true, "-cpu": true, "-benchtime": true, "-fuzz": true, "-fuzztime": true, "-coverprofile": true,
	"-skip": true, "-p": true, "-ldflags": true, "-gcflags": true, "-exec": true, "-parallel": true}

// goTestFlags are go test's flags and the test binary's own, without values.
var goTestFlags = map[string]bool{"-v": true, "-c": true, "-race": true, "-short": true, "-list": true,
	"-cover": true, "-json": true, "-failfast": true, "-benchmem": true, "-x": true, "-n": true, "-a": true}

// checkDocCommand checks one command: what it names exists, and what it passes is defined.
func (r *repoTree) checkDocCommand(c docCommand) []string {
	var problems []string
	bad := func(format string, args ...any) {
		problems = append(problems, c.where+": `"+c.text+"`: "+fmt.Sprintf(format, args...))
	}
	dir := c.dir
	for _, part := range regexp.MustCompile(`&&|;|\|\|?`).Split(c.text, -1) {
		words := shellWords(strings.TrimSpace(part))
		for len(words) > 0 && regexp.MustCompile(`^[A-Z][A-Z0-9_]*=`).MatchString(words[0]) {
			if v := words[0][:strings.IndexByte(words[0], '=')]; strings.HasPrefix(v, "PINMALLOC_") && !r.env[v] {
				bad("no source file reads %s", v)
			}
			words = words[1:]
		}
		if len(words) == 0 {
			continue
		}
		switch {
		case words[0] == "cd":
			if len(words) > 1 && !placeholder(words[1]) {
				dir = filepath.Join(dir, words[1])
				if !r.exists(dir) {
					bad("no folder %s", dir)
				}
			}
		case words[0] == "go" && len(words) > 1:
			problems = append(problems, r.checkGo(c, dir, words[1], words[2:])...)
		case words[0] == "bash" && len(words) > 1:
			if !r.exists(filepath.Join(dir, words[1])) {
				bad("no file %s", filepath.Join(dir, words[1]))
			}
		case strings.Contains(words[0], "/") && !placeholder(words[0]):
			if !r.exists(filepath.Join(dir, words[0])) {
				bad("no file %s", filepath.Join(dir, words[0]))
			}
		}
	}
	return problems
}

// checkGo checks a go command: its packages build from dir (inside dir's module; a main
// package for go run), its tags are used, its -run matches a test, its flags are defined.
func (r *repoTree) checkGo(c docCommand, dir, verb string, args []string) []string {
	var problems []string
	bad := func(format string, a ...any) {
		problems = append(problems, c.where+": `"+c.text+"`: "+fmt.Sprintf(format, a...))
	}
	var pkgs, rest []string
	var tags, run string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		switch {
		case len(pkgs) > 0 && verb == "run":
			rest = append(rest, a) // the program's arguments
		case goFlagArgs[name]:
			if !hasVal && i+1 < len(args) {
				i++
				val = args[i]
			}
			switch name {
			case "-tags":
				tags = val
			case "-run":
				run = val
			}
		case goTestFlags[name] || placeholder(a) && strings.HasPrefix(a, "-"):
		case strings.HasPrefix(a, "-"):
			rest = append(rest, a)
			if verb == "test" && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && !hasVal {
				i++ // a test binary flag's value (checked as non-boolean below)
				rest = append(rest, args[i])
			}
		default:
			pkgs = append(pkgs, a)
		}
	}
	if verb == "doc" {
		return nil // docs_test.go runs go doc for real
	}
	if len(pkgs) == 0 && (verb == "run" || verb == "test") {
		pkgs = []string{"."}
	}
	for _, p := range pkgs {
		if placeholder(p) || (verb == "test" && len(rest) > 0 && p == rest[len(rest)-1]) {
			continue
		}
		rel := strings.TrimSuffix(p, "/...")
		switch {
		case strings.HasPrefix(rel, module):
			rel = strings.TrimPrefix(strings.TrimPrefix(rel, module), "/")
			if rel == "" {
				rel = "."
			}
		case rel == "." || strings.HasPrefix(rel, "./") || strings.HasPrefix(rel, "../"):
			rel = filepath.Join(dir, rel)
		default:
			if verb == "run" {
				bad("go run %s: not a path in this repository", p)
			}
			continue
		}
		if !r.exists(rel) {
			bad("no package %s", rel)
			continue
		}
		if strings.HasPrefix(p, "./") || p == "." {
			if m, own := r.moduleOf(dir), r.moduleOf(rel); m != own {
				bad("%s is in the module at %s, not in the one at %s (go says \"main module does not contain package\"): cd %s first", rel, own, m, own)
				continue
			}
		}
		if tags != "" {
			used := r.buildTags(r.moduleOf(rel))
			for _, tag := range strings.Split(tags, ",") {
				if !used[tag] {
					bad("no file of the module at %s has a //go:build line with %s", r.moduleOf(rel), tag)
				}
			}
		}
		if run != "" && run != "^$" { // ^$: no test, the idiom of a benchmark's command
			re, err := regexp.Compile(strings.Split(run, "/")[0])
			found := false
			for _, n := range testNames(r.goFiles(rel, true)) {
				found = found || err == nil && re.MatchString(n)
			}
			if !found {
				bad("-run %s matches no test of %s", run, rel)
			}
		}
		if verb == "run" && r.writesOverResults(rel, rest) {
			bad("writes over the committed results in %s: leave -out to its default or give a -name of your own", filepath.Join(rel, "results"))
		}
		var defined map[string]bool
		switch verb {
		case "run":
			files := r.goFiles(rel, false)
			if len(files) == 0 || files[0].Name.Name != "main" {
				bad("%s is not a main package", rel)
				continue
			}
			defined = definedFlags(files)
		case "test":
			defined = definedFlags(r.goFiles(rel, true))
		default:
			continue
		}
		for i := 0; i < len(rest); i++ {
			if !strings.HasPrefix(rest[i], "-") || placeholder(rest[i]) {
				if verb == "run" {
					break // the program's positional arguments: flags end here
				}
				continue
			}
			name, _, hasVal := strings.Cut(strings.TrimLeft(rest[i], "-"), "=")
			isBool, ok := defined[name]
			if !ok && !(verb == "run" && (name == "h" || name == "help")) {
				bad("%s defines no flag -%s", rel, name)
			}
			if ok && !isBool && !hasVal {
				i++
			}
		}
	}
	return problems
}

// writesOverResults reports whether a run of bench (at rel) with these arguments writes into
// its committed results folder under a name whose results are committed there (cpu-<N>core,
// the default name, for any N).
func (r *repoTree) writesOverResults(rel string, args []string) bool {
	out, name := "", ""
	for i := 0; i < len(args); i++ {
		a, v, has := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !has && i+1 < len(args) && (a == "out" || a == "name") {
			i++
			v = args[i]
		}
		switch a {
		case "out":
			out = v
		case "name":
			name = v
		}
	}
	if out == "" || !r.exists(filepath.Join(rel, "results")) || filepath.Clean(filepath.Join(rel, out)) != filepath.Join(rel, "results") {
		return false
	}
	if name == "" {
		m, _ := filepath.Glob(filepath.Join(r.root, rel, "results", "cpu-*core.json"))
		return len(m) > 0
	}
	return r.exists(filepath.Join(rel, "results", name+".json"))
}

// docPathProblems checks the prose of a doc: each relative link, each inline code span that is
// a path into the repository (its first element a top-level file or folder) or a Go or C file's
// name, and each PINMALLOC_ variable must exist.
func (r *repoTree) docPathProblems(doc, text string) []string {
	var problems []string
	tops := map[string]bool{}
	ents, _ := os.ReadDir(r.root)
	for _, e := range ents {
		tops[e.Name()] = true
	}
	for i, l := range strings.Split(text, "\n") {
		where := doc + ":" + strconv.Itoa(i+1)
		for _, m := range docLinkRe.FindAllStringSubmatch(l, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if !r.exists(filepath.Join(filepath.Dir(doc), target)) {
				problems = append(problems, where+": link to "+m[1]+": no such file")
			}
		}
		for _, m := range docInline.FindAllStringSubmatch(l, -1) {
			span := strings.TrimSpace(m[1])
			if strings.HasPrefix(span, module+"/") {
				span = strings.TrimPrefix(span, module+"/")
			}
			switch {
			case docIdentRe.MatchString(span):
			case docPathRe.MatchString(span) && tops[strings.Split(strings.TrimPrefix(span, "./"), "/")[0]]:
				if !r.exists(span) && !r.exists(filepath.Join(docHome(doc), span)) {
					problems = append(problems, where+": `"+m[1]+"`: no such file or folder")
				}
			case docPathRe.MatchString(span) && docHome(doc) != "." && r.exists(filepath.Join(docHome(doc), strings.Split(span, "/")[0])):
				if !r.exists(filepath.Join(docHome(doc), span)) {
					problems = append(problems, where+": `"+m[1]+"`: no such file or folder in "+docHome(doc))
				}
			case docGoFileRe.MatchString(span):
				if !r.fileNamed(span) {
					problems = append(problems, where+": `"+span+"`: no file of that name in the repository")
				}
			}
		}
		for _, v := range docEnvRe.FindAllString(l, -1) {
			if !r.env[v] {
				problems = append(problems, where+": "+v+": no source file reads it")
			}
		}
	}
	return problems
}

// fileNamed reports whether some file of the repository has this base name.
func (r *repoTree) fileNamed(name string) bool {
	if r.names == nil {
		r.names = map[string]bool{}
		_ = filepath.WalkDir(r.root, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor") && path != r.root {
				return filepath.SkipDir
			}
			r.names[d.Name()] = true
			return nil
		})
	}
	return r.names[name]
}

// sourceEnv returns the PINMALLOC_ variables the repository's Go files, scripts and CI name
// (docs excluded).
func sourceEnv(root string) map[string]bool {
	env := map[string]bool{}
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if n := d.Name(); n != "." && path != root && (strings.HasPrefix(n, ".") && n != ".ci" || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			return nil
		}
		if !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".c") && !strings.Contains(path, "scripts/") && !strings.Contains(path, ".ci/") {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, v := range docEnvRe.FindAllString(string(b), -1) {
			env[v] = true
		}
		return nil
	})
	return env
}

// docNameRe finds a qualified name in a doc's inline code: pinned.Options, device.Heap.Alloc.
var docNameRe = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Z][A-Za-z0-9_]*))?`)

// exportedNames returns, for a package folder, its exported top-level names and, for each of its
// types, "Type.Member" for its methods and fields (embedded types' included by their name).
func (r *repoTree) exportedNames(dir string) map[string]bool {
	if names, ok := r.exported[dir]; ok {
		return names
	}
	if r.exported == nil {
		r.exported = map[string]map[string]bool{}
	}
	names := map[string]bool{}
	r.exported[dir] = names
	for _, f := range r.goFiles(dir, false) {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names[d.Name.Name] = true
					continue
				}
				t := d.Recv.List[0].Type
				if s, ok := t.(*ast.StarExpr); ok {
					t = s.X
				}
				if ix, ok := t.(*ast.IndexExpr); ok {
					t = ix.X
				}
				if id, ok := t.(*ast.Ident); ok {
					names[id.Name+"."+d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
						names[s.Name.Name+"#type"] = true
						fields := membersOf(s.Type)
						if fields == nil {
							continue
						}
						for _, fl := range fields.List {
							for _, n := range fl.Names {
								names[s.Name.Name+"."+n.Name] = true
							}
							if len(fl.Names) == 0 { // embedded: its name
								t := fl.Type
								if st, ok := t.(*ast.StarExpr); ok {
									t = st.X
								}
								switch t := t.(type) {
								case *ast.Ident:
									names[s.Name.Name+"."+t.Name] = true
								case *ast.SelectorExpr:
									names[s.Name.Name+"."+t.Sel.Name] = true
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	return names
}

// docNameProblems checks the qualified names a doc's inline code gives (pkg.Name and
// pkg.Type.Member, for the module's public packages by their names): each must be declared.
func (r *repoTree) docNameProblems(doc, text string, pkgs map[string]string) []string {
	var problems []string
	for i, l := range strings.Split(text, "\n") {
		for _, span := range docInline.FindAllStringSubmatch(l, -1) {
			for _, ix := range docNameRe.FindAllStringSubmatchIndex(span[1], -1) {
				if ix[0] > 0 && span[1][ix[0]-1] == '/' {
					continue // internal/cuda.Lacks: a package of the same name elsewhere
				}
				m := []string{span[1][ix[0]:ix[1]], span[1][ix[2]:ix[3]], span[1][ix[4]:ix[5]], ""}
				if ix[6] >= 0 {
					m[3] = span[1][ix[6]:ix[7]]
				}
				dir, ok := pkgs[m[1]]
				if !ok {
					continue
				}
				names := r.exportedNames(dir)
				switch {
				case !names[m[2]]:
					problems = append(problems, fmt.Sprintf("%s:%d: `%s`: package %s declares no %s", doc, i+1, span[1], m[1], m[2]))
				case m[3] != "" && names[m[2]+"#type"] && !names[m[2]+"."+m[3]]:
					problems = append(problems, fmt.Sprintf("%s:%d: `%s`: %s.%s has no method or field %s", doc, i+1, span[1], m[1], m[2], m[3]))
				}
			}
		}
	}
	return problems
}

// docMemberRe finds an unqualified Type.Member in a doc's inline code: Options.Quota,
// Pool.DevicePointer.
var docMemberRe = regexp.MustCompile(`\b([A-Z][A-Za-z0-9]*)\.([A-Z][A-Za-z0-9_]*)\b`)

// docMemberProblems checks each unqualified Type.Member of a doc's inline code whose Type is a
// type of a public package: some such type (any package's: the doc's context says which) must
// have the member.
func (r *repoTree) docMemberProblems(doc, text string, pkgs map[string]string) []string {
	if r.members == nil {
		r.members = r.typeMembers(pkgs)
	}
	members := r.members
	var problems []string
	for i, l := range strings.Split(text, "\n") {
		for _, span := range docInline.FindAllStringSubmatch(l, -1) {
			for _, ix := range docMemberRe.FindAllStringSubmatchIndex(span[1], -1) {
				if ix[0] > 0 && (span[1][ix[0]-1] == '.' || span[1][ix[0]-1] == '/') {
					continue // pkg.Type.Member: docNameProblems checks it
				}
				typ, member := span[1][ix[2]:ix[3]], span[1][ix[4]:ix[5]]
				if m, ok := members[typ]; ok && !m[member] {
					problems = append(problems, fmt.Sprintf("%s:%d: `%s`: no public type %s has a method or field %s", doc, i+1, span[1], typ, member))
				}
			}
		}
	}
	return problems
}

// typeMembers maps each type name of the packages to its members, over all of them.
func (r *repoTree) typeMembers(pkgs map[string]string) map[string]map[string]bool {
	members := map[string]map[string]bool{}
	for _, dir := range pkgs {
		for n := range r.exportedNames(dir) {
			typ, member, ok := strings.Cut(n, ".")
			if ok || strings.HasSuffix(n, "#type") {
				typ = strings.TrimSuffix(typ, "#type")
				if members[typ] == nil {
					members[typ] = map[string]bool{}
				}
				members[typ][member] = true
			}
		}
	}
	return members
}
