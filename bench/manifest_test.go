package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGPUTestsAreGPUTests reads every test of the library's module: a test whose name matches
// the GPU pattern ('CUDA|GPU': scripts/gpucheck's manifest of the tests that must pass on a GPU)
// must open a GPU (fakecuda.GPU, cuda.Open) and must not run on the fake driver (fakecuda.Run,
// RunDevice, RunWithoutDriver, cudatest.Device): a fake-driver test in the manifest would skip
// on a GPU machine without gcc and fail the check for the wrong reason, or pass there having
// tested no GPU, and a test that opens none would count as a GPU test passed.
func TestGPUTestsAreGPUTests(t *testing.T) {
	gpu := regexp.MustCompile(gpuTestPattern)
	fakeCalls := map[string]bool{"fakecuda.Run": true, "fakecuda.RunDevice": true, "fakecuda.RunWithoutDriver": true, "cudatest.Device": true}
	gpuOpens := map[string]bool{"fakecuda.GPU": true, "cuda.Open": true, "icuda.Open": true}
	root := ".."
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", ".gpu", "bench", filepath.Join("examples", "external"): // not in the manifest (another module, or no source)
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || !gpu.MatchString(fn.Name.Name) || fn.Body == nil {
				continue
			}
			checked++
			opens := false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				name := ""
				switch fun := call.Fun.(type) {
				case *ast.SelectorExpr:
					if x, ok := fun.X.(*ast.Ident); ok {
						name = x.Name + "." + fun.Sel.Name
					}
				case *ast.Ident:
					if f.Name.Name == "fakecuda" {
						name = "fakecuda." + fun.Name
					}
				}
				if fakeCalls[name] {
					t.Errorf("%s: %s is a GPU test by its name but runs on the fake driver (%s): rename it out of '%s'", rel, fn.Name.Name, name, gpuTestPattern)
				}
				if id, ok := call.Fun.(*ast.Ident); ok && (id.Name == "openGPU" || f.Name.Name == "cuda" && id.Name == "Open") || gpuOpens[name] {
					opens = true
				}
				return true
			})
			if !opens {
				t.Errorf("%s: %s is a GPU test by its name but opens no GPU (fakecuda.GPU, cuda.Open): rename it out of '%s'", rel, fn.Name.Name, gpuTestPattern)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Errorf("%d GPU tests found: the walk missed the module's tests", checked)
	}
}
