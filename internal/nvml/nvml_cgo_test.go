//go:build cgo && linux

package nvml

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// fakeLibrary compiles testdata/fakenvml.c into a shared library with the C compiler ($CC,
// else gcc) and returns its path; the test skips without a compiler. Each call gets a library
// of its own (a file of its own: dlopen loads it afresh, with fresh state), compiled once per
// set of defines in this test binary and copied.
func fakeLibrary(t *testing.T, defines ...string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the fake NVML library", cc)
	}
	key := strings.Join(defines, " ")
	fakeBuilt.Lock()
	defer fakeBuilt.Unlock()
	if fakeBuilt.libs[key] == nil {
		built := filepath.Join(t.TempDir(), "libfakenvml.so")
		args := append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", built}, defines...)
		if out, err := exec.Command(cc, append(args, "testdata/fakenvml.c")...).CombinedOutput(); err != nil {
			t.Fatalf("building the fake NVML library: %v\n%s", err, out)
		}
		b, err := os.ReadFile(built)
		if err != nil {
			t.Fatal(err)
		}
		fakeBuilt.libs[key] = b
	}
	lib := filepath.Join(t.TempDir(), "libfakenvml.so")
	if err := os.WriteFile(lib, fakeBuilt.libs[key], 0o755); err != nil {
		t.Fatal(err)
	}
	return lib
}

// fakeBuilt holds the fake libraries compiled so far, by their defines.
var fakeBuilt = struct {
	sync.Mutex
	libs map[string][]byte
}{libs: map[string][]byte{}}

// The fake library's GPUs, as Discover must describe them through the binding.
var fakeLibraryGPUs = []GPU{
	{Index: 0, Name: "NVIDIA H100 80GB HBM3 with a product name longer than sixty-four bytes",
		UUID: "GPU-00000000-1111-2222-3333-444444444444", TotalMem: 80 << 30,
		FreeMem: 80<<30 - 500<<20 - 3<<30, UsedMem: 3 << 30, PCIBusID: "0000:1b:00.0"},
	{Index: 1, Name: "NVIDIA H200", UUID: "GPU-55555555-6666-7777-8888-999999999999",
		TotalMem: 141 << 30, FreeMem: 140 << 30, UsedMem: 1 << 30, MIG: true, PCIBusID: "0001:9a:00.0",
		MIGDevices: []MIGDevice{
			{0, "MIG-aaaaaaaa-0000-0000-0000-000000000000", 18 << 30, 17 << 30, 1 << 30},
			{3, "MIG-aaaaaaaa-3333-3333-3333-333333333333", 71 << 30, 66 << 30, 5 << 30},
		}},
}

// TestBindingFakeLibrary drives the dlopen binding against a fake libnvidia-ml.so that checks
// what the real one checks: Init first, the v2 memory struct's version (on the GPUs and on
// the MIG instances), the string buffers' size (a product name longer than the v1 buffer of
// 64 bytes), the PCI struct's layout, the MIG calls' indices.
func TestBindingFakeLibrary(t *testing.T) {
	lib := Open(fakeLibrary(t))
	gpus, err := Discover(lib)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if !reflect.DeepEqual(gpus, fakeLibraryGPUs) {
		t.Errorf("Discover = %+v\nwant       %+v", gpus, fakeLibraryGPUs)
	}
	if used, err := MemoryUsed(lib, 1); err != nil || used != 1<<30 {
		t.Errorf("MemoryUsed(1) = %d, %v", used, err)
	}
	if _, err := MemoryUsed(lib, 2); !errors.Is(err, ErrorInvalidArgument) {
		t.Errorf("MemoryUsed(2) = %v, want ErrorInvalidArgument", err)
	}
	// Every Init was matched by a Shutdown: the guard refuses a call now, and the library,
	// which a call reaching it uninitialized would have poisoned, still answers.
	if _, r := lib.DeviceGetCount(); r != ErrorUninitialized {
		t.Errorf("DeviceGetCount after the sessions = %v, want ErrorUninitialized", r)
	}
	if _, err := Discover(lib); err != nil {
		t.Errorf("Discover after a refused call = %v", err)
	}
}

