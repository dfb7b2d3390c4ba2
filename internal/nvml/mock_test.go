//go:build cgo && linux

package nvml

import (
	"errors"
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

func TestDiscoverMIG(t *testing.T) {
	srv, _, _ := newDGX(t)
	if ret, _ := srv.Devices[3].SetMigMode(gonvml.DEVICE_MIG_ENABLE); ret != gonvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
	gpus, err := Discover(srv)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	for i, g := range gpus {
		if g.MIG != (i == 3) {
			t.Errorf("GPU %d MIG = %v", i, g.MIG)
		}
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
