//go:build cgo && linux

package nvml

import (
	"errors"
	"fmt"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// newDGX returns go-nvml's DGX H100 mock (8 GPUs) with memory usage filled in, since the mock
// leaves free and used at 0 and has no GetMemoryInfo_v2. It counts Init and Shutdown calls.
func newDGX(t *testing.T) (srv *server.Server, inits, shutdowns *int) {
	t.Helper()
	srv = dgxh100.New()
	inits, shutdowns = new(int), new(int)
	srv.InitFunc = func() gonvml.Return { *inits++; return gonvml.SUCCESS }
	srv.ShutdownFunc = func() gonvml.Return { *shutdowns++; return gonvml.SUCCESS }
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		used := uint64(i+1) << 30
		dev.MemoryInfo.Used = used
		dev.MemoryInfo.Free = dev.MemoryInfo.Total - used
		dev.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
			m := dev.MemoryInfo
			return gonvml.Memory_v2{Version: gonvml.STRUCT_VERSION(gonvml.Memory_v2{}, 2), Total: m.Total,
				Free: m.Free, Used: m.Used}, gonvml.SUCCESS
		}
	}
	return srv, inits, shutdowns
}

func TestDiscoverDGXH100(t *testing.T) {
	srv, inits, shutdowns := newDGX(t)
	gpus, err := Discover(srv)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if len(gpus) != 8 {
		t.Fatalf("found %d GPUs, want 8", len(gpus))
	}
	uuids := map[string]bool{}
	for i, g := range gpus {
		if g.Index != i || g.Name != "NVIDIA H100 80GB HBM3" || g.MIG {
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
	if *inits != 1 || *shutdowns != 1 {
		t.Errorf("Init called %d times, Shutdown %d; want 1 and 1", *inits, *shutdowns)
	}
}

// TestDiscoverMIG turns MIG on for GPU 3 with two instances (in slots 0 and 2 of 7): they are
// listed with their UUIDs and memory, and no other GPU has any.
func TestDiscoverMIG(t *testing.T) {
	srv, _, _ := newDGX(t)
	if ret, _ := srv.Devices[3].SetMigMode(gonvml.DEVICE_MIG_ENABLE); ret != gonvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
	dev := srv.Devices[3].(*server.Device)
	dev.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 7, gonvml.SUCCESS }
	dev.GetMigDeviceHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		if i != 0 && i != 2 {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		return &mock.Device{
			GetUUIDFunc: func() (string, gonvml.Return) { return fmt.Sprintf("MIG-%d", i), gonvml.SUCCESS },
			GetMemoryInfo_v2Func: func() (gonvml.Memory_v2, gonvml.Return) {
				return gonvml.Memory_v2{Total: 10 << 30, Free: 9 << 30, Used: 1 << 30}, gonvml.SUCCESS
			},
		}, gonvml.SUCCESS
	}
	gpus, err := Discover(srv)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	for i, g := range gpus {
		if g.MIG != (i == 3) || (i != 3) != (len(g.MIGDevices) == 0) {
			t.Errorf("GPU %d MIG = %v, instances %+v", i, g.MIG, g.MIGDevices)
		}
	}
	want := []MIGDevice{{0, "MIG-0", 10 << 30, 9 << 30, 1 << 30}, {2, "MIG-2", 10 << 30, 9 << 30, 1 << 30}}
	if got := gpus[3].MIGDevices; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("MIG instances %+v, want %+v", got, want)
	}
}

// TestNUMANodeAndPCI: the PCI address NVML gives each GPU, and the node of a GPU found by it.
func TestNUMANodeAndPCI(t *testing.T) {
	srv, _, _ := newDGX(t)
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		dev.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
			return gonvml.PciInfo{Domain: 0, Bus: uint32(0x10 + i), Device: 0}, gonvml.SUCCESS
		}
		dev.GetNumaNodeIdFunc = func() (int, gonvml.Return) { return i / 4, gonvml.SUCCESS }
	}
	srv.DeviceGetHandleByPciBusIdFunc = func(id string) (gonvml.Device, gonvml.Return) {
		for i := range srv.Devices {
			if id == fmt.Sprintf("0000:%02x:00.0", 0x10+i) {
				return srv.Devices[i], gonvml.SUCCESS
			}
		}
		return nil, gonvml.ERROR_NOT_FOUND
	}
	gpus, err := Discover(srv)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range gpus {
		if want := fmt.Sprintf("0000:%02x:00.0", 0x10+i); g.PCIBusID != want {
			t.Errorf("GPU %d PCI %q, want %q", i, g.PCIBusID, want)
		}
		if n, ok, err := NUMANode(srv, g.PCIBusID); err != nil || !ok || n != i/4 {
			t.Errorf("NUMANode of GPU %d = %d, %v, %v; want %d", i, n, ok, err, i/4)
		}
	}
	if _, ok, err := NUMANode(srv, "0000:99:00.0"); ok || err != nil {
		t.Errorf("NUMANode of no device = %v, %v", ok, err)
	}
	lib := &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}
	if _, _, err := NUMANode(lib, "0000:10:00.0"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("NUMANode without NVML = %v", err)
	}
}

func TestDiscoverMemoryV1Fallback(t *testing.T) {
	srv, _, _ := newDGX(t)
	dev := srv.Devices[0].(*server.Device)
	dev.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
		return gonvml.Memory_v2{}, gonvml.ERROR_FUNCTION_NOT_FOUND
	}
	gpus, err := Discover(srv)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if g := gpus[0]; g.UsedMem != 1<<30 || g.TotalMem != 80<<30 {
		t.Errorf("v1 fallback: %+v", g)
	}
	dev.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
		return gonvml.Memory_v2{}, gonvml.ERROR_GPU_IS_LOST
	}
	if _, err := Discover(srv); !errors.Is(err, gonvml.ERROR_GPU_IS_LOST) {
		t.Errorf("Discover with a lost GPU = %v, want ERROR_GPU_IS_LOST", err)
	}
}

func TestMemoryUsed(t *testing.T) {
	srv, inits, shutdowns := newDGX(t)
	used, err := MemoryUsed(srv, 5)
	if err != nil || used != 6<<30 {
		t.Errorf("MemoryUsed(5) = %d, %v; want 6 GiB", used, err)
	}
	if _, err := MemoryUsed(srv, 8); !errors.Is(err, gonvml.ERROR_INVALID_ARGUMENT) {
		t.Errorf("MemoryUsed(8) = %v, want ERROR_INVALID_ARGUMENT", err)
	}
	if *inits != 2 || *shutdowns != 2 {
		t.Errorf("Init %d, Shutdown %d; want 2 and 2", *inits, *shutdowns)
	}
}

// TestFailedInitCallsNothingElse uses a bare mock whose only method is Init: any other call
// panics ("method is nil"), standing in for the process abort of the real library.
func TestFailedInitCallsNothingElse(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}
	_, err := Discover(lib)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, gonvml.ERROR_LIBRARY_NOT_FOUND) {
		t.Errorf("Discover = %v, want ErrUnavailable and ERROR_LIBRARY_NOT_FOUND", err)
	}
	if _, err := MemoryUsed(lib, 0); !errors.Is(err, ErrUnavailable) {
		t.Errorf("MemoryUsed = %v, want ErrUnavailable", err)
	}
	if n := len(lib.InitCalls()); n != 2 {
		t.Errorf("Init called %d times, want 2", n)
	}
	if n := len(lib.ShutdownCalls()); n != 0 {
		t.Errorf("Shutdown called %d times after a failed Init", n)
	}
}
