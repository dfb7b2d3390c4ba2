package nvml

import (
	"errors"
	"testing"
)

// TestDiscoverRefusesImpossibleMemory: memory figures no device has (a part larger than the
// total, a total beyond what an int holds) come from a broken or foreign library; Discover
// and MemoryUsed fail with ErrorUnknown rather than hand them on, where Total-Used would
// wrap and int(Total) turn negative. A MIG instance with such figures is listed without them.
func TestDiscoverRefusesImpossibleMemory(t *testing.T) {
	for _, m := range []Memory{
		{Total: 10 << 30, Used: 11 << 30},
		{Total: 10 << 30, Free: 11 << 30},
		{Total: 10 << 30, Reserved: 11 << 30},
		{Total: 1 << 63},
	} {
		f := NewFakeDGXH100()
		f.Devices[2].Memory = m
		if _, err := Discover(f); !errors.Is(err, ErrorUnknown) {
			t.Errorf("Discover with device memory %+v = %v, want ErrorUnknown", m, err)
		}
		if _, err := MemoryUsed(f, 2); !errors.Is(err, ErrorUnknown) {
			t.Errorf("MemoryUsed with device memory %+v = %v, want ErrorUnknown", m, err)
		}
		f = NewFakeDGXH100()
		f.SetMIG(0, FakeMIGDevice{Index: 0, UUID: "MIG-0", Memory: m})
		gpus, err := Discover(f)
		if err != nil {
			t.Fatal(err)
		}
		if md := gpus[0].MIGDevices; len(md) != 1 || md[0].TotalMem != 0 || md[0].UUID != "MIG-0" {
			t.Errorf("MIG instance with memory %+v listed as %+v", m, md)
		}
	}
}
