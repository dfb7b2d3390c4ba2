//go:build cgo && linux

package device

import (
	"fmt"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// TestOpenAllNVML matches go-nvml's DGX H100 mock (its GPUs given the fake's PCI addresses,
// in another order) to the fake's devices, with GPU 1 in MIG mode with two instances.
func TestOpenAllNVML(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	srv := dgxh100.New()
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		bus := uint32(0x10 + (len(srv.Devices) - 1 - i)) // NVML's order is not CUDA's
		dev.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) { return gonvml.PciInfo{Bus: bus}, gonvml.SUCCESS }
		dev.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) { return gonvml.Memory_v2{}, gonvml.ERROR_NOT_SUPPORTED }
		if bus == 0x11 {
			dev.MigMode = gonvml.DEVICE_MIG_ENABLE
			dev.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 2, gonvml.SUCCESS }
			dev.GetMigDeviceHandleByIndexFunc = func(k int) (gonvml.Device, gonvml.Return) {
				return &mock.Device{
					GetUUIDFunc: func() (string, gonvml.Return) { return fmt.Sprintf("MIG-%d", k), gonvml.SUCCESS },
					GetMemoryInfo_v2Func: func() (gonvml.Memory_v2, gonvml.Return) {
						return gonvml.Memory_v2{Total: 20 << 30}, gonvml.SUCCESS
					},
				}, gonvml.SUCCESS
			}
		}
	}
	defer func(l func() nvml.Library) { nvmlLibrary = l }(nvmlLibrary)
	nvmlLibrary = func() nvml.Library { return srv }
	all, err := OpenAll(Options{Capacity: 64 << 20})
	must(t, "OpenAll", err)
	defer func() { must(t, "Close", all.Close()) }()
	if all.NVMLErr != nil {
		t.Fatalf("NVMLErr = %v", all.NVMLErr)
	}
	n := len(srv.Devices)
	for i, g := range all.GPUs {
		if g.NVMLIndex != n-1-i || g.UUID == "" {
			t.Errorf("GPU %d matched NVML %d (%q), want %d", i, g.NVMLIndex, g.UUID, n-1-i)
		}
		if g.MIG != (i == 1) {
			t.Errorf("GPU %d MIG %v", i, g.MIG)
		}
	}
	if m := all.GPUs[1].MIGInstances; len(m) != 2 || m[0].UUID != "MIG-0" || m[1].TotalMem != 20<<30 {
		t.Errorf("MIG instances %+v", m)
	}
}
