package metrics

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportGroups: no import group of the package's files mixes the standard library with
// other modules (goimports' grouping: the standard library first, alone). metrics.go had
// pinmalloc's imports inside its standard-library group.
func TestImportGroups(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		line, std, other, said := -1, false, false, false // the group's last line, what it holds
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			l := fset.Position(imp.Pos()).Line
			if l != line+1 { // a blank line (or a new import declaration) starts a group
				std, other, said = false, false, false
			}
			line = l
			if strings.Contains(strings.Split(path, "/")[0], ".") {
				other = true
			} else {
				std = true
			}
			if std && other && !said {
				said = true
				t.Errorf("%s:%d: %q in a group that mixes the standard library with other modules", name, l, path)
			}
		}
	}
}
