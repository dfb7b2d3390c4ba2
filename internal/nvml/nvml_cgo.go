//go:build cgo && linux

package nvml

// The system library, loaded with dlopen on the first Init and kept for the life of the
// process (NVML counts Init and Shutdown itself; unloading it buys nothing). Each entry point
// is resolved once, by the versioned name nvml.h (NVML 13) maps its unversioned name to, when
// the library loads; one the library lacks answers ErrorFunctionNotFound when called, and a
// library without nvmlInit_v2 or nvmlShutdown is closed again at once (Init answers
// ErrorFunctionNotFound). One C
// shim per signature takes the entry point as a uintptr_t; handles cross as uintptr_t. The
// three structs are declared with nvml.h's layout and checked by static assertions.
//
// The guard: a system counts the Inits it made that succeeded, less its Shutdowns. Init and
// Shutdown hold guard for writing (it also covers the loading); every other call holds it for
// reading while it runs and is refused (ErrorUninitialized) without entering the library when
// the count is 0. So no entry point but nvmlInit_v2 is ever called unless an nvmlInit_v2 of
// this system succeeded and its Shutdown has not run, whatever the caller does with handles
// it kept, and no Shutdown runs under a call in flight.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct { unsigned long long total, free, used; } pmMemory; // nvmlMemory_t

typedef struct { // nvmlMemory_v2_t
	unsigned int version;
	unsigned long long total, reserved, free, used;
} pmMemoryV2;

typedef struct { // nvmlPciInfo_t (nvmlDeviceGetPciInfo_v3)
	char busIdLegacy[16]; // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];       // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
} pmPciInfo;

_Static_assert(sizeof(pmMemory) == 24, "nvmlMemory_t layout");
_Static_assert(sizeof(pmMemoryV2) == 40 && offsetof(pmMemoryV2, total) == 8, "nvmlMemory_v2_t layout");
_Static_assert(sizeof(pmPciInfo) == 68 && offsetof(pmPciInfo, domain) == 16 &&
	offsetof(pmPciInfo, pciDeviceId) == 28 && offsetof(pmPciInfo, busId) == 36, "nvmlPciInfo_t layout");

// nvmlMemory_v2: NVML_STRUCT_VERSION(Memory, 2), the struct's size with the version in the top byte.
static const unsigned int pmMemoryV2Version = (unsigned int)(sizeof(pmMemoryV2) | (2u << 24));

static uintptr_t pm_dlopen(const char *path) { return (uintptr_t)dlopen(path, RTLD_NOW | RTLD_LOCAL); }
static uintptr_t pm_dlsym(uintptr_t h, const char *name) { return (uintptr_t)dlsym((void *)h, name); }
static void pm_dlclose(uintptr_t h) { dlclose((void *)h); }

// Shims by signature. The comment names the entry points that use each.

