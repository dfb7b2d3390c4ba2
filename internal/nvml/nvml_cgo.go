//go:build cgo && linux

package nvml

import (
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Library is the NVML interface: go-nvml's nvml.Interface, so its mocks can be passed.
type Library = gonvml.Interface

// Default returns the system NVML library (libnvidia-ml.so.1, loaded on first Init).
func Default() Library { return gonvml.New() }

// session initializes lib and returns the function that shuts it down. A failed Init is
// returned as an error wrapping both ErrUnavailable and the nvml.Return, and lib must then not
// be used further.
func session(lib Library) (func(), error) {
	if lib == nil {
		return nil, fmt.Errorf("%w: no library", ErrUnavailable)
	}
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		// fmt.Errorf formats now, while the error text is still safe to ask for.
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
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("nvml: device count: %w", ret)
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
	if ret != gonvml.SUCCESS {
		return 0, fmt.Errorf("nvml: device %d: %w", index, ret)
	}
	_, _, used, err := memoryInfo(dev)
	if err != nil {
		return 0, fmt.Errorf("nvml: device %d: %w", index, err)
	}
	return used, nil
}

// describe reads one device; lib is initialized.
func describe(lib Library, i int) (GPU, error) {
	g := GPU{Index: i}
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if ret != gonvml.SUCCESS {
		return g, fmt.Errorf("nvml: device %d: %w", i, ret)
	}
	if g.Name, ret = dev.GetName(); ret != gonvml.SUCCESS {
		return g, fmt.Errorf("nvml: device %d name: %w", i, ret)
	}
	if g.UUID, ret = dev.GetUUID(); ret != gonvml.SUCCESS {
		return g, fmt.Errorf("nvml: device %d UUID: %w", i, ret)
	}
	var err error
	if g.TotalMem, g.FreeMem, g.UsedMem, err = memoryInfo(dev); err != nil {
		return g, fmt.Errorf("nvml: device %d: %w", i, err)
	}
	if pci, ret := dev.GetPciInfo(); ret == gonvml.SUCCESS && (pci.Domain|pci.Bus|pci.Device) != 0 {
		g.PCIBusID = fmt.Sprintf("%04x:%02x:%02x.0", pci.Domain, pci.Bus, pci.Device)
	}
	// MIG-incapable devices answer ERROR_NOT_SUPPORTED; any failure here just means no MIG.
	current, _, ret := dev.GetMigMode()
	g.MIG = ret == gonvml.SUCCESS && current == gonvml.DEVICE_MIG_ENABLE
	if g.MIG {
		g.MIGDevices = migDevices(dev)
	}
	return g, nil
}

// migDevices lists the MIG instances of a device in MIG mode. Slots without an instance
// answer ERROR_NOT_FOUND and are skipped; an instance whose UUID or memory cannot be read is
// listed with what could.
func migDevices(dev gonvml.Device) []MIGDevice {
	n, ret := dev.GetMaxMigDeviceCount()
	if ret != gonvml.SUCCESS {
		return nil
	}
	var out []MIGDevice
	for i := 0; i < n; i++ {
		m, ret := dev.GetMigDeviceHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			continue
		}
		md := MIGDevice{Index: i}
		md.UUID, _ = m.GetUUID()
		md.TotalMem, md.FreeMem, md.UsedMem, _ = memoryInfo(m)
		out = append(out, md)
	}
	return out
}

// NUMANode initializes lib, returns the host NUMA node nearest the GPU at PCI address busID
// ("0000:1b:00.0", as GPU.PCIBusID), and shuts lib down. ok is false when NVML does not know
// (no such device, a driver without nvmlDeviceGetNumaNodeId, a single-node host).
func NUMANode(lib Library, busID string) (node int, ok bool, err error) {
	done, err := session(lib)
	if err != nil {
		return -1, false, err
	}
	defer done()
	dev, ret := lib.DeviceGetHandleByPciBusId(busID)
	if ret != gonvml.SUCCESS {
		return -1, false, nil
	}
	n, ret := dev.GetNumaNodeId()
	if ret != gonvml.SUCCESS || n < 0 {
		return -1, false, nil
	}
	return n, true, nil
}

// memoryInfo prefers nvmlDeviceGetMemoryInfo_v2 and falls back to v1 on drivers without it.
func memoryInfo(dev gonvml.Device) (total, free, used uint64, err error) {
	m2, ret := dev.GetMemoryInfo_v2()
	if ret == gonvml.SUCCESS {
		return m2.Total, m2.Free, m2.Used, nil
	}
	if ret != gonvml.ERROR_NOT_SUPPORTED && ret != gonvml.ERROR_FUNCTION_NOT_FOUND {
		return 0, 0, 0, fmt.Errorf("memory info: %w", ret)
	}
	m, ret := dev.GetMemoryInfo()
	if ret != gonvml.SUCCESS {
		return 0, 0, 0, fmt.Errorf("memory info: %w", ret)
	}
	return m.Total, m.Free, m.Used, nil
}
