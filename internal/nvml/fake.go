package nvml

// # The fake
//
// Fake is a Library held in Go memory, for tests without a GPU (the role go-nvml's mocks
// played). It is as strict as NVML where this package could go wrong: every call but Init
// answers ErrorUninitialized unless an Init succeeded and has not been matched by Shutdown
// (handles kept past Shutdown included), and such calls are counted; unknown indices and
// addresses get NVML's answers (ErrorInvalidArgument, ErrorNotFound). testdata/fakenvml.c is
// its C counterpart, which checks the dlopen binding itself.

import (
	"fmt"
)

// Fake is a Library for tests. It is not safe for concurrent use.
type Fake struct {
	// Devices are the GPUs, in index order.
	Devices []FakeDevice
	// InitReturn is what Init answers (Success when zero).
	InitReturn Return
	// Inits and Shutdowns count the calls; Uninitialized counts the calls made while NVML
	// was not initialized.
	Inits, Shutdowns, Uninitialized int
	// BusIDsAsked lists the addresses DeviceGetHandleByPciBusId was asked for, in order.
	BusIDsAsked []string

	refs int // Inits that succeeded less Shutdowns
}

// FakeDevice is one GPU of a Fake. A non-zero Return field makes that call fail with it.
type FakeDevice struct {
	Name, UUID string
	// Memory answers both memory calls (Reserved is 0 in the v1 answer).
	Memory Memory
	// PCI is the device's address (Domain, Bus, Device) and id; GetPciInfo writes BusId
	// from them as NVML does.
	PCI PciInfo
	// NUMANode answers GetNumaNodeId.
	NUMANode int
	// MIG is the current MIG mode; MaxMIGDevices the slots for MIG instances
	// (GetMaxMigDeviceCount answers 0 while MIG is off), MIGDevices the instances in them.
	MIG           bool
	MaxMIGDevices int
	MIGDevices    []FakeMIGDevice
	// HandleReturn, MemoryReturn, MemoryV2Return, PciReturn, NumaReturn and MigReturn make
	// those calls fail (MigReturn all three MIG calls). MemoryV2Return ErrorFunctionNotFound
	// stands for a driver without the v2 call, NumaReturn ErrorNotSupported for a platform
	// whose GPUs are not NUMA nodes.
	HandleReturn, MemoryReturn, MemoryV2Return, PciReturn, NumaReturn, MigReturn Return
}

// FakeMIGDevice is a MIG instance of a FakeDevice. Its handle answers its name (the GPU's
// when empty), UUID and memory; every other call ErrorNotSupported.
type FakeMIGDevice struct {
	// Index is the instance's slot, below its GPU's MaxMIGDevices.
	Index      int
	Name, UUID string
	Memory     Memory
}

// dgxH100Buses are the PCI buses of a DGX H100's eight GPUs, in NVML's order (domain 0,
// device 0); the first four hang off socket 0 (NUMA node 0), the others off socket 1.
var dgxH100Buses = [8]uint32{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}

// NewFakeDGXH100 returns a Fake of a DGX H100: eight "NVIDIA H100 80GB HBM3", 80 GiB each,
// GPU i with i+1 GiB used, at the machine's PCI addresses (0000:18:00.0 ... 0000:db:00.0) and
// NUMA nodes (0 for GPUs 0-3, 1 for 4-7), MIG-capable (7 instance slots) with MIG off. SetMIG
// puts a GPU in MIG mode.
func NewFakeDGXH100() *Fake {
	f := &Fake{}
	for i, bus := range dgxH100Buses {
		used := uint64(i+1) << 30
		f.Devices = append(f.Devices, FakeDevice{
			Name:          "NVIDIA H100 80GB HBM3",
			UUID:          fmt.Sprintf("GPU-fa4e0000-0000-0000-0000-%012d", i),
			Memory:        Memory{Total: 80 << 30, Free: 80<<30 - used, Used: used},
			PCI:           PciInfo{Bus: bus, PciDeviceId: 0x233010DE},
			NUMANode:      i / 4,
			MaxMIGDevices: 7,
		})
	}
	return f
}

// SetMIG puts GPU gpu in MIG mode with the instances given.
func (f *Fake) SetMIG(gpu int, instances ...FakeMIGDevice) {
	d := &f.Devices[gpu]
	d.MIG, d.MIGDevices = true, instances
}

// Init counts the call and answers InitReturn.
func (f *Fake) Init() Return {
	f.Inits++
	if f.InitReturn != Success {
		return f.InitReturn
	}
	f.refs++
	return Success
}

// Shutdown counts the call and ends one Init.
func (f *Fake) Shutdown() Return {
	if r := f.check(); r != Success {
		return r
	}
	f.Shutdowns++
	f.refs--
	return Success
}

// Balanced reports whether every call was made while initialized and every successful Init
// was shut down.
func (f *Fake) Balanced() bool { return f.Uninitialized == 0 && f.refs == 0 }

// check answers ErrorUninitialized, and counts the call, when NVML is not initialized.
func (f *Fake) check() Return {
	if f.refs <= 0 {
		f.Uninitialized++
		return ErrorUninitialized
	}
	return Success
}

// DeviceGetCount answers len(Devices).
func (f *Fake) DeviceGetCount() (int, Return) {
	if r := f.check(); r != Success {
		return 0, r
	}
	return len(f.Devices), Success
}

