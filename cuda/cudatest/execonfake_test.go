package cudatest_test

import (
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
)

// TestExecOnFakeRecursing: ExecOnFake where cuda.LibraryEnv is set already (in its child, say)
// runs nothing and says why in the words of package cudatest, once. Before, it said "fakecuda:
// PINMALLOC_LIBCUDA is already set: not starting another child", naming an internal package.
func TestExecOnFakeRecursing(t *testing.T) {
	t.Setenv(cuda.LibraryEnv, "/some/libcuda.so.1")
	_, err := cudatest.ExecOnFake()
	if err == nil {
		t.Fatal("ExecOnFake with cuda.LibraryEnv set ran a child")
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "cudatest: cannot run on the fake driver: ") ||
		strings.Count(msg, "cudatest:") != 1 || strings.Contains(msg, "fakecuda") {
		t.Errorf("ExecOnFake with cuda.LibraryEnv set: %q; want cudatest's words, said once", msg)
	}
}
