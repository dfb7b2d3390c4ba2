package device

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// TestOpenAll opens a heap on each of the fake's three devices: each allocates from its own
// device's memory, and each is described with its PCI address and node. NVML (absent here, or
// knowing other GPUs) adds nothing.
func TestOpenAll(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(3)
	f.SetNUMANodes(2)
	all, err := OpenAll(Options{Capacity: 64 << 20})
	must(t, "OpenAll", err)
	if len(all.Heaps) != 3 || len(all.GPUs) != 3 {
		t.Fatalf("%d heaps, %d GPUs; want 3", len(all.Heaps), len(all.GPUs))
	}
	if all.NVMLErr != nil && !errors.Is(all.NVMLErr, nvml.ErrUnavailable) {
		t.Errorf("NVMLErr = %v", all.NVMLErr)
	}
	for i, h := range all.Heaps {
		g := all.GPUs[i]
		if g.Ordinal != i || h.Device().Ordinal() != i || g.Name == "" || g.TotalMem != 1<<30 || g.Node != i%2 ||
			g.PCIBusID != []string{"0000:10:00.0", "0000:11:00.0", "0000:12:00.0"}[i] || g.MIG || g.NVMLIndex != -1 {
			t.Errorf("GPU %d: %+v", i, g)
		}
		p, err := h.Alloc(8<<20, 0)
		must(t, "Alloc", err)
		if used := f.Used(i); used < 8<<20 {
			t.Errorf("device %d uses %d bytes after an 8 MiB block", i, used)
		}
		must(t, "Free", h.Free(p))
	}
	must(t, "Close", all.Close())
	if _, err := OpenAll(Options{Provider: all.Heaps[0].a.Provider()}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("OpenAll with a provider = %v", err)
	}
}

// TestOpenAllWithoutDriver: no driver, no heap, an error wrapping ErrNoDriver.
func TestOpenAllWithoutDriver(t *testing.T) {
	if !fakecuda.RunWithoutDriver(t) {
		return
	}
	if _, err := OpenAll(Options{}); !errors.Is(err, ErrNoDriver) {
		t.Errorf("OpenAll = %v, want ErrNoDriver", err)
	}
}
