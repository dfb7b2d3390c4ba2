package numa

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestSysfsFIFO: a sysfs attribute that a hostile or odd mount makes a FIFO is no answer, at
// once. Online and PCINode used to open it and wait, forever, for a writer.
func TestSysfsFIFO(t *testing.T) {
	root := t.TempDir()
	online := filepath.Join(root, "devices/system/node/online")
	node := filepath.Join(root, "bus/pci/devices/0000:1b:00.0/numa_node")
	for _, p := range []string{online, node} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
		// A failed run leaves a reader blocked in open: a writer's open releases it.
		t.Cleanup(func() {
			if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		})
	}
	type answer struct {
		nodes []int
		node  int
		ok    bool
	}
	done := make(chan answer, 1)
	go func() {
		var a answer
		a.nodes = Online(root)
		a.node, a.ok = PCINode(root, "0000:1b:00.0")
		done <- a
	}()
	select {
	case a := <-done:
		if !slices.Equal(a.nodes, []int{0}) || a.ok {
			t.Errorf("Online, PCINode of FIFOs = %v, %d %v; want [0], no node", a.nodes, a.node, a.ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Online or PCINode of a FIFO still blocked after 10s")
	}
}
