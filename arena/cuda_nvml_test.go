//go:build cgo && linux

package arena

import (
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// TestMultiGPUCapacityNVMLMock sizes one device arena per GPU of go-nvml's DGX H100 mock (eight
// 80 GiB GPUs, here with 1 to 8 GiB used) the way DefaultDeviceCapacity does from each
// device's free memory: every capacity is a whole number of 2 MiB granules, at most 90 % of
// what is free, and no more than one granule below it.
func TestMultiGPUCapacityNVMLMock(t *testing.T) {
	srv := dgxh100.New()
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		dev.MemoryInfo.Used = uint64(i+1) << 30
		dev.MemoryInfo.Free = dev.MemoryInfo.Total - dev.MemoryInfo.Used
		dev.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) { return gonvml.Memory_v2{}, gonvml.ERROR_NOT_SUPPORTED }
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
