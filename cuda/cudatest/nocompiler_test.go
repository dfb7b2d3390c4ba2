package cudatest

import (
	"strings"
	"testing"
)

// TestNoCompiler: without a C compiler, Device's skip says which compiler it looked for.
func TestNoCompiler(t *testing.T) {
	t.Setenv("CC", "no-such-cc")
	err := canBuild()
	if cgoEnabled && (err == nil || !strings.Contains(err.Error(), "no C compiler") || !strings.Contains(err.Error(), "no-such-cc")) {
		t.Errorf("canBuild with CC=no-such-cc = %v; want an error naming the compiler", err)
	}
	if !cgoEnabled && (err == nil || !strings.Contains(err.Error(), "cgo")) {
		t.Errorf("canBuild without cgo = %v; want an error naming cgo", err)
	}
}
