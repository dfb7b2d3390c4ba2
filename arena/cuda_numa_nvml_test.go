//go:build cgo && linux

package arena_test

import (
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// TestFakeNUMAFromNVML: where neither the driver nor sysfs knows a device's node, NVML is asked
// by the device's PCI address (after a successful Init, and shut down after).
func TestFakeNUMAFromNVML(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostNUMAID(0, -1)
	var asked string
	inits, shutdowns := 0, 0
	lib := &mock.Interface{
		InitFunc:     func() gonvml.Return { inits++; return gonvml.SUCCESS },
		ShutdownFunc: func() gonvml.Return { shutdowns++; return gonvml.SUCCESS },
		DeviceGetHandleByPciBusIdFunc: func(id string) (gonvml.Device, gonvml.Return) {
			asked = id
			return &mock.Device{GetNumaNodeIdFunc: func() (int, gonvml.Return) { return 0, gonvml.SUCCESS }}, gonvml.SUCCESS
		},
	}
	defer arena.SetNodeSources(t.TempDir(), func() nvml.Library { return lib })()
	n, src, ok := arena.DeviceNode(fakecuda.Public(d))
	if !ok || n != 0 || src != arena.NodeFromNVML || asked != "0000:10:00.0" || inits != 1 || shutdowns != 1 {
		t.Errorf("DeviceNode = %d %q %v (asked %q, %d inits, %d shutdowns); want 0 from NVML", n, src, ok, asked, inits, shutdowns)
	}
	failed := &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}
	defer arena.SetNodeSources(t.TempDir(), func() nvml.Library { return failed })()
	if _, _, ok := arena.DeviceNode(fakecuda.Public(d)); ok {
		t.Error("DeviceNode found a node with NVML absent")
	}
}