// TestBindingPciInfo reads the whole nvmlPciInfo_t: the fields on both sides of the legacy
// bus id and the 32-byte busId at the end land where the binding reads them.
func TestBindingPciInfo(t *testing.T) {
	lib := Open(fakeLibrary(t))
	if r := lib.Init(); r != Success {
		t.Fatal(r)
	}
	defer lib.Shutdown()
	d, r := lib.DeviceGetHandleByIndex(1)
	if r != Success {
		t.Fatal(r)
	}
	p, r := d.GetPciInfo()
	want := PciInfo{Domain: 1, Bus: 0x9a, PciDeviceId: 0x233510DE, BusId: "00000001:9A:00.0"}
	if r != Success || p != want {
		t.Errorf("GetPciInfo = %+v, %v; want %+v", p, r, want)
	}
	mig, r := d.GetMigDeviceHandleByIndex(3)
	if r != Success {
		t.Fatal(r)
	}
	if name, r := mig.GetName(); name != "NVIDIA H200 MIG 3g.71gb" || r != Success {
		t.Errorf("MIG instance name %q, %v", name, r)
	}
	for i, want := range map[int]Return{1: ErrorNotFound, 7: ErrorInvalidArgument, -1: ErrorInvalidArgument} {
		if _, r := d.GetMigDeviceHandleByIndex(i); r != want {
			t.Errorf("GetMigDeviceHandleByIndex(%d) = %v, want %v", i, r, want)
		}
	}
}

// TestBindingNUMANode finds GPUs by PCI address through nvmlDeviceGetHandleByPciBusId_v2, in
// the formats NVML reads, and asks their node; a GPU whose platform does not say, an unknown
// address, a malformed one and a library without the call give no node and no error.
func TestBindingNUMANode(t *testing.T) {
	lib := Open(fakeLibrary(t))
	for _, id := range []string{"0001:9a:00.0", "1:9a:0"} {
		if n, ok, err := NUMANode(lib, id); n != 1 || !ok || err != nil {
			t.Errorf("NUMANode(%q) = %d, %v, %v; want 1", id, n, ok, err)
		}
	}
	for _, id := range []string{"0000:1b:00.0", "0000:77:00.0", "bad", "0001:9a:00.0\x00junk"} {
		if _, ok, err := NUMANode(lib, id); ok || err != nil {
			t.Errorf("NUMANode(%q) = %v, %v; want no node, no error", id, ok, err)
		}
	}
	old := Open(fakeLibrary(t, "-DNO_NUMA"))
	if _, ok, err := NUMANode(old, "0001:9a:00.0"); ok || err != nil {
		t.Errorf("NUMANode without nvmlDeviceGetNumaNodeId = %v, %v", ok, err)
	}
	if r := old.Init(); r != Success {
		t.Fatal(r)
	}
	defer old.Shutdown()
	d, r := old.DeviceGetHandleByPciBusId("0001:9a:00.0")
	if r != Success {
		t.Fatal(r)
	}
	if _, r := d.GetNumaNodeId(); r != ErrorFunctionNotFound {
		t.Errorf("GetNumaNodeId = %v, want ErrorFunctionNotFound", r)
	}
}

