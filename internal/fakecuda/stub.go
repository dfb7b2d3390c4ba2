package fakecuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// StubFault is the way a stub driver (Stub) fails.
type StubFault int

// The stub drivers.
const (
	// StubInitFails: cuInit returns CUDA_ERROR_UNKNOWN (999).
	StubInitFails StubFault = iota + 1
	// StubMissingSymbol: the library lacks cuDevicePrimaryCtxRetain, so no device opens.
	StubMissingSymbol
	// StubOutOfMemory: cuDevicePrimaryCtxRetain returns CUDA_ERROR_OUT_OF_MEMORY (2).
	StubOutOfMemory
	// StubNoDevice: the driver loads and finds no device (CUDA_ERROR_NO_DEVICE, 100).
	StubNoDevice
	// StubHangs: cuInit does not return for ten minutes, as on a GPU in a bad state.
	StubHangs
)

// stubSource is a libcuda.so.1 that is no driver: it answers the calls that open a device and
// fails at one of them, as FAULT says. Its device calls itself an H200, to show that a program
// that knows the fake by its marker does not take a broken library for one by a name either.
const stubSource = `
#include <stdio.h>
#include <unistd.h>
int cuInit(unsigned f) { if (FAULT == 5) sleep(600); return FAULT == 1 ? 999 : f ? 1 : 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuGetErrorName(int r, const char **s) {
	*s = r == 999 ? "CUDA_ERROR_UNKNOWN" : r == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" :
		r == 100 ? "CUDA_ERROR_NO_DEVICE" : r == 1 ? "CUDA_ERROR_INVALID_VALUE" : NULL;
	return *s ? 0 : 1; // a code it does not name: CUDA_ERROR_INVALID_VALUE and no text, as the driver
}
int cuGetErrorString(int r, const char **s) {
	if (cuGetErrorName(r, s) != 0) return 1;
	*s = "stub driver error";
	return 0;
}
int cuDeviceGetCount(int *n) { *n = FAULT == 4 ? 0 : 1; return 0; }
int cuDeviceGet(int *d, int ord) { if (FAULT == 4) return 100; if (ord != 0) return 101; *d = 0; return 0; }
int cuDeviceGetName(char *b, int n, int d) { snprintf(b, n, "NVIDIA H200"); return 0; }
int cuDeviceTotalMem_v2(size_t *n, int d) { *n = (size_t)141 << 30; return 0; }
int cuDeviceGetAttribute(int *v, int a, int d) { *v = 0; return 0; }
#if FAULT != 2
int cuDevicePrimaryCtxRetain(void **c, int d) { if (FAULT == 3) return 2; *c = (void *)0x1000; return 0; }
#endif
int cuDevicePrimaryCtxRelease_v2(int d) { return 0; }
`

// Stub compiles, with the C compiler, into dir a libcuda.so.1 that fails the way fault says,
// for the tests of a program that must fail loudly, with the reason, on a machine whose driver is
// broken (point cuda.LibraryEnv at it in a child process). It returns the library's path.
func Stub(dir string, fault StubFault) (string, error) {
	if fault < StubInitFails || fault > StubHangs {
		return "", fmt.Errorf("fakecuda: no stub driver %d", fault)
	}
	cc, err := compiler()
	if err != nil {
		return "", err
	}
	src, lib := filepath.Join(dir, fmt.Sprintf("stub%d.c", fault)), filepath.Join(dir, fmt.Sprintf("stub%d", fault), "libcuda.so.1")
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		return "", fmt.Errorf("fakecuda: %w", err)
	}
	if err := os.WriteFile(src, []byte(stubSource), 0o644); err != nil {
		return "", fmt.Errorf("fakecuda: %w", err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-Wall", fmt.Sprintf("-DFAULT=%d", fault), "-o", lib, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("fakecuda: building a stub driver: %w\n%s", err, out)
	}
	return lib, nil
}
