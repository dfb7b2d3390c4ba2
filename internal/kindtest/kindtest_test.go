package kindtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// TestProblemsCatches: the check finds a sentinel of the wrong kind, one of two kinds, one
// without its package's prefix and one that matches another listed sentinel; the table of the
// module passes.
func TestProblemsCatches(t *testing.T) {
	good := errkind.New(pinmalloc.ErrClosed, "pkg: closed")
	for _, tc := range []struct {
		row  Sentinel
		want string
	}{
		{Sentinel{"pkg.ErrA", errkind.New(pinmalloc.ErrBusy, "pkg: a"), pinmalloc.ErrClosed, "pkg: "}, "errors.Is(pkg.ErrA, " + pinmalloc.ErrClosed.Error() + ") = false"},
		{Sentinel{"pkg.ErrB", fmt.Errorf("pkg: b: %w", errors.Join(pinmalloc.ErrClosed, pinmalloc.ErrBusy)), pinmalloc.ErrClosed, "pkg: "}, "= true"},
		{Sentinel{"pkg.ErrC", errkind.New(pinmalloc.ErrClosed, "other: c"), pinmalloc.ErrClosed, "pkg: "}, `want its package's prefix "pkg: "`},
		{Sentinel{"pkg.ErrD", fmt.Errorf("pkg: d: %w", good), pinmalloc.ErrClosed, "pkg: "}, "pkg.ErrD matches pkg.ErrGood"},
	} {
		p := strings.Join(Problems([]Sentinel{tc.row, {"pkg.ErrGood", good, pinmalloc.ErrClosed, "pkg: "}}), "\n")
		if !strings.Contains(p, tc.want) {
			t.Errorf("%s: problems %q; want one saying %q", tc.row.Name, p, tc.want)
		}
	}
	if p := Problems(Core); len(p) > 0 {
		t.Errorf("Core: %q", p)
	}
}

// TestExported: the walk finds the exported Err variables of non-test files, qualified by
// their folder's name, and leaves out what skip says.
func TestExported(t *testing.T) {
	root := filepath.Join(t.TempDir(), "mypkg")
	for path, src := range map[string]string{
		"a.go":          "package mypkg\n\nvar ErrOne, errTwo = 1, 2\n\nvar (\n\tErrThree = 3\n\tOther = 4\n)\n",
		"a_test.go":     "package mypkg\n\nvar ErrTest = 1\n",
		"sub/b.go":      "package sub\n\nvar ErrSub = 1\n",
		"cmd/tool/c.go": "package main\n\nvar ErrTool = 1\n",
	} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found, err := Exported(root, func(rel string) bool { return filepath.Base(rel) == "cmd" })
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(found)
	if want := "[{mypkg.ErrOne a.go} {mypkg.ErrThree a.go} {sub.ErrSub sub/b.go}]"; got != want {
		t.Errorf("Exported = %s; want %s", got, want)
	}
}
