package nvml

import "testing"

// TestMemoryV2VersionMismatchFallsBack: a driver whose nvmlDeviceGetMemoryInfo_v2 does not
// know the struct's version 2 answers NVML_ERROR_ARGUMENT_VERSION_MISMATCH (NVML's reference:
// "the provided version is invalid/unsupported"); the v1 call still answers, so Discover and
// MemoryUsed take its figures rather than failing.
func TestMemoryV2VersionMismatchFallsBack(t *testing.T) {
	f := NewFakeDGXH100()
	f.Devices[0].MemoryV2Return = ErrorArgumentVersion
	gpus, err := Discover(f)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if g := gpus[0]; g.UsedMem != 1<<30 || g.TotalMem != 80<<30 {
		t.Errorf("v1 fallback: %+v", g)
	}
	if used, err := MemoryUsed(f, 0); err != nil || used != 1<<30 {
		t.Errorf("MemoryUsed(0) = %d, %v; want 1 GiB", used, err)
	}
	checkBalanced(t, f)
}
