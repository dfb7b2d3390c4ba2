package numa

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
)

// hugeFile makes path a sparse file of 64 MiB starting with text: larger than any sysfs
// attribute, as a hostile or broken mount could present.
func hugeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 64<<20); err != nil {
		t.Fatal(err)
	}
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHugeSysfsFiles: Online and PCINode read at most a small bound of a file, whatever its
// size, and take a file longer than any sysfs attribute for no answer. They used to read it
// whole into memory (three times over: 192 MiB here).
func TestHugeSysfsFiles(t *testing.T) {
	root := t.TempDir()
	hugeFile(t, filepath.Join(root, "devices/system/node/online"), "0-1\n")
	hugeFile(t, filepath.Join(root, "bus/pci/devices/0000:1b:00.0/numa_node"), "1\n")
	var nodes []int
	if n := allocated(func() { nodes = Online(root) }); n > 1<<20 || !slices.Equal(nodes, []int{0}) {
		t.Errorf("Online of a 64 MiB file = %v, allocating %d bytes", nodes, n)
	}
	var node int
	var ok bool
	if n := allocated(func() { node, ok = PCINode(root, "0000:1b:00.0") }); n > 1<<20 || ok {
		t.Errorf("PCINode of a 64 MiB file = %d, %v, allocating %d bytes", node, ok, n)
	}
}
