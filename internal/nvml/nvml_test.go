package nvml

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestDiscoverDefault runs discovery against the system library: on a machine without NVML it
// must fail cleanly with ErrUnavailable (and not kill the process); with NVML it lists GPUs.
func TestDiscoverDefault(t *testing.T) {
	gpus, err := Discover(Default())
	if err != nil {
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrorLibraryNotFound) {
			t.Fatalf("Discover(Default()) = %v, want ErrUnavailable and ErrorLibraryNotFound", err)
		}
		t.Logf("no NVML: %v", err)
		if _, err := MemoryUsed(Default(), 0); !errors.Is(err, ErrUnavailable) {
			t.Errorf("MemoryUsed(Default(), 0) = %v, want ErrUnavailable", err)
		}
		// A second attempt must fail the same way, not crash.
		if _, err := Discover(Default()); !errors.Is(err, ErrUnavailable) {
			t.Errorf("second Discover = %v", err)
		}
		return
	}
	for _, g := range gpus {
		t.Logf("GPU %d: %s %s, total %d MiB, free %d MiB, used %d MiB, MIG %v",
			g.Index, g.Name, g.UUID, g.TotalMem>>20, g.FreeMem>>20, g.UsedMem>>20, g.MIG)
		if g.TotalMem == 0 || g.Name == "" || g.UsedMem > g.TotalMem || g.FreeMem > g.TotalMem {
			t.Errorf("implausible GPU %+v", g)
		}
	}
}

// TestGPUDiscoverDefault runs discovery on a GPU machine (a CUDA driver that opens device 0,
// not pinmalloc's fake; without one it skips, saying so): NVML must list the device CUDA
// calls device 0, by name, and give its used memory. Without NVML there, the test skips naming
// the capability (cuda.Lacks), which the GPU check verifies; it never passes without having
// asked NVML.
func TestGPUDiscoverDefault(t *testing.T) {
	dev, err := cuda.Open(0)
	switch {
	case errors.Is(err, pinmalloc.ErrNoDriver) || errors.Is(err, pinmalloc.ErrNoDevice):
		t.Skip(err) // the error says "cuda: no CUDA driver" and why
	case err != nil:
		t.Fatalf("the CUDA driver loads but device 0 does not open: %v", err)
	}
	defer dev.Close()
	if dev.IsFake() {
		t.Skip("no CUDA driver: the driver loaded is pinmalloc's fake")
	}
	name, err := dev.Name()
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := Discover(Default())
	if errors.Is(err, ErrUnavailable) {
		t.Skip(cuda.Lacks(cuda.CapNVML, err.Error()))
	}
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	found := false
	for _, g := range gpus {
		found = found || g.Name == name
	}
	if !found {
		t.Errorf("NVML lists %+v, not CUDA's device 0 %q", gpus, name)
	}
	used, err := MemoryUsed(Default(), 0)
	if err != nil || used == 0 {
		t.Fatalf("MemoryUsed: %d, %v", used, err)
	}
	t.Logf("GPU 0 (%s) used: %d MiB", name, used>>20)
}

func TestNilLibrary(t *testing.T) {
	if _, err := Discover(nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Discover(nil) = %v, want ErrUnavailable", err)
	}
}

func TestReturnIsError(t *testing.T) {
	var err error = ErrorGPUIsLost
	if err.Error() != "NVML_ERROR_GPU_IS_LOST" || Return(77).Error() != "NVML return 77" {
		t.Errorf("Error() = %q, %q", err.Error(), Return(77).Error())
	}
}
