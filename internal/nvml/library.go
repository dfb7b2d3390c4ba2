package nvml

// # The NVML this package calls
//
// Library and Device are the part of NVML the queries (query.go) use, one method per entry
// point, with go-nvml's method names. Two implementations: the system library bound with
// dlopen (nvml_cgo.go; nvml_stub.go where there is no dlopen) and the Fake (fake.go). The
// comment of each method names the versioned symbol the binding calls: the one nvml.h's
// unversioned name stands for in NVML 13 (nvmlInit is nvmlInit_v2, nvmlDeviceGetPciInfo is
// nvmlDeviceGetPciInfo_v3, ...).

// Library is the part of NVML this package calls: the system library (Default) or a Fake.
type Library interface {
	// Init is nvmlInit_v2; it loads the library first where that is needed.
	Init() Return
	// Shutdown is nvmlShutdown.
	Shutdown() Return
	// DeviceGetCount is nvmlDeviceGetCount_v2.
	DeviceGetCount() (int, Return)
	// DeviceGetHandleByIndex is nvmlDeviceGetHandleByIndex_v2.
	DeviceGetHandleByIndex(index int) (Device, Return)
	// DeviceGetHandleByPciBusId is nvmlDeviceGetHandleByPciBusId_v2. It takes
	// "domain:bus:device.function", "domain:bus:device" or "bus:device.function", in hex;
	// ErrorNotFound when no device has that address.
	DeviceGetHandleByPciBusId(busID string) (Device, Return)
}

// Device is one device handle of a Library: a GPU, or a MIG instance of one
// (GetMigDeviceHandleByIndex).
type Device interface {
	// GetName is nvmlDeviceGetName.
	GetName() (string, Return)
	// GetUUID is nvmlDeviceGetUUID.
	GetUUID() (string, Return)
	// GetMemoryInfo is nvmlDeviceGetMemoryInfo (Reserved is 0).
	GetMemoryInfo() (Memory, Return)
	// GetMemoryInfoV2 is nvmlDeviceGetMemoryInfo_v2: ErrorFunctionNotFound on drivers
	// without it, ErrorArgumentVersion on those that do not know its struct's version 2.
	GetMemoryInfoV2() (Memory, Return)
	// GetPciInfo is nvmlDeviceGetPciInfo_v3.
	GetPciInfo() (PciInfo, Return)
	// GetNumaNodeId is nvmlDeviceGetNumaNodeId (ErrorNotSupported where the platform does
	// not say, ErrorFunctionNotFound on drivers without it).
	GetNumaNodeId() (int, Return)
	// GetMigMode is nvmlDeviceGetMigMode: the current and pending modes, MigEnable or
	// MigDisable.
	GetMigMode() (current, pending int, r Return)
	// GetMaxMigDeviceCount is nvmlDeviceGetMaxMigDeviceCount: how many MIG instances the
	// GPU can hold, 0 when MIG is off or unsupported.
	GetMaxMigDeviceCount() (int, Return)
	// GetMigDeviceHandleByIndex is nvmlDeviceGetMigDeviceHandleByIndex: the MIG instance in
	// slot index (below GetMaxMigDeviceCount), ErrorNotFound where the slot is empty.
	GetMigDeviceHandleByIndex(index int) (Device, Return)
}

// Memory is a device's memory in bytes (nvmlMemory_t, nvmlMemory_v2_t).
type Memory struct {
	Total, Reserved, Free, Used uint64
}

// PciInfo is a device's PCI address (nvmlPciInfo_t, as nvmlDeviceGetPciInfo_v3 fills it).
type PciInfo struct {
	// Domain, Bus and Device locate the device; the function is 0.
	Domain, Bus, Device uint32
	// PciDeviceId is the 16-bit device id above the 16-bit vendor id (0x233010DE, an H100
	// SXM5).
	PciDeviceId uint32
	// BusId is NVML's text of the address ("00000000:1B:00.0": an 8-digit domain, upper
	// case).
	BusId string
}

// The MIG modes of GetMigMode (NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE).
const (
	MigDisable = 0
	MigEnable  = 1
)
