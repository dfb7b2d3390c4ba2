package nvml

import (
	"errors"
	"reflect"
	"testing"
)

// checkBalanced fails the test if f saw a call while uninitialized or an Init not shut down.
func checkBalanced(t *testing.T, f *Fake) {
	t.Helper()
	if !f.Balanced() {
		t.Errorf("%d calls while NVML was not initialized, %d Inits not matched by Shutdown", f.Uninitialized, f.refs)
	}
}

func TestDiscoverDGXH100(t *testing.T) {
	f := NewFakeDGXH100()
	gpus, err := Discover(f)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if len(gpus) != 8 {
		t.Fatalf("found %d GPUs, want 8", len(gpus))
	}
	uuids := map[string]bool{}
	buses := []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
		"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}
	for i, g := range gpus {
		if g.Index != i || g.Name != "NVIDIA H100 80GB HBM3" || g.MIG || g.MIGDevices != nil || g.PCIBusID != buses[i] {
			t.Errorf("GPU %d = %+v", i, g)
		}
		if g.TotalMem != 80<<30 || g.UsedMem != uint64(i+1)<<30 || g.FreeMem != g.TotalMem-g.UsedMem {
			t.Errorf("GPU %d memory: total %d free %d used %d", i, g.TotalMem, g.FreeMem, g.UsedMem)
		}
		if g.UUID == "" || uuids[g.UUID] {
			t.Errorf("GPU %d UUID %q empty or repeated", i, g.UUID)
		}
		uuids[g.UUID] = true
	}
	if f.Inits != 1 || f.Shutdowns != 1 {
		t.Errorf("Init called %d times, Shutdown %d; want 1 and 1", f.Inits, f.Shutdowns)
	}
	checkBalanced(t, f)
}

// TestDiscoverMIG turns MIG on for GPU 3 with two instances (in slots 0 and 2 of 7): they are
// listed with their UUIDs and memory, and no other GPU has any; a MIG-incapable GPU is simply
// not in MIG mode.
func TestDiscoverMIG(t *testing.T) {
	f := NewFakeDGXH100()
	mem := Memory{Total: 10 << 30, Free: 9 << 30, Used: 1 << 30}
	f.SetMIG(3, FakeMIGDevice{Index: 0, UUID: "MIG-0", Memory: mem}, FakeMIGDevice{Index: 2, UUID: "MIG-2", Memory: mem})
	f.Devices[5].MigReturn = ErrorNotSupported
	gpus, err := Discover(f)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	for i, g := range gpus {
		if g.MIG != (i == 3) || (i != 3) != (len(g.MIGDevices) == 0) {
			t.Errorf("GPU %d MIG = %v, instances %+v", i, g.MIG, g.MIGDevices)
		}
	}
	want := []MIGDevice{{0, "MIG-0", 10 << 30, 9 << 30, 1 << 30}, {2, "MIG-2", 10 << 30, 9 << 30, 1 << 30}}
	if got := gpus[3].MIGDevices; !reflect.DeepEqual(got, want) {
		t.Errorf("MIG instances %+v, want %+v", got, want)
	}
	checkBalanced(t, f)
}

