package numa

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestBindAndNodeOf binds a mapping to the first online node, faults it in, and finds its pages
// there; a node the machine lacks is refused with EINVAL.
func TestBindAndNodeOf(t *testing.T) {
	node := Online("/sys")[0]
	for _, strict := range []bool{false, true} {
		b, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		if err := Bind(mem.Addr(b), 1<<20, node, strict); err != nil {
			t.Fatalf("Bind to node %d (strict %v): %v", node, strict, err)
		}
		b[0], b[len(b)-1] = 1, 1
		for _, p := range []uintptr{mem.Addr(b), mem.Addr(b) + 1<<20 - 1} {
			if n, err := NodeOf(p); err != nil || n != node {
				t.Errorf("NodeOf = %d, %v; want %d", n, err, node)
			}
		}
		if err := Bind(mem.Addr(b), 1<<20, 1000, strict); !errors.Is(err, unix.EINVAL) || !errors.Is(err, ErrNUMA) {
			t.Errorf("Bind to node 1000 = %v, want EINVAL", err)
		}
		if err := Bind(mem.Addr(b), 1<<20, -1, strict); !errors.Is(err, unix.EINVAL) {
			t.Errorf("Bind to node -1 = %v, want EINVAL", err)
		}
		unix.Munmap(b)
	}
}

// TestSysfs reads a made-up sysfs: online nodes and a PCI device's node.
func TestSysfs(t *testing.T) {
	root := t.TempDir()
	write := func(path, s string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := Online(root); !slices.Equal(got, []int{0}) {
		t.Errorf("Online without sysfs = %v", got)
	}
	write("devices/system/node/online", "0-1,3\n")
	if got := Online(root); !slices.Equal(got, []int{0, 1, 3}) {
		t.Errorf("Online = %v", got)
	}
	write("devices/system/node/online", "1-0\n")
	if got := Online(root); !slices.Equal(got, []int{0}) {
		t.Errorf("Online of nonsense = %v", got)
	}
	id := PCIBusID(0, 0x1b, 0)
	if id != "0000:1b:00.0" {
		t.Errorf("PCIBusID = %q", id)
	}
	if _, ok := PCINode(root, id); ok {
		t.Error("PCINode of a device sysfs lacks")
	}
	write("bus/pci/devices/0000:1b:00.0/numa_node", "1\n")
	if n, ok := PCINode(root, id); !ok || n != 1 {
		t.Errorf("PCINode = %d, %v", n, ok)
	}
	write("bus/pci/devices/0000:1b:00.0/numa_node", "-1\n")
	if _, ok := PCINode(root, id); ok {
		t.Error("PCINode of numa_node -1 is a node")
	}
}