// nvmlInit_v2, nvmlShutdown
static int pm_void(uintptr_t fn) { return ((int (*)(void))fn)(); }
// nvmlDeviceGetCount_v2
static int pm_count(uintptr_t fn, unsigned *n) { return ((int (*)(unsigned *))fn)(n); }
// nvmlDeviceGetHandleByIndex_v2
static int pm_handle(uintptr_t fn, unsigned i, uintptr_t *out) {
	void *d = NULL;
	int r = ((int (*)(unsigned, void **))fn)(i, &d);
	*out = (uintptr_t)d;
	return r;
}
// nvmlDeviceGetHandleByPciBusId_v2
static int pm_handleByBus(uintptr_t fn, const char *bus, uintptr_t *out) {
	void *d = NULL;
	int r = ((int (*)(const char *, void **))fn)(bus, &d);
	*out = (uintptr_t)d;
	return r;
}
// nvmlDeviceGetName, nvmlDeviceGetUUID
static int pm_string(uintptr_t fn, uintptr_t dev, char *buf, unsigned len) {
	return ((int (*)(void *, char *, unsigned))fn)((void *)dev, buf, len);
}
// nvmlDeviceGetMemoryInfo
static int pm_memory(uintptr_t fn, uintptr_t dev, pmMemory *m) {
	return ((int (*)(void *, pmMemory *))fn)((void *)dev, m);
}
// nvmlDeviceGetMemoryInfo_v2
static int pm_memoryV2(uintptr_t fn, uintptr_t dev, pmMemoryV2 *m) {
	m->version = pmMemoryV2Version;
	return ((int (*)(void *, pmMemoryV2 *))fn)((void *)dev, m);
}
// nvmlDeviceGetPciInfo_v3
static int pm_pci(uintptr_t fn, uintptr_t dev, pmPciInfo *p) {
	return ((int (*)(void *, pmPciInfo *))fn)((void *)dev, p);
}
// nvmlDeviceGetNumaNodeId, nvmlDeviceGetMaxMigDeviceCount
static int pm_uint(uintptr_t fn, uintptr_t dev, unsigned *v) {
	return ((int (*)(void *, unsigned *))fn)((void *)dev, v);
}
// nvmlDeviceGetMigMode
static int pm_mig(uintptr_t fn, uintptr_t dev, unsigned *current, unsigned *pending) {
	return ((int (*)(void *, unsigned *, unsigned *))fn)((void *)dev, current, pending);
}
// nvmlDeviceGetMigDeviceHandleByIndex
static int pm_migHandle(uintptr_t fn, uintptr_t dev, unsigned i, uintptr_t *out) {
	void *d = NULL;
	int r = ((int (*)(void *, unsigned, void **))fn)((void *)dev, i, &d);
	*out = (uintptr_t)d;
	return r;
}
*/
import "C"

import (
	"strings"
	"sync"
	"unsafe"
)

// DefaultPath is the library Default loads.
const DefaultPath = "libnvidia-ml.so.1"

// stringSize is NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_DEVICE_UUID_V2_BUFFER_SIZE.
const stringSize = 96

// The entry points, in the order of fnNames.
const (
	fnInit = iota
	fnShutdown
	fnCount
	fnHandle
	fnHandleByBus
	fnName
	fnUUID
	fnMemory
	fnMemoryV2
	fnPci
	fnNuma
	fnMig
	fnMaxMig
	fnMigHandle
	numFn
)

// fnNames are the symbols bound: nvml.h's versioned names (NVML 13 defines nvmlInit as
// nvmlInit_v2, nvmlDeviceGetPciInfo as nvmlDeviceGetPciInfo_v3, and so on).
var fnNames = [numFn]string{
	"nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
	"nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetName", "nvmlDeviceGetUUID",
	"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetPciInfo_v3",
	"nvmlDeviceGetNumaNodeId", "nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
	"nvmlDeviceGetMigDeviceHandleByIndex",
}

// system is a library loaded from a path.
type system struct {
	path string

	// guard is held for writing by Init and Shutdown, for reading by every other call.
	guard  sync.RWMutex
	loaded bool
	fn     [numFn]C.uintptr_t // 0: absent
	refs   int                // Inits that succeeded less Shutdowns

	// unguarded lets the tests call past the guard, to show the fake library catches it.
	unguarded bool
}

var (
	defaultOnce sync.Once
	defaultLib  *system
)

// Default returns the system NVML library (libnvidia-ml.so.1, loaded on the first Init).
func Default() Library {
	defaultOnce.Do(func() { defaultLib = &system{path: DefaultPath} })
	return defaultLib
}

// Open returns the NVML library at path (a file name the dynamic loader searches for, or a
// path), loaded on its first Init. Tests use it to load a fake.
func Open(path string) Library { return &system{path: path} }

// load opens the library once and answers Success, or ErrorLibraryNotFound when dlopen
// fails or the path holds a NUL byte (C would read it cut short: another file), or
// ErrorFunctionNotFound when the library lacks nvmlInit_v2 or nvmlShutdown (it is no NVML a
// session could open and close): it is closed again then. A failed load is tried again at
// the next Init. s.guard is held for writing.
func (s *system) load() Return {
	if s.loaded {
		return Success
	}
	if strings.IndexByte(s.path, 0) >= 0 {
		return ErrorLibraryNotFound
	}
	cpath := C.CString(s.path)
	defer C.free(unsafe.Pointer(cpath))
	h := C.pm_dlopen(cpath)
	if h == 0 {
		return ErrorLibraryNotFound
	}
	var fn [numFn]C.uintptr_t
	for i, name := range fnNames {
		cname := C.CString(name)
		fn[i] = C.pm_dlsym(h, cname)
		C.free(unsafe.Pointer(cname))
	}
	if fn[fnInit] == 0 || fn[fnShutdown] == 0 {
		C.pm_dlclose(h)
		return ErrorFunctionNotFound
	}
	s.fn, s.loaded = fn, true
	return Success
}