// DeviceGetHandleByIndex answers a handle of Devices[index].
func (f *Fake) DeviceGetHandleByIndex(index int) (Device, Return) {
	if r := f.check(); r != Success {
		return nil, r
	}
	if index < 0 || index >= len(f.Devices) {
		return nil, ErrorInvalidArgument
	}
	if r := f.Devices[index].HandleReturn; r != Success {
		return nil, r
	}
	return fakeHandle{f, index, -1}, Success
}

// DeviceGetHandleByPciBusId records busID and answers a handle of the device at that
// address: ErrorInvalidArgument when busID is none of NVML's formats, ErrorNotFound when no
// device is there.
func (f *Fake) DeviceGetHandleByPciBusId(busID string) (Device, Return) {
	if r := f.check(); r != Success {
		return nil, r
	}
	f.BusIDsAsked = append(f.BusIDsAsked, busID)
	domain, bus, dev, fn, ok := parseBusID(busID)
	if !ok {
		return nil, ErrorInvalidArgument
	}
	for i, d := range f.Devices {
		if d.PCI.Domain == domain && d.PCI.Bus == bus && d.PCI.Device == dev && fn == 0 {
			if d.HandleReturn != Success {
				return nil, d.HandleReturn
			}
			return fakeHandle{f, i, -1}, Success
		}
	}
	return nil, ErrorNotFound
}

// fakeHandle is a Device of a Fake: GPU gpu, or its MIG instance in slot mig (-1: the GPU).
type fakeHandle struct {
	f   *Fake
	gpu int
	mig int
}

// dev answers the handle's GPU and MIG instance (nil for the GPU itself), or
// ErrorUninitialized.
func (h fakeHandle) dev() (*FakeDevice, *FakeMIGDevice, Return) {
	if r := h.f.check(); r != Success {
		return nil, nil, r
	}
	d := &h.f.Devices[h.gpu]
	if h.mig < 0 {
		return d, nil, Success
	}
	for i := range d.MIGDevices {
		if d.MIGDevices[i].Index == h.mig {
			return d, &d.MIGDevices[i], Success
		}
	}
	return nil, nil, ErrorInvalidArgument // the instance is gone: the handle is stale
}

// gpuOnly answers the handle's GPU, ErrorNotSupported for a MIG instance.
func (h fakeHandle) gpuOnly() (*FakeDevice, Return) {
	d, m, r := h.dev()
	if r != Success {
		return nil, r
	}
	if m != nil {
		return nil, ErrorNotSupported
	}
	return d, Success
}

func (h fakeHandle) GetName() (string, Return) {
	d, m, r := h.dev()
	if r != Success {
		return "", r
	}
	if m != nil && m.Name != "" {
		return m.Name, Success
	}
	return d.Name, Success
}

func (h fakeHandle) GetUUID() (string, Return) {
	d, m, r := h.dev()
	if r != Success {
		return "", r
	}
	if m != nil {
		return m.UUID, Success
	}
	return d.UUID, Success
}

func (h fakeHandle) GetMemoryInfo() (Memory, Return) {
	d, m, r := h.dev()
	if r != Success {
		return Memory{}, r
	}
	mem := d.Memory
	if m != nil {
		mem = m.Memory
	} else if d.MemoryReturn != Success {
		return Memory{}, d.MemoryReturn
	}
	mem.Reserved = 0
	return mem, Success
}

func (h fakeHandle) GetMemoryInfoV2() (Memory, Return) {
	d, m, r := h.dev()
	if r != Success {
		return Memory{}, r
	}
	if m != nil {
		return m.Memory, Success
	}
	if d.MemoryV2Return != Success {
		return Memory{}, d.MemoryV2Return
	}
	return d.Memory, Success
}

func (h fakeHandle) GetPciInfo() (PciInfo, Return) {
	d, r := h.gpuOnly()
	if r != Success {
		return PciInfo{}, r
	}
	if d.PciReturn != Success {
		return PciInfo{}, d.PciReturn
	}
	p := d.PCI
	p.BusId = fmt.Sprintf("%08X:%02X:%02X.0", p.Domain, p.Bus, p.Device)
	return p, Success
}

func (h fakeHandle) GetNumaNodeId() (int, Return) {
	d, r := h.gpuOnly()
	if r != Success {
		return 0, r
	}
	if d.NumaReturn != Success {
		return 0, d.NumaReturn
	}
	return d.NUMANode, Success
}

func (h fakeHandle) GetMigMode() (current, pending int, r Return) {
	d, r := h.gpuOnly()
	if r != Success {
		return 0, 0, r
	}
	if d.MigReturn != Success {
		return 0, 0, d.MigReturn
	}
	if d.MIG {
		return MigEnable, MigEnable, Success
	}
	return MigDisable, MigDisable, Success
}

func (h fakeHandle) GetMaxMigDeviceCount() (int, Return) {
	d, r := h.gpuOnly()
	if r != Success {
		return 0, r
	}
	if d.MigReturn != Success {
		return 0, d.MigReturn
	}
	if !d.MIG {
		return 0, Success
	}
	return d.MaxMIGDevices, Success
}

func (h fakeHandle) GetMigDeviceHandleByIndex(index int) (Device, Return) {
	d, r := h.gpuOnly()
	if r != Success {
		return nil, r
	}
	switch {
	case d.MigReturn != Success:
		return nil, d.MigReturn
	case !d.MIG:
		return nil, ErrorNotSupported
	case index < 0 || index >= d.MaxMIGDevices:
		return nil, ErrorInvalidArgument
	}
	for _, m := range d.MIGDevices {
		if m.Index == index {
			return fakeHandle{h.f, h.gpu, index}, Success
		}
	}
	return nil, ErrorNotFound
}