// TestNUMANodeAndPCI: the PCI address NVML gives each GPU, and the node of a GPU found by it
// (in each of the formats NVML reads); an address no GPU has, one NVML cannot read and a
// platform that does not say give no node and no error.
func TestNUMANodeAndPCI(t *testing.T) {
	f := NewFakeDGXH100()
	gpus, err := Discover(f)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range gpus {
		if n, ok, err := NUMANode(f, g.PCIBusID); err != nil || !ok || n != i/4 {
			t.Errorf("NUMANode of GPU %d (%s) = %d, %v, %v; want %d", i, g.PCIBusID, n, ok, err, i/4)
		}
	}
	for _, id := range []string{"0:ba:0", "ba:00.0"} {
		if n, ok, err := NUMANode(f, id); err != nil || !ok || n != 1 {
			t.Errorf("NUMANode(%q) = %d, %v, %v; want 1", id, n, ok, err)
		}
	}
	for _, id := range []string{"0000:99:00.0", "0000:18:00.1", "not an address", ""} {
		if _, ok, err := NUMANode(f, id); ok || err != nil {
			t.Errorf("NUMANode(%q) = %v, %v; want no node, no error", id, ok, err)
		}
	}
	// A node at or past internal/numa's bound, from a broken or foreign library, is no node
	// (numa.Bind would refuse it); the last one below the bound is one.
	for _, n := range []int{maxNUMANodes, 1<<31 - 1, -2} {
		f.Devices[0].NUMANode = n
		if got, ok, err := NUMANode(f, "0000:18:00.0"); ok || err != nil {
			t.Errorf("NUMANode answering node %d = %d, %v, %v; want no node", n, got, ok, err)
		}
	}
	f.Devices[0].NUMANode = maxNUMANodes - 1
	if n, ok, err := NUMANode(f, "0000:18:00.0"); n != maxNUMANodes-1 || !ok || err != nil {
		t.Errorf("NUMANode answering node %d = %d, %v, %v", maxNUMANodes-1, n, ok, err)
	}
	f.Devices[0].NumaReturn = ErrorNotSupported
	if _, ok, err := NUMANode(f, "0000:18:00.0"); ok || err != nil {
		t.Errorf("NUMANode where NVML does not say = %v, %v", ok, err)
	}
	if n := len(f.BusIDsAsked); n != 8+2+4+4+1 || f.BusIDsAsked[0] != "0000:18:00.0" {
		t.Errorf("asked %q", f.BusIDsAsked)
	}
	checkBalanced(t, f)
	failed := &Fake{InitReturn: ErrorLibraryNotFound}
	if _, _, err := NUMANode(failed, "0000:18:00.0"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("NUMANode without NVML = %v", err)
	}
	checkBalanced(t, failed)
}

// TestPCIBusIDUnknown: a GPU whose PCI query fails, or answers no address, has no PCIBusID.
func TestPCIBusIDUnknown(t *testing.T) {
	f := NewFakeDGXH100()
	f.Devices[1].PciReturn = ErrorGPUIsLost
	f.Devices[2].PCI = PciInfo{}
	gpus, err := Discover(f)
	if err != nil {
		t.Fatal(err)
	}
	if gpus[1].PCIBusID != "" || gpus[2].PCIBusID != "" || gpus[3].PCIBusID != "0000:5d:00.0" {
		t.Errorf("PCI addresses %q %q %q", gpus[1].PCIBusID, gpus[2].PCIBusID, gpus[3].PCIBusID)
	}
}

func TestDiscoverMemoryV1Fallback(t *testing.T) {
	f := NewFakeDGXH100()
	f.Devices[0].MemoryV2Return = ErrorFunctionNotFound
	gpus, err := Discover(f)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if g := gpus[0]; g.UsedMem != 1<<30 || g.TotalMem != 80<<30 {
		t.Errorf("v1 fallback: %+v", g)
	}
	// Any other failure of the v2 call is an error, not a fallback.
	f.Devices[0].MemoryV2Return = ErrorGPUIsLost
	if _, err := Discover(f); !errors.Is(err, ErrorGPUIsLost) {
		t.Errorf("Discover with a lost GPU = %v, want ErrorGPUIsLost", err)
	}
	checkBalanced(t, f)
}

func TestMemoryUsed(t *testing.T) {
	f := NewFakeDGXH100()
	used, err := MemoryUsed(f, 5)
	if err != nil || used != 6<<30 {
		t.Errorf("MemoryUsed(5) = %d, %v; want 6 GiB", used, err)
	}
	if _, err := MemoryUsed(f, 8); !errors.Is(err, ErrorInvalidArgument) {
		t.Errorf("MemoryUsed(8) = %v, want ErrorInvalidArgument", err)
	}
	if f.Inits != 2 || f.Shutdowns != 2 {
		t.Errorf("Init %d, Shutdown %d; want 2 and 2", f.Inits, f.Shutdowns)
	}
	checkBalanced(t, f)
}

// TestFailedInitCallsNothingElse: after a failed Init nothing else may be called (go-nvml
// aborted the process there); the fake counts any such call.
func TestFailedInitCallsNothingElse(t *testing.T) {
	f := NewFakeDGXH100()
	f.InitReturn = ErrorLibraryNotFound
	_, err := Discover(f)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrorLibraryNotFound) {
		t.Errorf("Discover = %v, want ErrUnavailable and ErrorLibraryNotFound", err)
	}
	if _, err := MemoryUsed(f, 0); !errors.Is(err, ErrUnavailable) {
		t.Errorf("MemoryUsed = %v, want ErrUnavailable", err)
	}
	if _, _, err := NUMANode(f, "0000:18:00.0"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("NUMANode = %v, want ErrUnavailable", err)
	}
	if f.Inits != 3 || f.Shutdowns != 0 {
		t.Errorf("Init called %d times, Shutdown %d; want 3 and 0", f.Inits, f.Shutdowns)
	}
	checkBalanced(t, f)
}

