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
	// MIG-incapable devices answer ERROR_NOT_SUPPORTED; any failure here just means no MIG.
	current, _, ret := dev.GetMigMode()
	g.MIG = ret == gonvml.SUCCESS && current == gonvml.DEVICE_MIG_ENABLE
	return g, nil
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
