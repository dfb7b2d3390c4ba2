package numa

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPCINodeZeroAddress: 0000:00:00.0 is the host bridge on every PC, never a GPU, and what
// a driver's PCI attributes read as when it does not say (all zero): PCINode does not take the
// bridge's numa_node for the device's.
func TestPCINodeZeroAddress(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "bus/pci/devices/0000:00:00.0/numa_node")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, ok := PCINode(root, PCIBusID(0, 0, 0)); ok {
		t.Errorf("PCINode of 0000:00:00.0 = %d, true; want unknown", n)
	}
}
