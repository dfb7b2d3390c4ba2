//go:build cgo && linux

package cuda

// A fake libcuda, compiled with the C compiler at test time, exercises the loader, the shims,
// the struct layouts, context discipline and accounting without a GPU. It is written from
// cuda.h's declarations independently of the shims: each entry point checks the arguments it
// receives (a CUmemLocation by value, a CUmemAllocationProp, a CUmemAccessDesc, flags that must
// be zero) and that a context is current on the calling thread (a __thread counter, as the
// real driver keeps the context stack per thread). cuGetProcAddress_v2 hands out the CUdevice
// forms of cuMemPrefetchAsync/cuMemAdvise for versions below 12020, which fail with 999, so the
// tests also prove that those entry points are requested at 12020.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

const fakeDriverC = `
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef unsigned long long CUdeviceptr;
typedef struct { int type; int id; } CUmemLocation;
typedef struct {
	int type; int requestedHandleTypes; CUmemLocation location; void *win32HandleMetaData;
	struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage; unsigned char reserved[4]; } allocFlags;
} CUmemAllocationProp;
typedef struct { CUmemLocation location; int flags; } CUmemAccessDesc;
typedef struct { unsigned flags; int recorded; } fakeEvent;
typedef struct { unsigned flags; int pending; } fakeStream;

#define CTX ((void *)0xC0C0)
/* A call needs a context current, and one that a retain still holds (the last release destroys it). */
#define NEEDCTX if (depth == 0 || LOAD(retained) == 0) return 201
static __thread int depth;
static int inited, retained;
static long live;
/* The counters are updated from many threads at once (the concurrency test below). */
#define INC(x) __atomic_add_fetch(&(x), 1, __ATOMIC_SEQ_CST)
#define DEC(x) __atomic_sub_fetch(&(x), 1, __ATOMIC_SEQ_CST)
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
static void *registered;
/* The push gate, for the tests of Close racing calls (made-up attributes: 9998 arms it, 9997
   reads whether a push is parked there, 9996 opens it): armed, the next push parks until it
   opens, a call in flight that has not yet entered its context. */
static int gateArmed, gateParked;

int cuInit(unsigned f) { if (f) return 1; inited = 1; return 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuGetErrorName(int r, const char **s) { *s = "FAKE_ERROR"; return 0; }
int cuGetErrorString(int r, const char **s) { *s = "fake error"; return 0; }
int cuDeviceGetCount(int *n) { if (!inited) return 3; *n = 1; return 0; }
int cuDeviceGet(int *d, int ord) { if (!inited) return 3; if (ord != 0) return 101; *d = 7; return 0; }
int cuDeviceGetName(char *b, int n, int d) { if (d != 7) return 101; strncpy(b, "Fake GPU", n); return 0; }
int cuDeviceTotalMem_v2(size_t *n, int d) { *n = (size_t)1 << 30; return 0; }
int cuDeviceGetAttribute(int *v, int a, int d) {
	if (a == 9998) { __atomic_store_n(&gateArmed, 1, __ATOMIC_SEQ_CST); *v = 0; return 0; }
	if (a == 9997) { *v = LOAD(gateParked); return 0; }
	if (a == 9996) { __atomic_store_n(&gateParked, 0, __ATOMIC_SEQ_CST); *v = 0; return 0; }
	/* 9999 is not a real attribute: it reports the fake's live objects, 1000 per retain. */
	*v = a == 9999 ? (int)LOAD(live) + 1000 * LOAD(retained) : (a == 102 || a == 115) ? 1 : 0;
	return d == 7 ? 0 : 101;
}
int cuDevicePrimaryCtxRetain(void **c, int d) { if (d != 7) return 101; INC(retained); *c = CTX; return 0; }
int cuDevicePrimaryCtxRelease_v2(int d) { if (d != 7 || LOAD(retained) == 0) return 201; DEC(retained); return 0; }
int cuDevicePrimaryCtxGetState(int d, unsigned *f, int *a) { if (d != 7) return 101; *f = 0; *a = LOAD(retained) > 0; return 0; }
/* Pushing takes a while, so that the Go scheduler retakes the P during the call: a goroutine
   that is not locked to its thread then often resumes on another one, where no context is. A
   push of the primary context while no retain holds it is refused: the context is gone
   (UNMEASURED what a GPU's driver answers; no call may run there in any case). */
int cuCtxPushCurrent_v2(void *c) {
	if (c != CTX || LOAD(retained) == 0) return 201;
	if (__atomic_exchange_n(&gateArmed, 0, __ATOMIC_SEQ_CST)) {
		__atomic_store_n(&gateParked, 1, __ATOMIC_SEQ_CST);
		while (LOAD(gateParked)) usleep(100);
	}
	usleep(300); depth++; return 0;
}
int cuCtxPopCurrent_v2(void **c) { if (depth == 0) return 201; depth--; if (c) *c = CTX; return 0; }
int cuCtxSynchronize(void) { NEEDCTX; return 0; }
int cuMemGetInfo_v2(size_t *f, size_t *t) { NEEDCTX; *t = (size_t)1 << 30; *f = *t - LOAD(live); return 0; }

int cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	NEEDCTX; if (n > ((size_t)1 << 40)) return 2;
	*p = (CUdeviceptr)(uintptr_t)malloc(n ? n : 1); INC(live); return 0;
}
int cuMemFree_v2(CUdeviceptr p) { NEEDCTX; free((void *)(uintptr_t)p); DEC(live); return 0; }
int cuMemAllocAsync(CUdeviceptr *p, size_t n, void *s) { if (s == 0) return 400; return cuMemAlloc_v2(p, n); }
int cuMemFreeAsync(CUdeviceptr p, void *s) { if (s == 0) return 400; return cuMemFree_v2(p); }
int cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned f) { if (f != 1 && f != 2) return 1; return cuMemAlloc_v2(p, n); }
int cuMemHostAlloc(void **p, size_t n, unsigned f) { NEEDCTX; if (f & ~7u) return 1; *p = malloc(n); INC(live); return 0; }
int cuMemFreeHost(void *p) { NEEDCTX; free(p); DEC(live); return 0; }
int cuMemHostRegister_v2(void *p, size_t n, unsigned f) {
	NEEDCTX; if (n == 0 || (f & ~15u)) return 1; if (registered == p) return 712; registered = p; return 0;
}
int cuMemHostUnregister(void *p) { NEEDCTX; if (registered != p) return 713; registered = 0; return 0; }
int cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned f) { NEEDCTX; if (f) return 1; *d = (CUdeviceptr)(uintptr_t)p; return 0; }
int cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { NEEDCTX; memset((void *)(uintptr_t)d, v, n); return 0; }
int cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { NEEDCTX; memcpy((void *)(uintptr_t)d, s, n); return 0; }
int cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { NEEDCTX; memcpy(d, (void *)(uintptr_t)s, n); return 0; }
int cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { NEEDCTX; memcpy((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return 0; }
static int pend(void *s) { if (s) ((fakeStream *)s)->pending = 1; return 0; }
int cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *s) { int r = cuMemsetD8_v2(d, v, n); return r ? r : pend(s); }
int cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *src, size_t n, void *s) { int r = cuMemcpyHtoD_v2(d, src, n); return r ? r : pend(s); }
int cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr src, size_t n, void *s) { int r = cuMemcpyDtoH_v2(d, src, n); return r ? r : pend(s); }
int cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr src, size_t n, void *s) { int r = cuMemcpyDtoD_v2(d, src, n); return r ? r : pend(s); }

static int goodProp(const CUmemAllocationProp *p) {
	return p->type == 1 && p->requestedHandleTypes == 0 && p->location.type == 1 && p->location.id == 0 &&
		p->win32HandleMetaData == 0 && p->allocFlags.compressionType == 0 && p->allocFlags.usage == 0;
}
int cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p, int opt) {
	NEEDCTX; if (!goodProp(p) || opt < 0 || opt > 1) return 1; *g = (size_t)2 << (20 + opt); return 0;
}
int cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long f) {
	NEEDCTX; if (addr || f || size == 0) return 1; *p = 0x7f0000000000ull; INC(live); return 0;
}
int cuMemAddressFree(CUdeviceptr p, size_t size) { NEEDCTX; if (p != 0x7f0000000000ull) return 1; DEC(live); return 0; }
int cuMemCreate(unsigned long long *h, size_t size, const CUmemAllocationProp *p, unsigned long long f) {
	NEEDCTX; if (!goodProp(p) || f || size % ((size_t)2 << 20)) return 1; *h = 0x4242; INC(live); return 0;
}
int cuMemRelease(unsigned long long h) { NEEDCTX; if (h != 0x4242) return 1; DEC(live); return 0; }
int cuMemMap(CUdeviceptr p, size_t size, size_t off, unsigned long long h, unsigned long long f) {
	NEEDCTX; return (p && size && off == 0 && h == 0x4242 && f == 0) ? 0 : 1;
}
int cuMemUnmap(CUdeviceptr p, size_t size) { NEEDCTX; return (p && size) ? 0 : 1; }
int cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t count) {
	NEEDCTX; return (count == 1 && d->location.type == 1 && d->location.id == 0 && d->flags == 3) ? 0 : 1;
}
static int goodLoc(CUmemLocation l) { return (l.type == 1 && l.id == 0) || l.type == 2; }
int cuMemPrefetchAsync(CUdeviceptr p, size_t n, int dev, void *s) { return 999; }
int cuMemAdvise(CUdeviceptr p, size_t n, int advice, int dev) { return 999; }
int cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation l, unsigned f, void *s) {
	NEEDCTX; if (!goodLoc(l) || f || n == 0) return 1; return pend(s);
}
int cuMemAdvise_v2(CUdeviceptr p, size_t n, int advice, CUmemLocation l) {
	NEEDCTX; return (goodLoc(l) && advice >= 1 && advice <= 6 && n) ? 0 : 1;
}

int cuStreamCreate(void **s, unsigned f) { NEEDCTX; fakeStream *x = calloc(1, sizeof *x); x->flags = f; *s = x; INC(live); return 0; }
int cuStreamDestroy_v2(void *s) { NEEDCTX; free(s); DEC(live); return 0; }
int cuStreamSynchronize(void *s) { NEEDCTX; if (s) ((fakeStream *)s)->pending = 0; return 0; }
int cuStreamQuery(void *s) {
	NEEDCTX; if (s && ((fakeStream *)s)->pending) { ((fakeStream *)s)->pending = 0; return 600; } return 0;
}
/* A destroyed event's handle goes to the next event created, as a driver may give it
   (R: drivers reuse a destroyed stream's handle, rmm#649; events are assumed alike). */
static fakeEvent *freedEvent;
int cuEventCreate(void **e, unsigned f) {
	NEEDCTX;
	fakeEvent *x = __atomic_exchange_n(&freedEvent, (fakeEvent *)0, __ATOMIC_SEQ_CST);
	if (x) memset(x, 0, sizeof *x); else x = calloc(1, sizeof *x);
	x->flags = f; *e = x; INC(live); return 0;
}
int cuEventDestroy_v2(void *e) {
	NEEDCTX; free(__atomic_exchange_n(&freedEvent, (fakeEvent *)e, __ATOMIC_SEQ_CST)); DEC(live); return 0;
}
int cuEventRecord(void *e, void *s) { NEEDCTX; ((fakeEvent *)e)->recorded = 1; return 0; }
int cuEventQuery(void *e) { NEEDCTX; return ((fakeEvent *)e)->recorded ? 0 : 600; }
int cuStreamIsCapturing(void *s, int *status) { NEEDCTX; *status = 0; return 0; }
int cuEventSynchronize(void *e) { NEEDCTX; return 0; }
int cuEventElapsedTime(float *ms, void *a, void *b) {
	NEEDCTX; fakeEvent *x = a, *y = b;
	if ((x->flags | y->flags) & 2 || !x->recorded || !y->recorded) return 400;
	*ms = 1.5f; return 0;
}

#ifndef NO_GETPROC
struct entry { const char *name; void *v1; void *v2; };
static struct entry table[] = {
	{"cuInit", cuInit}, {"cuDriverGetVersion", cuDriverGetVersion},
	{"cuGetErrorName", cuGetErrorName}, {"cuGetErrorString", cuGetErrorString},
	{"cuDeviceGetCount", cuDeviceGetCount}, {"cuDeviceGet", cuDeviceGet},
	{"cuDeviceGetName", cuDeviceGetName}, {"cuDeviceTotalMem", cuDeviceTotalMem_v2},
	{"cuDeviceGetAttribute", cuDeviceGetAttribute}, {"cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain},
	{"cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2}, {"cuCtxPushCurrent", cuCtxPushCurrent_v2},
	{"cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState},
	{"cuCtxPopCurrent", cuCtxPopCurrent_v2}, {"cuCtxSynchronize", cuCtxSynchronize},
	{"cuMemGetInfo", cuMemGetInfo_v2}, {"cuMemAlloc", cuMemAlloc_v2}, {"cuMemFree", cuMemFree_v2},
	{"cuMemAllocAsync", cuMemAllocAsync}, {"cuMemFreeAsync", cuMemFreeAsync},
	{"cuMemAllocManaged", cuMemAllocManaged}, {"cuMemHostAlloc", cuMemHostAlloc},
	{"cuMemFreeHost", cuMemFreeHost}, {"cuMemHostRegister", cuMemHostRegister_v2},
	{"cuMemHostUnregister", cuMemHostUnregister}, {"cuMemHostGetDevicePointer", cuMemHostGetDevicePointer_v2},
	{"cuMemsetD8", cuMemsetD8_v2}, {"cuMemsetD8Async", cuMemsetD8Async},
	{"cuMemcpyHtoD", cuMemcpyHtoD_v2}, {"cuMemcpyDtoH", cuMemcpyDtoH_v2}, {"cuMemcpyDtoD", cuMemcpyDtoD_v2},
	{"cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2}, {"cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2},
	{"cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2},
	{"cuMemGetAllocationGranularity", cuMemGetAllocationGranularity},
	{"cuMemAddressReserve", cuMemAddressReserve}, {"cuMemAddressFree", cuMemAddressFree},
	{"cuMemCreate", cuMemCreate}, {"cuMemRelease", cuMemRelease}, {"cuMemMap", cuMemMap},
	{"cuMemUnmap", cuMemUnmap}, {"cuMemSetAccess", cuMemSetAccess},
	{"cuMemPrefetchAsync", cuMemPrefetchAsync, cuMemPrefetchAsync_v2},
	{"cuMemAdvise", cuMemAdvise, cuMemAdvise_v2},
	{"cuStreamCreate", cuStreamCreate}, {"cuStreamDestroy", cuStreamDestroy_v2},
	{"cuStreamSynchronize", cuStreamSynchronize}, {"cuStreamQuery", cuStreamQuery},
	{"cuEventCreate", cuEventCreate}, {"cuEventRecord", cuEventRecord}, {"cuEventQuery", cuEventQuery},
	{"cuEventSynchronize", cuEventSynchronize}, {"cuEventDestroy", cuEventDestroy_v2},
	/* cuEventElapsedTime is left out: it must be found by the dlsym fallback. */
};
int fakeProcLookups;
int cuGetProcAddress_v2(const char *name, void **fn, int version, unsigned long long flags, int *status) {
	fakeProcLookups++;
	*fn = 0;
	if (flags != 0 || version < 12000 || version > 13000) { if (status) *status = 2; return 1; }
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
		if (strcmp(table[i].name, name) == 0) {
			*fn = (table[i].v2 && version >= 12020) ? table[i].v2 : table[i].v1;
			if (status) *status = 0;
			return 0;
		}
	}
	if (status) *status = 1;
	return 500;
}
#endif
`

