package cudatest

import (
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestNoCompiler: without a C compiler or a prebuilt fake, Device's skip says which compiler it
// looked for and where a prebuilt fake would be named; with a prebuilt fake no compiler is needed.
func TestNoCompiler(t *testing.T) {
	t.Setenv("CC", "no-such-cc")
	t.Setenv(fakecuda.PrebuiltEnv, "")
	err := canBuild()
	if cgoEnabled && (err == nil || !strings.Contains(err.Error(), "no C compiler") || !strings.Contains(err.Error(), "no-such-cc") ||
		!strings.Contains(err.Error(), fakecuda.PrebuiltEnv)) {
		t.Errorf("canBuild with CC=no-such-cc = %v; want an error naming the compiler and %s", err, fakecuda.PrebuiltEnv)
	}
	if !cgoEnabled && (err == nil || !strings.Contains(err.Error(), "cgo")) {
		t.Errorf("canBuild without cgo = %v; want an error naming cgo", err)
	}
	// ExecOnFake says the same, and runs nothing (a program's message is then its own, not a
	// child's failing to load the fake).
	if _, err := ExecOnFake(); err == nil || !strings.Contains(err.Error(), "cannot run on the fake driver") {
		t.Errorf("ExecOnFake with no compiler = %v; want the reason", err)
	}
	t.Setenv(fakecuda.PrebuiltEnv, "/prebuilt/libcuda.so.1")
	if err := canBuild(); cgoEnabled && err != nil {
		t.Errorf("canBuild with a prebuilt fake and no compiler = %v", err)
	}
}
