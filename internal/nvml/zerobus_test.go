package nvml

import "testing"

// TestNUMANodeZeroAddress: NUMANode takes the zero PCI address (0000:00:00.0, the host
// bridge; what a driver's PCI attributes read as when it does not say) for unknown: ok false,
// NVML not asked, even where a device answers no PCI address (which a fake then matches).
func TestNUMANodeZeroAddress(t *testing.T) {
	f := NewFakeDGXH100()
	f.Devices[2].PCI = PciInfo{}
	for _, id := range []string{"0000:00:00.0", "00000000:00:00.0", "00:00.0"} {
		if n, ok, err := NUMANode(f, id); ok || err != nil {
			t.Errorf("NUMANode(%q) = %d, %v, %v; want unknown", id, n, ok, err)
		}
	}
	if len(f.BusIDsAsked) != 0 {
		t.Errorf("NVML asked for %q", f.BusIDsAsked)
	}
	checkBalanced(t, f)
}
