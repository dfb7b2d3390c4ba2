package copyengine

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestGatherPTXAssembles assembles the gather kernel with NVIDIA's PTX assembler for each
// target the Batcher may ask for, and for the architectures the H100 generation JIT-compiles
// sm_75 PTX to. It needs ptxas (from a CUDA toolkit: on PATH, or named by $PTXAS) and skips
// without one; the build itself needs none.
func TestGatherPTXAssembles(t *testing.T) {
	ptxas := os.Getenv("PTXAS")
	if ptxas == "" {
		var err error
		if ptxas, err = exec.LookPath("ptxas"); err != nil {
			t.Skip("no ptxas (set $PTXAS or put a CUDA toolkit's ptxas on PATH): the PTX is checked by the driver's JIT on a GPU run")
		}
	}
	dir := t.TempDir()
	for _, c := range []struct{ target, arch int }{
		{50, 50}, {60, 60}, {70, 70}, {72, 72}, {75, 75}, {75, 80}, {75, 86}, {75, 89}, {75, 90},
	} {
		src := filepath.Join(dir, "gather_sm"+strconv.Itoa(c.target)+".ptx")
		if err := os.WriteFile(src, []byte(gatherPTX(c.target)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(ptxas, "-arch=sm_"+strconv.Itoa(c.arch), "-o", filepath.Join(dir, "out.cubin"), src).CombinedOutput()
		if err != nil {
			t.Errorf("ptxas -arch=sm_%d on the sm_%d PTX: %v\n%s", c.arch, c.target, err, out)
		}
	}
	src := filepath.Join(dir, "spin.ptx") // the compute kernel of BenchmarkCUDABatcherInterference
	if err := os.WriteFile(src, []byte(spinPTX), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(ptxas, "-arch=sm_90", "-o", filepath.Join(dir, "spin.cubin"), src).CombinedOutput(); err != nil {
		t.Errorf("ptxas on the spin kernel: %v\n%s", err, out)
	}
}
