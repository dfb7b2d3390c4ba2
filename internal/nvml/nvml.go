// Package nvml discovers NVIDIA GPUs and their memory through NVML, using NVIDIA's go-nvml
// (github.com/NVIDIA/go-nvml/pkg/nvml), which loads libnvidia-ml.so.1 with dlopen at run time.
//
// Every query is bracketed by nvml.Init and nvml.Shutdown, and nothing else is called unless
// Init succeeded: after a failed Init (the library is absent) any other go-nvml call aborts the
// process with a symbol lookup error. Functions take the library as a Library so that tests can
// pass go-nvml's mocks (pkg/nvml/mock/dgxh100 and friends).
//
// go-nvml needs cgo. Without cgo, or off linux, Library is an empty interface, Default returns
// nil and every function returns an error matching ErrUnavailable.
package nvml

import "errors"

// ErrUnavailable reports that NVML cannot be used: libnvidia-ml.so.1 is absent, its
// initialization failed, or the package was built without cgo.
var ErrUnavailable = errors.New("nvml: NVML unavailable")

// GPU describes one device as NVML sees it.
type GPU struct {
	// Index is the NVML device index (the order of nvidia-smi, which can differ from the
	// CUDA ordinal unless CUDA_DEVICE_ORDER=PCI_BUS_ID).
	Index int
	// Name is the product name ("NVIDIA H100 80GB HBM3").
	Name string
	// UUID is the device's UUID ("GPU-...").
	UUID string
	// TotalMem, FreeMem and UsedMem are in bytes, from nvmlDeviceGetMemoryInfo_v2 where the
	// driver has it (used then excludes memory the driver reserves), else from the v1 call.
	TotalMem, FreeMem, UsedMem uint64
	// MIG reports that MIG mode is currently enabled on the device.
	MIG bool
	// PCIBusID is the device's PCI address as sysfs writes it ("0000:1b:00.0"), from
	// nvmlDeviceGetPciInfo; empty when NVML does not say.
	PCIBusID string
	// MIGDevices lists the device's MIG instances when MIG is on: each is a CUDA device of its
	// own, with its own memory.
	MIGDevices []MIGDevice
}

// MIGDevice is one MIG instance of a GPU.
type MIGDevice struct {
	// Index is the instance's index on its GPU (nvmlDeviceGetMigDeviceHandleByIndex).
	Index int
	// UUID is the instance's UUID ("MIG-..."), which CUDA_VISIBLE_DEVICES takes.
	UUID string
	// TotalMem, FreeMem and UsedMem are the instance's memory, in bytes.
	TotalMem, FreeMem, UsedMem uint64
}
