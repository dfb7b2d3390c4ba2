package cudamem

// # NUMA placement
//
// Pinned memory on the wrong host NUMA node costs every copy a trip over the socket link
// (loaders on the wrong node ran 30 % slower: pytorch#197868). So host memory that serves a GPU
// is placed at the node of that GPU:
//
//   - VMM host memory is created at location HOST_NUMA with the node's id (hostvmm.go). Where the
//     driver refuses HOST_NUMA for the node found nearest (a CUDA 13 driver on a host without
//     NUMA support, a node without memory), the provider falls back to the HOST location and
//     reports no node; a node asked for by arena.NUMANode is never silently replaced.
//   - Registered memory is bound with mbind before it is first touched, strictly (MPOL_BIND:
//     arena.PinnableHost), since a registration faults it in at commit: a full node is a commit
//     error and not a signal later (hostregister.go).
//
// The node of a GPU (DeviceNode) is, in order: what the driver says (CU_DEVICE_ATTRIBUTE_
// HOST_NUMA_ID, CUDA 12.2+), the kernel's numa_node of the device's PCI address in sysfs,
// NVML's nvmlDeviceGetNumaNodeId (after a successful nvmlInit only). None of them knowing means
// a host with one node, or one that does not say: memory is then left where the kernel or the
// driver puts it. Stats and snapshots name the node of every region (arena.Placer).

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/numa"
	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// Node sources, as DeviceNode reports them.
const (
	NodeFromDriver = "driver"
	NodeFromSysfs  = "sysfs"
	NodeFromNVML   = "nvml"
)

// CUDA device attributes of a device's PCI address (CU_DEVICE_ATTRIBUTE_PCI_*).
const (
	attrPCIBus    = 33
	attrPCIDevice = 34
	attrPCIDomain = 50
)

// sysfsRoot is where DeviceNode reads sysfs, and nvmlLib the NVML it asks last; tests point
// them at their own.
var (
	sysfsRoot = "/sys"
	nvmlLib   = nvml.Default
)

// DeviceNode returns the host NUMA node nearest a CUDA device and which source said so
// (NodeFromDriver, NodeFromSysfs, NodeFromNVML); ok is false when none knows.
func DeviceNode(dev *cuda.Device) (node int, source string, ok bool) {
	in, err := icuda.Of(dev)
	if err != nil {
		return arena.NodeUnknown, "", false
	}
	return deviceNode(in)
}

func deviceNode(dev *icuda.Device) (int, string, bool) {
	if id, ok := dev.HostNUMAID(); ok {
		return id, NodeFromDriver, true
	}
	bus, err := pciBusID(dev)
	if err != nil {
		return arena.NodeUnknown, "", false
	}
	if n, ok := numa.PCINode(sysfsRoot, bus); ok {
		return n, NodeFromSysfs, true
	}
	if n, ok, err := nvml.NUMANode(nvmlLib(), bus); err == nil && ok {
		return n, NodeFromNVML, true
	}
	return arena.NodeUnknown, "", false
}

// pciBusID returns the device's PCI address as sysfs and NVML write it ("0000:1b:00.0").
func pciBusID(dev *icuda.Device) (string, error) {
	var v [3]int
	for i, a := range []int{attrPCIDomain, attrPCIBus, attrPCIDevice} {
		x, err := dev.Attribute(a)
		if err != nil {
			return "", fmt.Errorf("%w: PCI address of device %d: %w", arena.ErrInvalid, dev.Ordinal(), err)
		}
		v[i] = x
	}
	return numa.PCIBusID(v[0], v[1], v[2]), nil
}

// PCIBusID returns a CUDA device's PCI address as sysfs and NVML write it ("0000:1b:00.0"),
// from the driver's PCI attributes.
func PCIBusID(dev *cuda.Device) (string, error) {
	in, err := internalDevice(dev, "pci")
	if err != nil {
		return "", err
	}
	return pciBusID(in)
}
