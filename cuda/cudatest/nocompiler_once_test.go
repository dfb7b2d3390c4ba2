package cudatest

import (
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestNoCompilerSaidOnce: without a C compiler, what Device's skip and ExecOnFake's error say
// (a program such as examples/kvcache prints it) says "no C compiler" once and does not name the
// internal package (it said it twice, the second time as "fakecuda: no C compiler to build the
// fake driver").
func TestNoCompilerSaidOnce(t *testing.T) {
	if !cgoEnabled {
		t.Skip("built without cgo: canBuild names cgo, not the compiler")
	}
	t.Setenv("CC", "no-such-cc")
	t.Setenv(fakecuda.PrebuiltEnv, "")
	_, execErr := ExecOnFake()
	for name, err := range map[string]error{"canBuild": canBuild(), "ExecOnFake": execErr} {
		if err == nil {
			t.Fatalf("%s with CC=no-such-cc: no error", name)
		}
		msg := err.Error()
		if n := strings.Count(msg, "no C compiler"); n != 1 || strings.Contains(msg, "fakecuda:") || !strings.Contains(msg, "no-such-cc") {
			t.Errorf("%s with CC=no-such-cc says %q; want \"no C compiler\" once, the compiler named, and no \"fakecuda:\"", name, msg)
		}
	}
}
