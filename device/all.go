package device

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// # Every GPU of the host
//
// OpenAll opens one Heap per CUDA device, each over its own arena sized by its own free memory
// (budgets are per device as CUDA sees it: under MIG each instance is a device with its own
// memory), and describes each device: what the driver says (name, memory, PCI address, host
// NUMA node) and what NVML adds (its index, UUID, MIG mode and MIG instances), matched by PCI
// address. NVML is loaded with dlopen (internal/nvml) and used only after a successful
// nvmlInit; a host without it (or the fake driver) gets the driver's description and NVMLErr
// saying why.

// GPU describes one CUDA device as OpenAll found it.
type GPU struct {
	// Ordinal is the CUDA device ordinal, Name the driver's name for it and TotalMem its
	// memory (a MIG instance's own, under MIG).
	Ordinal  int
	Name     string
	TotalMem int
	// PCIBusID is its PCI address ("0000:1b:00.0") and Node its host NUMA node
	// (cudamem.DeviceNode; arena.NodeUnknown when no source knows).
	PCIBusID string
	Node     int
	// NVMLIndex is NVML's index of the GPU at that PCI address (-1 when NVML is unavailable or
	// does not list it), UUID NVML's UUID for it.
	NVMLIndex int
	UUID      string
	// MIG reports that the GPU is in MIG mode: the CUDA device is one of its MIG instances,
	// with its own memory. MIGInstances lists the instances NVML reports on the GPU (a CUDA
	// device is one of them; the driver API gives no way here to say which).
	MIG          bool
	MIGInstances []MIGInstance
}

// MIGInstance is one MIG instance of a GPU, as NVML reports it.
type MIGInstance struct {
	// UUID is what CUDA_VISIBLE_DEVICES takes ("MIG-..."); TotalMem the instance's memory.
	UUID     string
	TotalMem int
}

// All is one Heap per CUDA device of the host.
type All struct {
	// Heaps holds the heaps, Heaps[i] on device GPUs[i].Ordinal.
	Heaps []*Heap
	// GPUs describes each device.
	GPUs []GPU
	// NVMLErr says why NVML added nothing (absent library, failed init), or is nil.
	NVMLErr error
}

// nvmlLibrary is the NVML OpenAll asks (tests put an nvml.Fake there).
var nvmlLibrary = nvml.Default

// OpenAll opens every CUDA device and a heap on each with the options o (each heap sized by
// its device: o.Capacity zero means 90 % of that device's free memory), and describes them.
// o.Provider must be nil: each heap gets its device's own. Without a driver the error wraps
// ErrNoDriver; with no device, ErrNoDevice. On any error nothing stays open.
func OpenAll(o Options) (*All, error) {
	if o.Provider != nil {
		return nil, fmt.Errorf("%w: OpenAll gives each device its own provider: Options.Provider must be nil", ErrInvalidOptions)
	}
	n, err := cuda.Count()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the driver lists no device", ErrNoDevice)
	}
	all := &All{}
	for i := range n {
		h, err := Open(i, o)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("device %d: %w", i, err), all.Close())
		}
		all.Heaps = append(all.Heaps, h)
		all.GPUs = append(all.GPUs, describe(h.Device()))
	}
	all.NVMLErr = all.addNVML(nvmlLibrary())
	return all, nil
}

// describe is what the driver says of dev.
func describe(dev *cuda.Device) GPU {
	g := GPU{Ordinal: dev.Ordinal(), Node: arena.NodeUnknown, NVMLIndex: -1}
	g.Name, _ = dev.Name()
	g.TotalMem, _ = dev.TotalMem()
	g.PCIBusID, _ = cudamem.PCIBusID(dev)
	if node, _, ok := cudamem.DeviceNode(dev); ok {
		g.Node = node
	}
	return g
}

// addNVML matches NVML's devices to the GPUs by PCI address and adds what NVML knows.
func (a *All) addNVML(lib nvml.Library) error {
	gpus, err := nvml.Discover(lib)
	if err != nil {
		return err
	}
	for i := range a.GPUs {
		g := &a.GPUs[i]
		for _, ng := range gpus {
			if ng.PCIBusID == "" || ng.PCIBusID != g.PCIBusID {
				continue
			}
			g.NVMLIndex, g.UUID, g.MIG = ng.Index, ng.UUID, ng.MIG
			for _, m := range ng.MIGDevices {
				g.MIGInstances = append(g.MIGInstances, MIGInstance{UUID: m.UUID, TotalMem: int(m.TotalMem)})
			}
		}
	}
	return nil
}

// Close closes every heap (Heap.Close: each device's work must be done) and returns their
// errors joined.
func (a *All) Close() error {
	var errs []error
	for _, h := range a.Heaps {
		errs = append(errs, h.Close())
	}
	return errors.Join(errs...)
}
