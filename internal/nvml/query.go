package nvml

// # Queries
//
// Discover, MemoryUsed and NUMANode each open a session (Init), ask, and close it (Shutdown).
// A failed Init ends the query with an error wrapping ErrUnavailable and the Return, and
// nothing else is called. What a device may lack (a PCI answer, MIG support, the v2 memory
// call, a NUMA node) is left out of the answer; what it must have (name, UUID, memory) fails
// the query with the Return wrapped.

import (
	"fmt"
	"math"
)

// session initializes lib and returns the function that shuts it down. A failed Init is
// returned as an error wrapping both ErrUnavailable and the Return, and lib is then not used
// further.
func session(lib Library) (func(), error) {
	if lib == nil {
		return nil, fmt.Errorf("%w: no library", ErrUnavailable)
	}
	if ret := lib.Init(); ret != Success {
		return nil, fmt.Errorf("%w: nvml.Init: %w", ErrUnavailable, ret)
	}
	return func() { _ = lib.Shutdown() }, nil
}

// Discover initializes lib, describes every device, and shuts lib down again.
func Discover(lib Library) ([]GPU, error) {
	done, err := session(lib)
	if err != nil {
		return nil, err
	}
	defer done()
	n, ret := lib.DeviceGetCount()
	if ret != Success {
		return nil, fmt.Errorf("nvml: device count: %w", ret)
	}
	if n < 0 || n > maxDevices {
		return nil, fmt.Errorf("nvml: device count %d (0 to %d): %w", n, maxDevices, ErrorUnknown)
	}
	gpus := make([]GPU, 0, n)
	for i := 0; i < n; i++ {
		g, err := describe(lib, i)
		if err != nil {
			return nil, err
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// MemoryUsed returns the memory in use on device index, in bytes. Tests use it to check that
// decommitting VMM memory gives it back to the device.
func MemoryUsed(lib Library, index int) (uint64, error) {
	done, err := session(lib)
	if err != nil {
		return 0, err
	}
	defer done()
	dev, ret := lib.DeviceGetHandleByIndex(index)
	if ret != Success {
		return 0, fmt.Errorf("nvml: device %d: %w", index, ret)
	}
	m, err := memoryInfo(dev)
	if err != nil {
		return 0, fmt.Errorf("nvml: device %d: %w", index, err)
	}
	return m.Used, nil
}

// NUMANode initializes lib, returns the NUMA node NVML gives the GPU at PCI address busID
// ("0000:1b:00.0", as GPU.PCIBusID), and shuts lib down. ok is false, with no error, when
// NVML does not say: no device at busID or any other failure to find it (a malformed address,
// a lost GPU), a driver without nvmlDeviceGetNumaNodeId, a platform where it answers
// ErrorNotSupported, a negative node or one at or past maxNUMANodes, and the zero address
// (0000:00:00.0: the host bridge, never a GPU; what a driver's PCI attributes read as when it
// does not say), which is not asked for. err is only a failed Init (ErrUnavailable).
func NUMANode(lib Library, busID string) (node int, ok bool, err error) {
	if domain, bus, dev, fn, parsed := parseBusID(busID); parsed && domain|bus|dev|fn == 0 {
		return -1, false, nil
	}
	done, err := session(lib)
	if err != nil {
		return -1, false, err
	}
	defer done()
	dev, ret := lib.DeviceGetHandleByPciBusId(busID)
	if ret != Success {
		return -1, false, nil
	}
	n, ret := dev.GetNumaNodeId()
	if ret != Success || n < 0 || n >= maxNUMANodes {
		return -1, false, nil
	}
	return n, true, nil
}

// maxNUMANodes bounds the node NUMANode believes: internal/numa's MaxNodes (a test checks),
// which this package cannot import (numa is Linux only; nvml builds everywhere). A node past
// it, from a broken or foreign library, is none that numa could bind memory to.
const maxNUMANodes = 1024

// maxDevices bounds the device count Discover believes, and maxMIGDevices the MIG slots it asks
// for (a GPU has 7 at most): an answer beyond them, from a broken or foreign library, is not
// taken as the size of an allocation or of a loop of calls.
const (
	maxDevices    = 1 << 12
	maxMIGDevices = 64
)

// describe reads one device; lib is initialized.
func describe(lib Library, i int) (GPU, error) {
	g := GPU{Index: i}
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if ret != Success {
		return g, fmt.Errorf("nvml: device %d: %w", i, ret)
	}
	if g.Name, ret = dev.GetName(); ret != Success {
		return g, fmt.Errorf("nvml: device %d name: %w", i, ret)
	}
	if g.UUID, ret = dev.GetUUID(); ret != Success {
		return g, fmt.Errorf("nvml: device %d UUID: %w", i, ret)
	}
	m, err := memoryInfo(dev)
	if err != nil {
		return g, fmt.Errorf("nvml: device %d: %w", i, err)
	}
	g.TotalMem, g.FreeMem, g.UsedMem = m.Total, m.Free, m.Used
	if pci, ret := dev.GetPciInfo(); ret == Success && (pci.Domain|pci.Bus|pci.Device) != 0 {
		g.PCIBusID = fmt.Sprintf("%04x:%02x:%02x.0", pci.Domain, pci.Bus, pci.Device)
	}
	// MIG-incapable devices answer ErrorNotSupported; any failure here just means no MIG.
	current, _, ret := dev.GetMigMode()
	g.MIG = ret == Success && current == MigEnable
	if g.MIG {
		g.MIGDevices = migDevices(dev)
	}
	return g, nil
}

// migDevices lists the MIG instances of a device in MIG mode. Slots without an instance
// answer ErrorNotFound and are skipped; an instance whose UUID or memory cannot be read is
// listed with what could.
func migDevices(dev Device) []MIGDevice {
	n, ret := dev.GetMaxMigDeviceCount()
	if ret != Success {
		return nil
	}
	n = min(n, maxMIGDevices) // a count no GPU has is not asked slot by slot
	var out []MIGDevice
	for i := 0; i < n; i++ {
		m, ret := dev.GetMigDeviceHandleByIndex(i)
		if ret != Success {
			continue
		}
		md := MIGDevice{Index: i}
		md.UUID, _ = m.GetUUID()
		if mem, err := memoryInfo(m); err == nil {
			md.TotalMem, md.FreeMem, md.UsedMem = mem.Total, mem.Free, mem.Used
		}
		out = append(out, md)
	}
	return out
}

// memoryInfo prefers nvmlDeviceGetMemoryInfo_v2 and falls back to v1 on drivers without it,
// or whose v2 call does not know the struct's version (ErrorArgumentVersion).
// Figures no device has (a part above the total, a total above math.MaxInt64) fail with
// ErrorUnknown: they come from a broken or foreign library, and a caller's Total-Used or
// int(Total) would wrap.
func memoryInfo(dev Device) (Memory, error) {
	m, ret := dev.GetMemoryInfoV2()
	if ret != Success {
		switch ret {
		case ErrorNotSupported, ErrorFunctionNotFound, ErrorArgumentVersion:
		default:
			return Memory{}, fmt.Errorf("memory info: %w", ret)
		}
		if m, ret = dev.GetMemoryInfo(); ret != Success {
			return Memory{}, fmt.Errorf("memory info: %w", ret)
		}
	}
	if m.Total > math.MaxInt64 || m.Free > m.Total || m.Used > m.Total || m.Reserved > m.Total {
		return Memory{}, fmt.Errorf("memory info: total %d, free %d, used %d, reserved %d: %w",
			m.Total, m.Free, m.Used, m.Reserved, ErrorUnknown)
	}
	return m, nil
}
