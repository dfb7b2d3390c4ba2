package cudamem_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// TestFakeNUMAFromNVML: where neither the driver nor sysfs knows a device's node, NVML is asked
// by the device's PCI address (after a successful Init, and shut down after). NVML is a fake
// DGX H100 whose GPU 2 sits at the fake driver's device 0's address.
func TestFakeNUMAFromNVML(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostNUMAID(0, -1)
	lib := nvml.NewFakeDGXH100()
	lib.Devices[2].PCI.Bus = 0x10
	defer cudamem.SetNodeSources(t.TempDir(), func() nvml.Library { return lib })()
	n, src, ok := cudamem.DeviceNode(public(d))
	var asked string
	if len(lib.BusIDsAsked) > 0 {
		asked = lib.BusIDsAsked[len(lib.BusIDsAsked)-1]
	}
	inits, shutdowns := lib.Inits, lib.Shutdowns
	if !ok || n != 0 || src != cudamem.NodeFromNVML || asked != "0000:10:00.0" || inits != 1 || shutdowns != 1 {
		t.Errorf("DeviceNode = %d %q %v (asked %q, %d inits, %d shutdowns); want 0 from NVML", n, src, ok, asked, inits, shutdowns)
	}
	if !lib.Balanced() {
		t.Errorf("NVML called while uninitialized (%d calls), or left initialized", lib.Uninitialized)
	}
	failed := &nvml.Fake{InitReturn: nvml.ErrorLibraryNotFound}
	defer cudamem.SetNodeSources(t.TempDir(), func() nvml.Library { return failed })()
	if _, _, ok := cudamem.DeviceNode(public(d)); ok {
		t.Error("DeviceNode found a node with NVML absent")
	}
	if failed.Inits != 1 || !failed.Balanced() {
		t.Errorf("NVML absent: %d inits, %d calls while uninitialized", failed.Inits, failed.Uninitialized)
	}
}
