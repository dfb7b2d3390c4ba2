package pinmalloc_test

// The modules of this repository. The library is split in two: the core module at the root,
// which requires golang.org/x/sys only, and the integration modules nested in its tree, metrics
// (Prometheus: client_golang, protobuf) and debugpage (net/http, and its offline viewer), whose
// import paths are the core's folders. An adopter of the core pulls no client_golang or protobuf
// into their go.sum, and the core's `go test ./...` links no net/http. The checks of this
// package that walk the library's packages (TestAPITypes, TestPublicDocs, TestLayers, TestDocs)
// walk the integration modules too; their sentinels are checked by their own tests
// (kindtest). bench and examples/external are modules of their own that are not the library:
// a suite and a user's module.

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// libraryModules are the folders of the integration modules.
var libraryModules = []string{"debugpage", "metrics"}

// otherModules are the folders of the repository's other nested modules, with why they are not
// the library's.
var otherModules = map[string]string{
	"bench":             "the benchmark suite and the GPU check, with plotting dependencies",
	"examples/external": "a user's module, which uses the public API from outside",
}

// isLibraryModule reports whether rel (a folder relative to the root) is an integration module's.
func isLibraryModule(rel string) bool {
	for _, m := range libraryModules {
		if filepath.ToSlash(filepath.Clean(rel)) == m {
			return true
		}
	}
	return false
}

// goMod is what go mod edit -json prints of a go.mod.
type goMod struct {
	Module  struct{ Path string }
	Require []struct {
		Path     string
		Indirect bool
	}
	Replace []struct {
		Old struct{ Path string }
		New struct{ Path string }
	}
}

// readGoMod parses the go.mod in dir.
func readGoMod(t *testing.T, dir string) goMod {
	t.Helper()
	out, err := exec.Command("go", "mod", "edit", "-json", filepath.Join(dir, "go.mod")).Output()
	if err != nil {
		t.Fatalf("go mod edit -json %s/go.mod: %v", dir, err)
	}
	var m goMod
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestModules: every go.mod nested in the tree is an integration module or one of the other
// modules listed; the core module requires nothing but golang.org/x/sys, and its packages and
// tests import no net/http, crypto/tls or Prometheus package; each integration
// module is the core's folder by its import path and builds against this checkout's core.
func TestModules(t *testing.T) {
	t.Parallel()
	var nested []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "vendor" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" && path != "go.mod" {
			nested = append(nested, filepath.ToSlash(filepath.Dir(path)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(nested)
	for _, dir := range nested {
		if _, ok := otherModules[dir]; !ok && !isLibraryModule(dir) {
			t.Errorf("%s/go.mod: a module no list of modules_test.go names: an integration module (libraryModules, whose packages the root's checks walk) or another (otherModules, with why)", dir)
		}
	}
	for _, dir := range append(append([]string(nil), libraryModules...), sortedSet(keysOfSet(otherModules))...) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
			t.Errorf("modules_test.go lists %s, which has no go.mod", dir)
		}
	}

	core := readGoMod(t, ".")
	for _, r := range core.Require {
		if r.Path != "golang.org/x/sys" {
			t.Errorf("go.mod requires %s: the core module requires golang.org/x/sys only (an integration module holds the rest)", r.Path)
		}
	}
	// What the integration modules keep out: the core's tests link no net/http, crypto/tls or
	// Prometheus package (compiling them was a third of a cold go test ./...).
	out, err := exec.Command("go", "list", "-deps", "-test", "./...").Output()
	if err != nil {
		t.Fatalf("go list -deps -test ./...: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "net/http" || p == "crypto/tls" || strings.HasPrefix(p, "github.com/prometheus/") {
			t.Errorf("a package or test of the core module imports %s (go list -deps -test ./...): import it from an integration module", p)
		}
	}
	for _, dir := range libraryModules {
		m := readGoMod(t, dir)
		if want := module + "/" + dir; m.Module.Path != want {
			t.Errorf("%s/go.mod: module %s; want %s, the import path the core's folder gives it", dir, m.Module.Path, want)
		}
		requires, replaced := false, false
		for _, r := range m.Require {
			requires = requires || r.Path == module && !r.Indirect
		}
		for _, r := range m.Replace {
			replaced = replaced || r.Old.Path == module && filepath.Clean(filepath.Join(dir, r.New.Path)) == "."
		}
		if !requires || !replaced {
			t.Errorf("%s/go.mod: want it to require %s and replace it by ../ (this checkout's core): requires %v, replaced %v", dir, module, requires, replaced)
		}
	}
}