var (
	fakeOnce  sync.Once
	fakeDir   string
	fakeBuild error
)

// buildFake compiles the fake driver twice: with cuGetProcAddress_v2, and without (so that
// every entry point goes through the dlsym fallback). It skips when no C compiler is found.
func buildFake(t *testing.T) (withProc, withoutProc string) {
	t.Helper()
	fakeOnce.Do(func() {
		cc := os.Getenv("CC")
		if cc == "" {
			cc = "gcc"
		}
		if _, err := exec.LookPath(cc); err != nil {
			fakeBuild = err
			return
		}
		dir, err := os.MkdirTemp("", "pinmalloc-fakecuda")
		if err != nil {
			fakeBuild = err
			return
		}
		fakeDir = dir
		src := filepath.Join(dir, "fake.c")
		if err := os.WriteFile(src, []byte(fakeDriverC), 0o644); err != nil {
			fakeBuild = err
			return
		}
		for _, v := range []struct{ out, def string }{{"with.so", "-DWITH_GETPROC"}, {"without.so", "-DNO_GETPROC"}} {
			cmd := exec.Command(cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-Wno-unused-variable",
				v.def, "-o", filepath.Join(dir, v.out), src)
			if out, err := cmd.CombinedOutput(); err != nil {
				fakeBuild = errors.New(string(out))
				return
			}
		}
	})
	if fakeBuild != nil {
		if strings.Contains(fakeBuild.Error(), "executable file not found") {
			t.Skipf("no C compiler to build the fake driver: %v", fakeBuild)
		}
		t.Fatalf("building the fake driver: %v", fakeBuild)
	}
	return filepath.Join(fakeDir, "with.so"), filepath.Join(fakeDir, "without.so")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeDir != "" {
		os.RemoveAll(fakeDir)
	}
	os.Exit(code)
}