// Init loads the library if needed and calls nvmlInit_v2.
func (s *system) Init() Return {
	s.guard.Lock()
	defer s.guard.Unlock()
	if r := s.load(); r != Success {
		return r
	}
	r := Return(C.pm_void(s.fn[fnInit]))
	if r == Success {
		s.refs++
	}
	return r
}

// Shutdown calls nvmlShutdown, when an Init of s is outstanding.
func (s *system) Shutdown() Return {
	s.guard.Lock()
	defer s.guard.Unlock()
	if s.refs == 0 && !s.unguarded {
		return ErrorUninitialized
	}
	fn := s.fn[fnShutdown]
	if fn == 0 {
		return ErrorFunctionNotFound
	}
	r := Return(C.pm_void(fn))
	if r == Success && s.refs > 0 {
		s.refs--
	}
	return r
}

// enter takes the guard for reading and returns entry point i, or the Return the call
// answers without entering the library (ErrorUninitialized, ErrorFunctionNotFound). On
// Success the caller calls the entry point and then s.guard.RUnlock.
func (s *system) enter(i int) (C.uintptr_t, Return) {
	s.guard.RLock()
	if s.refs == 0 && !s.unguarded {
		s.guard.RUnlock()
		return 0, ErrorUninitialized
	}
	fn := s.fn[i]
	if fn == 0 {
		s.guard.RUnlock()
		return 0, ErrorFunctionNotFound
	}
	return fn, Success
}

// DeviceGetCount calls nvmlDeviceGetCount_v2.
func (s *system) DeviceGetCount() (int, Return) {
	fn, r := s.enter(fnCount)
	if r != Success {
		return 0, r
	}
	defer s.guard.RUnlock()
	var n C.unsigned
	r = Return(C.pm_count(fn, &n))
	return int(n), r
}

// DeviceGetHandleByIndex calls nvmlDeviceGetHandleByIndex_v2.
func (s *system) DeviceGetHandleByIndex(index int) (Device, Return) {
	if index < 0 || uint64(index) > 1<<32-1 {
		return nil, ErrorInvalidArgument
	}
	fn, r := s.enter(fnHandle)
	if r != Success {
		return nil, r
	}
	defer s.guard.RUnlock()
	var h C.uintptr_t
	if r := Return(C.pm_handle(fn, C.unsigned(index), &h)); r != Success {
		return nil, r
	}
	return &device{lib: s, h: h}, Success
}

// DeviceGetHandleByPciBusId calls nvmlDeviceGetHandleByPciBusId_v2. An address holding a NUL
// byte is refused: C would read it cut short.
func (s *system) DeviceGetHandleByPciBusId(busID string) (Device, Return) {
	if strings.IndexByte(busID, 0) >= 0 {
		return nil, ErrorInvalidArgument
	}
	fn, r := s.enter(fnHandleByBus)
	if r != Success {
		return nil, r
	}
	defer s.guard.RUnlock()
	cbus := C.CString(busID)
	defer C.free(unsafe.Pointer(cbus))
	var h C.uintptr_t
	if r := Return(C.pm_handleByBus(fn, cbus, &h)); r != Success {
		return nil, r
	}
	return &device{lib: s, h: h}, Success
}

// device is a handle (nvmlDevice_t) of a system library: a GPU or a MIG instance.
type device struct {
	lib *system
	h   C.uintptr_t
}

// str calls a string entry point with a buffer of stringSize bytes.
func (d *device) str(i int) (string, Return) {
	fn, r := d.lib.enter(i)
	if r != Success {
		return "", r
	}
	defer d.lib.guard.RUnlock()
	var buf [stringSize]C.char
	if r := Return(C.pm_string(fn, d.h, &buf[0], stringSize)); r != Success {
		return "", r
	}
	buf[stringSize-1] = 0
	return C.GoString(&buf[0]), Success
}

