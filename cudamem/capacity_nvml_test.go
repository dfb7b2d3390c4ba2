package cudamem

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// TestMultiDeviceCapacityNVMLMock sizes one device arena per GPU of a fake DGX H100 (eight 80 GiB
// GPUs, with 1 to 8 GiB used, seen through the v1 memory call) the way DefaultDeviceCapacity
// does from each device's free memory: every capacity is a whole number of 2 MiB granules, at
// most 90 % of what is free, and no more than one granule below it.
func TestMultiDeviceCapacityNVMLMock(t *testing.T) {
	srv := nvml.NewFakeDGXH100()
	for i := range srv.Devices {
		srv.Devices[i].MemoryV2Return = nvml.ErrorNotSupported
	}
	gpus, err := nvml.Discover(srv)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if len(gpus) != 8 {
		t.Fatalf("%d GPUs, want 8", len(gpus))
	}
	const g = 2 << 20
	prev := ^uintptr(0)
	for _, gpu := range gpus {
		free := uintptr(gpu.FreeMem)
		c := capacityFromFree(free, g)
		share := free / 100 * DefaultDeviceShare
		if c%g != 0 || c > share || share-c >= g || c >= prev {
			t.Errorf("GPU %d: %d bytes free give capacity %d (share %d, previous GPU %d)", gpu.Index, free, c, share, prev)
		}
		prev = c
	}
}
