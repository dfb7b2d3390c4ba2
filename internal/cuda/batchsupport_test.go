//go:build cgo && linux

package cuda

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

// flakyVersionC is a driver whose cuDriverGetVersion fails once for a reason that passes
// (CUDA_ERROR_OUT_OF_MEMORY), then says 13.0, then fails with CUDA_ERROR_UNKNOWN: a caller that
// asks the driver after its answer was definite sees the 999.
const flakyVersionC = `
static int calls;
int cuDriverGetVersion(int *v) {
	switch (calls++) {
	case 0: return 2;
	case 1: *v = 13000; return 0;
	}
	return 999;
}
int cuMemcpyBatchAsync_v2(void) { return 0; }
`

// TestMemcpyBatchSupportedRetriesTransient: MemcpyBatchSupported remembers a definite answer
// (nil, or ErrSymbol: the driver is too old), never a failure that may pass. It remembered the
// first answer whatever it was, so a driver that failed the first version query once said so
// for the life of the process.
func TestMemcpyBatchSupportedRetriesTransient(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler to build the driver: %v", err)
	}
	dir := t.TempDir()
	src, lib := filepath.Join(dir, "flaky.c"), filepath.Join(dir, "flaky.so")
	must(t, "write", os.WriteFile(src, []byte(flakyVersionC), 0o644))
	cmd := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the driver: %v\n%s", err, out)
	}
	dr, err := loadFrom(lib)
	must(t, "loadFrom", err)
	defer dr.close()
	defer batchSupport.Delete(dr)
	d := &Device{drv: dr}
	if err := d.MemcpyBatchSupported(); !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		t.Fatalf("first MemcpyBatchSupported = %v, want the driver's CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	for i := 2; i <= 3; i++ {
		if err := d.MemcpyBatchSupported(); err != nil {
			t.Errorf("MemcpyBatchSupported %d = %v, want nil (a 13.0 driver with the call)",
				i, err)
		}
	}
}