// fakeLive reads the fake's count of live objects (+1000 per primary-context retain) through
// the made-up device attribute 9999.
func fakeLive(t *testing.T, dr *driver) int {
	t.Helper()
	dev, err := dr.deviceGet(0)
	must(t, "deviceGet", err)
	n, err := dr.deviceAttribute(dev, 9999)
	must(t, "deviceAttribute(9999)", err)
	return n
}

func TestFakeDriver(t *testing.T) {
	with, without := buildFake(t)
	for _, path := range []string{with, without} {
		t.Run(filepath.Base(path), func(t *testing.T) { exerciseFake(t, path) })
	}
}

func exerciseFake(t *testing.T, path string) {
	dr, err := loadFrom(path)
	must(t, "loadFrom", err)
	defer dr.close()
	if (dr.getProc != 0) != strings.HasSuffix(path, "with.so") {
		t.Fatalf("getProc = %#x for %s", dr.getProc, path)
	}
	if _, err := openOn(dr, 0); err == nil {
		t.Fatal("openOn before cuInit succeeded")
	}
	must(t, "init", dr.init())
	if v, err := dr.driverVersion(); err != nil || v != 13000 {
		t.Fatalf("driverVersion = %d, %v", v, err)
	}
	if n, err := dr.deviceCount(); err != nil || n != 1 {
		t.Fatalf("deviceCount = %d, %v", n, err)
	}
	if _, err := openOn(dr, 1); !errors.Is(err, pinmalloc.ErrNoDevice) {
		t.Fatalf("openOn(1) = %v, want pinmalloc.ErrNoDevice", err)
	}
	base := PrimaryRetains()
	d, err := openOn(dr, 0)
	must(t, "openOn", err)
	if PrimaryRetains() != base+1 || fakeLive(t, dr) != 1000 {
		t.Fatalf("retains: package %d (base %d), fake %d", PrimaryRetains(), base, fakeLive(t, dr))
	}
	// Named "Fake GPU", but not pinmalloc's fake: that is known by its marker symbol alone.
	if d.IsFake() || !d.Exports("cuInit") || d.Exports(FakeDriverSymbol) {
		t.Errorf("IsFake %v, exports cuInit %v: a driver is known by the symbols it exports, not its device's name", d.IsFake(), d.Exports("cuInit"))
	}
	if name, err := d.Name(); err != nil || name != "Fake GPU" {
		t.Errorf("Name = %q, %v", name, err)
	}
	if !d.VMMSupported() {
		t.Errorf("VMMSupported = false")
	}
	if tm, err := d.TotalMem(); err != nil || tm != 1<<30 {
		t.Errorf("TotalMem = %d, %v", tm, err)
	}

	// Memory and copies.
	const n = 1 << 16
	src, dst := make([]byte, n), make([]byte, n)
	fillPattern(src, 9)
	p, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	must(t, "MemcpyHtoD", d.MemcpyHtoD(p, addr(src), n))
	q, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	must(t, "MemcpyDtoD", d.MemcpyDtoD(q, p, n))
	must(t, "MemcpyDtoH", d.MemcpyDtoH(addr(dst), q, n))
	if string(src) != string(dst) {
		t.Error("round trip through the fake changed data")
	}
	must(t, "MemsetD8", d.MemsetD8(q, 0xab, 16))
	must(t, "MemcpyDtoH", d.MemcpyDtoH(addr(dst), q, 16))
	if dst[0] != 0xab || dst[15] != 0xab {
		t.Error("MemsetD8 through the fake")
	}
	if free, total, err := d.MemGetInfo(); err != nil || total != 1<<30 || free != total-2 {
		t.Errorf("MemGetInfo = %d, %d, %v", free, total, err)
	}
	if _, err := d.MemAlloc(1 << 50); !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		t.Errorf("MemAlloc(1<<50) = %v", err)
	}
	must(t, "MemFree", d.MemFree(p))
	must(t, "MemFree", d.MemFree(q))

	// Host memory.
	h := make([]byte, 4096)
	must(t, "MemHostRegister", d.MemHostRegister(addr(h), 4096, HostRegisterDeviceMap))
	if err := d.MemHostRegister(addr(h), 4096, 0); !errors.Is(err, pinmalloc.ErrAlreadyRegistered) {
		t.Errorf("double register = %v", err)
	}
	if dp, err := d.MemHostGetDevicePointer(addr(h)); err != nil || dp != addr(h) {
		t.Errorf("MemHostGetDevicePointer = %#x, %v", dp, err)
	}
	must(t, "MemHostUnregister", d.MemHostUnregister(addr(h)))
	if err := d.MemHostUnregister(addr(h)); err == nil || !strings.Contains(err.Error(), "713") &&
		!strings.Contains(err.Error(), "NOT_REGISTERED") {
		t.Errorf("double unregister = %v", err)
	}
	hp, err := d.MemHostAlloc(4096, HostAllocPortable|HostAllocDeviceMap|HostAllocWriteCombined)
	must(t, "MemHostAlloc", err)
	must(t, "MemFreeHost", d.MemFreeHost(hp))

	// VMM: the fake checks the CUmemAllocationProp and CUmemAccessDesc layouts.
	minG, recG, err := d.MemGetAllocationGranularity()
	if err != nil || minG != 2<<20 || recG != 4<<20 {
		t.Fatalf("granularity = %d, %d, %v", minG, recG, err)
	}
	va, err := d.MemAddressReserve(8<<20, 0)
	must(t, "MemAddressReserve", err)
	mh, err := d.MemCreate(2 << 20)
	must(t, "MemCreate", err)
	must(t, "MemMap", d.MemMap(va, 2<<20, mh))
	must(t, "MemSetAccess", d.MemSetAccess(va, 2<<20))
	must(t, "MemUnmap", d.MemUnmap(va, 2<<20))
	must(t, "MemRelease", d.MemRelease(mh))
	must(t, "MemAddressFree", d.MemAddressFree(va, 8<<20))
	if _, err := d.MemCreate(1 << 20); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("MemCreate of a non-granule size = %v", err)
	}

	// Streams, events, managed memory (CUmemLocation by value, v2 entry points).
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	mp, err := d.MemAllocManaged(n, MemAttachGlobal)
	must(t, "MemAllocManaged", err)
	must(t, "MemAdvise", d.MemAdvise(mp, n, adviseSetPreferredLocation, deviceLoc(d)))
	must(t, "MemAdvise host", d.MemAdvise(mp, n, adviseSetAccessedBy, hostLoc))
	must(t, "MemPrefetchAsync", d.MemPrefetchAsync(mp, n, deviceLoc(d), s))
	if err := d.StreamQuery(s); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("StreamQuery with work pending = %v, want pinmalloc.ErrNotReady", err)
	}
	must(t, "MemPrefetchAsync host", d.MemPrefetchAsync(mp, n, hostLoc, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	must(t, "StreamQuery", d.StreamQuery(s))
	if err := d.MemPrefetchAsync(mp, n, MemLocation{Type: locDevice, ID: 3}, s); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("prefetch to a bad location = %v", err)
	}
	must(t, "MemFreeManaged", d.MemFreeManaged(mp))
	ap, err := d.MemAllocAsync(n, s)
	must(t, "MemAllocAsync", err)
	must(t, "MemsetD8Async", d.MemsetD8Async(ap, 1, n, s))
	must(t, "MemcpyHtoDAsync", d.MemcpyHtoDAsync(ap, addr(src), n, s))
	must(t, "MemcpyDtoDAsync", d.MemcpyDtoDAsync(ap, ap, n, s))
	must(t, "MemcpyDtoHAsync", d.MemcpyDtoHAsync(addr(dst), ap, n, s))
	must(t, "MemFreeAsync", d.MemFreeAsync(ap, s))
	a, err := d.EventCreate(false)
	must(t, "EventCreate", err)
	b, err := d.EventCreate(false)
	must(t, "EventCreate", err)
	if err := d.EventQuery(a); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("EventQuery unrecorded = %v", err)
	}
	if _, err := d.EventElapsed(a, b); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("EventElapsed unrecorded = %v", err)
	}
	must(t, "EventRecord", d.EventRecord(a, s))
	must(t, "EventRecord", d.EventRecord(b, s))
	must(t, "EventSynchronize", d.EventSynchronize(b))
	if ms, err := d.EventElapsed(a, b); err != nil || ms != 1.5 {
		t.Errorf("EventElapsed = %v, %v", ms, err)
	}
	must(t, "EventDestroy", d.EventDestroy(a))
	must(t, "EventDestroy", d.EventDestroy(b))
	pool := NewEventPool(d)
	e1, _ := pool.Get()
	e2, _ := pool.Get()
	pool.Put(e1)
	pool.Put(e2)
	e3, _ := pool.Get()
	pool.Put(e3)
	if pool.Created() != 2 {
		t.Errorf("pool created %d events, want 2", pool.Created())
	}
	must(t, "pool.Close", pool.Close())
	e4, _ := pool.Get()
	pool.Put(e4) // destroyed: the pool is closed
	if pool.Created() != pool.Destroyed() {
		t.Errorf("pool created %d, destroyed %d", pool.Created(), pool.Destroyed())
	}
	must(t, "StreamDestroy", d.StreamDestroy(s))
	must(t, "Synchronize", d.Synchronize())

	// Context discipline from many goroutines: the fake fails any call made on a thread
	// where the context is not current.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	var wg sync.WaitGroup
	var failed sync.Once
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				p, err := d.MemAlloc(64)
				if err == nil {
					runtime.Gosched()
					err = d.MemFree(p)
				}
				if err != nil {
					failed.Do(func() { t.Errorf("concurrent alloc/free: %v", err) })
					return
				}
			}
		}()
	}
	wg.Wait()

	if s := d.Stats(); s.Live() != 0 {
		t.Errorf("Stats after freeing everything = %+v", s)
	}
	must(t, "Close", d.Close())
	if PrimaryRetains() != base || fakeLive(t, dr) != 0 {
		t.Errorf("after Close: package retains %d (base %d), fake live %d", PrimaryRetains(), base, fakeLive(t, dr))
	}
	if err := d.MemsetD8(0, 0, 0); err == nil {
		t.Error("call on a closed device succeeded")
	}
}
