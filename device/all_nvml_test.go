package device

import (
	"fmt"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// TestOpenAllNVML matches a fake DGX H100 (its GPUs given the fake driver's PCI addresses, in
// another order) to the fake driver's devices, with GPU 1 in MIG mode with two instances.
func TestOpenAllNVML(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	srv := nvml.NewFakeDGXH100()
	for i := range srv.Devices {
		dev := &srv.Devices[i]
		bus := uint32(0x10 + (len(srv.Devices) - 1 - i)) // NVML's order is not CUDA's
		dev.PCI.Bus = bus
		dev.MemoryV2Return = nvml.ErrorNotSupported
		if bus == 0x11 {
			var instances []nvml.FakeMIGDevice
			for k := range 2 {
				instances = append(instances, nvml.FakeMIGDevice{Index: k, UUID: fmt.Sprintf("MIG-%d", k),
					Memory: nvml.Memory{Total: 20 << 30}})
			}
			srv.SetMIG(i, instances...)
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
	if !srv.Balanced() {
		t.Errorf("NVML called while uninitialized (%d calls), or left initialized", srv.Uninitialized)
	}
}
