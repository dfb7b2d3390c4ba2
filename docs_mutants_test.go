package pinmalloc_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestReadmeCountsTheMutants: README's long form says how many of the stream-order checker's
// mutants it builds ("its N mutants built into one test binary a package"); N is the length of
// internal/streamcheck's mutants list, which every ordering bug fixed grows by one.
func TestReadmeCountsTheMutants(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	said := regexp.MustCompile(`its\s+(\d+)\s+mutants\s+built\s+into\s+one\s+test\s+binary`)
	m := said.FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md no longer says how many mutants the long form builds " +
			"(\"its N mutants built into one test binary\"): update this test")
	}
	readmeCount, _ := strconv.Atoi(string(m[1]))
	if n := countMutants(t); readmeCount != n {
		t.Errorf("README.md: the long form builds %d mutants; "+
			"internal/streamcheck/mutants_test.go lists %d", readmeCount, n)
	}
}

// countMutants returns the number of elements of internal/streamcheck's mutants list.
func countMutants(t *testing.T) int {
	t.Helper()
	file := filepath.Join("internal", "streamcheck", "mutants_test.go")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	ast.Inspect(f, func(node ast.Node) bool {
		vs, ok := node.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "mutants" || len(vs.Values) != 1 {
			return n < 0
		}
		if cl, ok := vs.Values[0].(*ast.CompositeLit); ok {
			n = len(cl.Elts)
		}
		return false
	})
	if n < 0 {
		t.Fatalf("%s: no var mutants = []mutant{...}", file)
	}
	return n
}
