package numa

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// TestOnlineBounded gives Online lists no kernel writes: a range past the nodes a kernel can
// have, ranges that overlap or descend, empty parts. Each is read as [0], so a malformed file
// can neither grow the list beyond MaxNodes nor repeat a node.
func TestOnlineBounded(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "devices/system/node/online")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"0-" + strconv.Itoa(MaxNodes), "0-3,2-5", "0-3,3", "3,1", "0,,1", "", "\n", "1024",
	} {
		if err := os.WriteFile(p, []byte(s+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := Online(root); !slices.Equal(got, []int{0}) {
			t.Errorf("Online of %q = %d nodes %v..., want [0]", s, len(got), got[:min(len(got), 8)])
		}
	}
	if err := os.WriteFile(p, []byte("0-1023"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Online(root); len(got) != MaxNodes || got[MaxNodes-1] != MaxNodes-1 {
		t.Errorf("Online of 0-1023 = %d nodes", len(got))
	}
}

// TestPCINodeBounded: a numa_node beyond the nodes a kernel can have is no node.
func TestPCINodeBounded(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "bus/pci/devices/0000:1b:00.0/numa_node")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("4096\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, ok := PCINode(root, "0000:1b:00.0"); ok {
		t.Errorf("PCINode of numa_node 4096 = %d, ok", n)
	}
}
