package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// wantGPU, when set, makes TestGPU fail rather than skip without a device: TestGPUOnFakeDriver
// sets it in the child it runs against the fake driver.
const wantGPU = "PINMALLOC_USER_WANT_GPU"

func TestHost(t *testing.T) {
	if err := hostDemo(); err != nil {
		t.Fatal(err)
	}
}

// TestErrors matches errors from outside the module with the public sentinels.
func TestErrors(t *testing.T) {
	if _, err := pinned.New(pinned.Options{Capacity: -1}); !errors.Is(err, pinned.ErrInvalidOptions) {
		t.Errorf("pinned.New with a negative capacity = %v; want pinned.ErrInvalidOptions", err)
	}
	a, err := arena.New(arena.Options{Provider: arena.Pageable(arena.HostOptions{}), Capacity: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h, err := heap.New(a, heap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Bytes(0x1000); !errors.Is(err, heap.ErrNotOwned) {
		t.Errorf("heap Bytes of a foreign address = %v; want heap.ErrNotOwned", err)
	}
	if _, err := a.Bytes(0x1000, 1); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("arena Bytes of a foreign address = %v; want arena.ErrInvalid", err)
	}
	if err := errors.Join(h.Close(), a.Close()); err != nil {
		t.Fatal(err)
	}
	if _, err := device.New(nil, device.Options{}); !errors.Is(err, cuda.ErrNoDriver) || !errors.Is(err, device.ErrNoDriver) {
		t.Errorf("device.New(nil) = %v; want cuda.ErrNoDriver (the same value as device.ErrNoDriver)", err)
	}
	if _, err := cudamem.NewDeviceVMM(&cuda.Device{}); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("cudamem.NewDeviceVMM of a zero Device = %v; want arena.ErrInvalid", err)
	}
	var d *cuda.Device
	if _, err := d.StreamCreate(cuda.StreamDefault); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("StreamCreate on a nil Device = %v; want cuda.ErrNoDriver", err)
	}
}

// TestGPU runs the GPU part on device 0: the real driver when there is one, the fake when
// TestGPUOnFakeDriver runs it. Without a driver it skips, saying why.
func TestGPU(t *testing.T) {
	dev, err := cuda.Open(0)
	if (errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice)) && os.Getenv(wantGPU) == "" {
		t.Skipf("no CUDA device: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	report, err := gpuDemo(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(report)
}

// TestGPUOnFakeDriver runs TestGPU in a child process whose driver is the repository's fake
// libcuda (internal/fakecuda/fakedriver.c.in, compiled here with the C compiler), selected with
// cuda.LibraryEnv: the fake cannot be imported from outside the module, but it can be loaded.
func TestGPUOnFakeDriver(t *testing.T) {
	if !cgoEnabled {
		t.Skip("built without cgo: no driver can be loaded")
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler to build the fake driver: %v", err)
	}
	src := filepath.Join("..", "..", "internal", "fakecuda", "fakedriver.c.in")
	code, err := os.ReadFile(src)
	if err != nil {
		t.Skipf("the fake driver's source is not here (not run from the repository): %v", err)
	}
	dir := t.TempDir()
	csrc, lib := filepath.Join(dir, "fakedriver.c"), filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(csrc, code, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-o", lib, csrc).CombinedOutput(); err != nil {
		t.Fatalf("building the fake driver: %v\n%s", err, out)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestGPU$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), cuda.LibraryEnv+"="+lib, wantGPU+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestGPU ") {
		t.Fatalf("TestGPU on the fake driver: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
