// Package nvml discovers NVIDIA GPUs and their memory through NVML (libnvidia-ml.so.1), loaded
// with dlopen at run time the way internal/cuda loads libcuda: no NVML header and no
// -lnvidia-ml at build time, and a machine without the library gets an error, not a link
// failure. It binds the few entry points it uses itself (nvml_cgo.go) instead of NVIDIA's
// go-nvml, whose cgo build of nvml.h printed about 150 lines of deprecation warnings on every
// cold build.
//
// Every query is bracketed by Init and Shutdown, and nothing else is called unless Init
// succeeded: the system library's binding refuses (ErrorUninitialized) any call made while no
// Init of its own is outstanding, without entering the library (go-nvml's lesson: there, a
// call after a failed Init aborted the process). Functions take the library as a Library so
// that tests can pass a Fake (fake.go) and count what was called.
//
// The interfaces carry go-nvml's method names (Init, DeviceGetCount, DeviceGetHandleByIndex,
// GetName, ...), so code written against go-nvml ports by renaming the package. To use another
// NVML function, add its method to Device or Library (library.go), its shim to nvml_cgo.go,
// its answer to Fake and to testdata/fakenvml.c.
//
// Without cgo, or off linux, Default returns a library whose Init answers
// ErrorLibraryNotFound, so every function returns an error matching ErrUnavailable.
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
	// driver has it (used then excludes memory the driver reserves), else (no such call, or
	// one that refuses its struct's version) from the v1 call.
	TotalMem, FreeMem, UsedMem uint64
	// MIG reports that MIG mode is currently enabled on the device.
	MIG bool
	// PCIBusID is the device's PCI address as sysfs writes it ("0000:1b:00.0"), from
	// nvmlDeviceGetPciInfo_v3; empty when NVML does not say.
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