// TestFakeIsStrict: the fake refuses what NVML refuses, so the tests above can fail.
func TestFakeIsStrict(t *testing.T) {
	f := NewFakeDGXH100()
	if _, r := f.DeviceGetCount(); r != ErrorUninitialized || f.Uninitialized != 1 {
		t.Errorf("DeviceGetCount before Init = %v (%d counted)", r, f.Uninitialized)
	}
	if f.Balanced() {
		t.Error("Balanced after a call made uninitialized")
	}
	if r := f.Init(); r != Success {
		t.Fatal(r)
	}
	f.SetMIG(2, FakeMIGDevice{Index: 6, UUID: "MIG-6", Memory: Memory{Total: 10 << 30}})
	gpu2, _ := f.DeviceGetHandleByIndex(2)
	gpu0, _ := f.DeviceGetHandleByIndex(0)
	if n, r := gpu0.GetMaxMigDeviceCount(); n != 0 || r != Success {
		t.Errorf("GetMaxMigDeviceCount with MIG off = %d, %v", n, r)
	}
	if _, r := gpu0.GetMigDeviceHandleByIndex(0); r != ErrorNotSupported {
		t.Errorf("GetMigDeviceHandleByIndex with MIG off = %v", r)
	}
	if n, r := gpu2.GetMaxMigDeviceCount(); n != 7 || r != Success {
		t.Errorf("GetMaxMigDeviceCount = %d, %v", n, r)
	}
	for i, want := range map[int]Return{0: ErrorNotFound, 7: ErrorInvalidArgument, -1: ErrorInvalidArgument} {
		if _, r := gpu2.GetMigDeviceHandleByIndex(i); r != want {
			t.Errorf("GetMigDeviceHandleByIndex(%d) = %v, want %v", i, r, want)
		}
	}
	mig, r := gpu2.GetMigDeviceHandleByIndex(6)
	if r != Success {
		t.Fatal(r)
	}
	if u, _ := mig.GetUUID(); u != "MIG-6" {
		t.Errorf("MIG UUID %q", u)
	}
	if n, _ := mig.GetName(); n != "NVIDIA H100 80GB HBM3" {
		t.Errorf("MIG name %q", n)
	}
	if _, r := mig.GetPciInfo(); r != ErrorNotSupported {
		t.Errorf("GetPciInfo of a MIG instance = %v", r)
	}
	if _, r := f.DeviceGetHandleByPciBusId("0000:18:00.0:1"); r != ErrorInvalidArgument {
		t.Errorf("DeviceGetHandleByPciBusId of a bad address = %v", r)
	}
	f.Shutdown()
	for what, r := range map[string]Return{
		"GetName":  second(gpu0.GetName()),
		"GetUUID":  second(mig.GetUUID()),
		"GetPci":   second(gpu0.GetPciInfo()),
		"GetNuma":  second(gpu0.GetNumaNodeId()),
		"MigCount": second(gpu2.GetMaxMigDeviceCount()),
		"Shutdown": f.Shutdown(),
	} {
		if r != ErrorUninitialized {
			t.Errorf("%s after Shutdown = %v", what, r)
		}
	}
	if f.Uninitialized != 7 {
		t.Errorf("%d calls counted uninitialized, want 7", f.Uninitialized)
	}
}

// second returns the Return of a call answering a value and a Return.
func second[T any](_ T, r Return) Return { return r }

func TestFakeBusIDFormats(t *testing.T) {
	for id, want := range map[string][4]uint32{
		"0000:1b:00.0": {0, 0x1b, 0, 0}, "00000001:9A:00.0": {1, 0x9a, 0, 0},
		"1:2:3": {1, 2, 3, 0}, "1b:00.1": {0, 0x1b, 0, 1},
	} {
		d, b, v, fn, ok := parseBusID(id)
		if !ok || [4]uint32{d, b, v, fn} != want {
			t.Errorf("parseBusID(%q) = %x %x %x %x %v", id, d, b, v, fn, ok)
		}
	}
	for _, id := range []string{"", "1b", "1b:00", "g:00:00.0", "0:1:2:3", "0:1b:00.0.0", "-1:00.0"} {
		if _, _, _, _, ok := parseBusID(id); ok {
			t.Errorf("parseBusID(%q) accepted", id)
		}
	}
}