// GetName calls nvmlDeviceGetName.
func (d *device) GetName() (string, Return) { return d.str(fnName) }

// GetUUID calls nvmlDeviceGetUUID.
func (d *device) GetUUID() (string, Return) { return d.str(fnUUID) }

// GetMemoryInfo calls nvmlDeviceGetMemoryInfo.
func (d *device) GetMemoryInfo() (Memory, Return) {
	fn, r := d.lib.enter(fnMemory)
	if r != Success {
		return Memory{}, r
	}
	defer d.lib.guard.RUnlock()
	var m C.pmMemory
	if r := Return(C.pm_memory(fn, d.h, &m)); r != Success {
		return Memory{}, r
	}
	return Memory{Total: uint64(m.total), Free: uint64(m.free), Used: uint64(m.used)}, Success
}

// GetMemoryInfoV2 calls nvmlDeviceGetMemoryInfo_v2 with the struct's version set.
func (d *device) GetMemoryInfoV2() (Memory, Return) {
	fn, r := d.lib.enter(fnMemoryV2)
	if r != Success {
		return Memory{}, r
	}
	defer d.lib.guard.RUnlock()
	var m C.pmMemoryV2
	if r := Return(C.pm_memoryV2(fn, d.h, &m)); r != Success {
		return Memory{}, r
	}
	return Memory{Total: uint64(m.total), Reserved: uint64(m.reserved), Free: uint64(m.free),
		Used: uint64(m.used)}, Success
}

// GetPciInfo calls nvmlDeviceGetPciInfo_v3.
func (d *device) GetPciInfo() (PciInfo, Return) {
	fn, r := d.lib.enter(fnPci)
	if r != Success {
		return PciInfo{}, r
	}
	defer d.lib.guard.RUnlock()
	var p C.pmPciInfo
	if r := Return(C.pm_pci(fn, d.h, &p)); r != Success {
		return PciInfo{}, r
	}
	p.busId[len(p.busId)-1] = 0
	return PciInfo{Domain: uint32(p.domain), Bus: uint32(p.bus), Device: uint32(p.device),
		PciDeviceId: uint32(p.pciDeviceId), BusId: C.GoString(&p.busId[0])}, Success
}

// unsigned calls an entry point answering one unsigned int.
func (d *device) unsigned(i int) (uint32, Return) {
	fn, r := d.lib.enter(i)
	if r != Success {
		return 0, r
	}
	defer d.lib.guard.RUnlock()
	var v C.unsigned
	r = Return(C.pm_uint(fn, d.h, &v))
	return uint32(v), r
}

// GetNumaNodeId calls nvmlDeviceGetNumaNodeId. The node is read as a signed int, so that an
// all-ones answer reads -1 (no node), not 4294967295.
func (d *device) GetNumaNodeId() (int, Return) {
	v, r := d.unsigned(fnNuma)
	return int(int32(v)), r
}

// GetMaxMigDeviceCount calls nvmlDeviceGetMaxMigDeviceCount.
func (d *device) GetMaxMigDeviceCount() (int, Return) {
	v, r := d.unsigned(fnMaxMig)
	return int(v), r
}

// GetMigMode calls nvmlDeviceGetMigMode.
func (d *device) GetMigMode() (current, pending int, r Return) {
	fn, r := d.lib.enter(fnMig)
	if r != Success {
		return 0, 0, r
	}
	defer d.lib.guard.RUnlock()
	var c, p C.unsigned
	r = Return(C.pm_mig(fn, d.h, &c, &p))
	return int(c), int(p), r
}

// GetMigDeviceHandleByIndex calls nvmlDeviceGetMigDeviceHandleByIndex.
func (d *device) GetMigDeviceHandleByIndex(index int) (Device, Return) {
	if index < 0 || uint64(index) > 1<<32-1 {
		return nil, ErrorInvalidArgument
	}
	fn, r := d.lib.enter(fnMigHandle)
	if r != Success {
		return nil, r
	}
	defer d.lib.guard.RUnlock()
	var h C.uintptr_t
	if r := Return(C.pm_migHandle(fn, d.h, C.unsigned(index), &h)); r != Success {
		return nil, r
	}
	return &device{lib: d.lib, h: h}, Success
}
