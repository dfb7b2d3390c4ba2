package cudamem

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
)

// TestCapabilityTable holds the package doc's table of optional arena capabilities against the
// providers' types: a row per provider, a column per optional interface of arena/provider.go,
// and every exported type of the package either a provider with a row or a known non-provider.
func TestCapabilityTable(t *testing.T) {
	providers := map[string]arena.Provider{
		"HostVMM":      (*HostVMM)(nil),
		"HostRegister": (*HostRegister)(nil),
		"HostAlloc":    (*HostAlloc)(nil),
		"DeviceVMM":    (*DeviceVMM)(nil),
		"DeviceMalloc": (*DeviceMalloc)(nil),
		"Managed":      (*Managed)(nil),
	}
	optional := map[string]reflect.Type{
		"Zeroer":            reflect.TypeFor[arena.Zeroer](),
		"FixedCapacity":     reflect.TypeFor[arena.FixedCapacity](),
		"CapacityDefaulter": reflect.TypeFor[arena.CapacityDefaulter](),
		"Placer":            reflect.TypeFor[arena.Placer](),
		"Reporter":          reflect.TypeFor[arena.Reporter](),
		"Threaded":          reflect.TypeFor[arena.Threaded](),
		"Prefaulter":        reflect.TypeFor[arena.Prefaulter](),
		"Joiner":            reflect.TypeFor[arena.Joiner](),
	}
	notProviders := map[string]bool{"Counters": true, "HostOptions": true, "HostExport": true, "HostMapping": true}

	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var header []string
	rows := map[string][]string{}
	for _, line := range strings.Split(string(src), "\n") {
		f := strings.Fields(strings.TrimPrefix(line, "//"))
		if len(f) == 0 || !strings.HasPrefix(line, "//\t") {
			continue
		}
		if f[0] == "provider" {
			header = f[1:]
			continue
		}
		if header != nil {
			rows[f[0]] = f[1:]
		}
	}
	if len(header) != len(optional) {
		t.Fatalf("table columns %v; want one per optional interface of arena/provider.go (%d)", header, len(optional))
	}
	for name, p := range providers {
		row, ok := rows[name]
		if !ok {
			t.Errorf("provider %s has no row in doc.go's table", name)
			continue
		}
		if len(row) != len(header) {
			t.Errorf("row %s has %d cells, want %d", name, len(row), len(header))
			continue
		}
		for i, col := range header {
			it, ok := optional[col]
			if !ok {
				t.Errorf("column %s is no optional interface of arena", col)
				continue
			}
			has := reflect.TypeOf(p).Implements(it)
			if want := row[i] == "x"; has != want {
				t.Errorf("table says %s implements %s: %v; the type says %v", name, col, want, has)
			}
		}
	}
	for name := range rows {
		if _, ok := providers[name]; !ok {
			t.Errorf("table row %s names no provider this test knows", name)
		}
	}

	// Every exported type of the package is a provider with a row, or named a non-provider.
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				name := s.(*ast.TypeSpec).Name.Name
				if _, ok := providers[name]; ast.IsExported(name) && !ok && !notProviders[name] {
					t.Errorf("%s: exported type %s is neither a provider of the table nor a known non-provider", file, name)
				}
			}
		}
	}
}
