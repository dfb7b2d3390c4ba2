package nvml

import (
	"errors"
	"testing"
)

// TestGPUDiscoverDefault runs discovery against the system library: on a machine without NVML
// it must fail cleanly with ErrUnavailable (and not kill the process); with NVML it lists GPUs.
func TestGPUDiscoverDefault(t *testing.T) {
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
	if len(gpus) > 0 {
		used, err := MemoryUsed(Default(), 0)
		if err != nil {
			t.Fatalf("MemoryUsed: %v", err)
		}
		t.Logf("GPU 0 used: %d MiB", used>>20)
	}
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