// TestBindingGuard: no call but Init reaches the library unless an Init of the binding is
// outstanding, handles kept past Shutdown included. Without the guard (unguarded) the same
// call reaches the fake, which answers as NVML does and poisons itself: the test would see it.
func TestBindingGuard(t *testing.T) {
	path := fakeLibrary(t)
	lib := Open(path)
	if _, r := lib.DeviceGetCount(); r != ErrorUninitialized {
		t.Errorf("DeviceGetCount before Init = %v", r)
	}
	if _, r := lib.DeviceGetHandleByPciBusId("0000:1b:00.0"); r != ErrorUninitialized {
		t.Errorf("DeviceGetHandleByPciBusId before Init = %v", r)
	}
	if r := lib.Shutdown(); r != ErrorUninitialized {
		t.Errorf("Shutdown before Init = %v", r)
	}
	if r := lib.Init(); r != Success {
		t.Fatal(r)
	}
	d, r := lib.DeviceGetHandleByIndex(1)
	if r != Success {
		t.Fatal(r)
	}
	if r := lib.Shutdown(); r != Success {
		t.Fatal(r)
	}
	for what, r := range map[string]Return{
		"GetName":                   second(d.GetName()),
		"GetMemoryInfoV2":           second(d.GetMemoryInfoV2()),
		"GetPciInfo":                second(d.GetPciInfo()),
		"GetNumaNodeId":             second(d.GetNumaNodeId()),
		"GetMaxMigDeviceCount":      second(d.GetMaxMigDeviceCount()),
		"GetMigDeviceHandleByIndex": second(d.GetMigDeviceHandleByIndex(0)),
	} {
		if r != ErrorUninitialized {
			t.Errorf("%s after Shutdown = %v", what, r)
		}
	}
	if _, err := Discover(lib); err != nil {
		t.Fatalf("Discover after refused calls = %v (a call reaching the library uninitialized poisons it)", err)
	}

	// The same first call past the guard: the fake sees it.
	bare := Open(fakeLibrary(t)).(*system)
	bare.unguarded = true
	if _, r := bare.DeviceGetCount(); r != ErrorUninitialized && r != ErrorFunctionNotFound {
		t.Errorf("unguarded DeviceGetCount before any load = %v", r)
	}
	bare.Init()
	bare.Shutdown()
	if _, r := bare.DeviceGetCount(); r != ErrorUninitialized {
		t.Errorf("unguarded DeviceGetCount after Shutdown = %v", r)
	}
	if _, err := Discover(bare); !errors.Is(err, ErrorUnknown) {
		t.Errorf("Discover on the poisoned fake = %v, want ErrorUnknown", err)
	}
}

// TestBindingWithoutMemoryV2: a library without nvmlDeviceGetMemoryInfo_v2 (drivers before
// it) answers ErrorFunctionNotFound, and Discover falls back to v1 (used includes reserved).
func TestBindingWithoutMemoryV2(t *testing.T) {
	lib := Open(fakeLibrary(t, "-DNO_MEMORY_V2"))
	if r := lib.Init(); r != Success {
		t.Fatal(r)
	}
	d, r := lib.DeviceGetHandleByIndex(0)
	if r != Success {
		t.Fatal(r)
	}
	if _, r := d.GetMemoryInfoV2(); r != ErrorFunctionNotFound {
		t.Errorf("GetMemoryInfoV2 = %v, want ErrorFunctionNotFound", r)
	}
	lib.Shutdown()
	gpus, err := Discover(lib)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if g := gpus[0]; g.UsedMem != 3<<30+500<<20 || g.FreeMem != g.TotalMem-g.UsedMem {
		t.Errorf("v1 fallback: %+v", g)
	}
	if m := gpus[1].MIGDevices; len(m) != 2 || m[1].TotalMem != 71<<30 || m[1].UsedMem != 5<<30 {
		t.Errorf("MIG instances through v1: %+v", m)
	}
}

// TestBindingMissingLibrary: a library that cannot be loaded fails Init with
// ErrorLibraryNotFound, and the other calls answer without touching anything.
func TestBindingMissingLibrary(t *testing.T) {
	lib := Open(filepath.Join(t.TempDir(), "libnvidia-ml-absent.so"))
	if _, err := Discover(lib); !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrorLibraryNotFound) {
		t.Errorf("Discover = %v", err)
	}
	if _, r := lib.DeviceGetCount(); r != ErrorUninitialized {
		t.Errorf("DeviceGetCount = %v, want ErrorUninitialized", r)
	}
	if r := lib.Shutdown(); r != ErrorUninitialized {
		t.Errorf("Shutdown = %v, want ErrorUninitialized", r)
	}
}

// TestBindingConcurrent runs sessions on one library from several goroutines: each session's
// calls run while its Init is outstanding, whatever the others' Shutdowns do.
func TestBindingConcurrent(t *testing.T) {
	lib := Open(fakeLibrary(t))
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				gpus, err := Discover(lib)
				if err == nil && !reflect.DeepEqual(gpus, fakeLibraryGPUs) {
					err = errors.New("Discover answered other GPUs")
				}
				if _, ok, nerr := NUMANode(lib, "0001:9a:00.0"); err == nil && (!ok || nerr != nil) {
					err = errors.Join(errors.New("NUMANode found no node"), nerr)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, r := lib.DeviceGetCount(); r != ErrorUninitialized {
		t.Errorf("DeviceGetCount after the sessions = %v", r)
	}
}
