// A fake libnvidia-ml.so for the tests of the dlopen binding (nvml_cgo_test.go): two GPUs, the
// second in MIG mode with two instances, exporting the entry points the binding resolves with
// nvml.h's (NVML 13) versioned names, signatures and struct layouts, and the rules this
// package must respect:
//   - a call other than nvmlInit_v2 while no Init is outstanding answers
//     NVML_ERROR_UNINITIALIZED and poisons the library: every later call, Init included,
//     answers NVML_ERROR_UNKNOWN, so a test sees a call the binding's guard should have
//     refused even where the caller ignored its answer;
//   - nvmlDeviceGetMemoryInfo_v2 demands the version nvmlMemory_v2 (the struct's size | 2 << 24)
//     and answers NVML_ERROR_ARGUMENT_VERSION_MISMATCH otherwise;
//   - a string buffer too short for the answer and its NUL gets NVML_ERROR_INSUFFICIENT_SIZE
//     (the first GPU's name is longer than the v1 buffer of 64 bytes);
//   - a handle that is not one of the library's gets NVML_ERROR_INVALID_ARGUMENT;
//   - nvmlDeviceGetHandleByPciBusId_v2 reads the three formats nvml.h documents, in hex.
// Built with -DNO_MEMORY_V2 it lacks nvmlDeviceGetMemoryInfo_v2, with -DNO_NUMA
// nvmlDeviceGetNumaNodeId, as older drivers did; with -DNO_INIT or -DNO_SHUTDOWN it lacks
// nvmlInit_v2 or nvmlShutdown, as no NVML does (a library that is not NVML).
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
	char busIdLegacy[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
} nvmlPciInfo_t;

_Static_assert(sizeof(nvmlPciInfo_t) == 68 && offsetof(nvmlPciInfo_t, busId) == 36, "nvmlPciInfo_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t");

enum {
	OK = 0, UNINIT = 1, BADARG = 2, NOTSUP = 3, NOTFOUND = 6, SHORT = 7, VERSION = 25, UNKNOWN = 999
};

struct dev {
	const char *name, *uuid;
	unsigned long long total, reserved, used;
	unsigned domain, bus, pciid;
	int numa;            // -1: NOT_SUPPORTED
	int mig;             // -1: not MIG-capable
	struct dev *migs[7]; // instances by slot, on a GPU in MIG mode
	struct dev *parent;  // on a MIG instance
};

static struct dev mig0 = {"NVIDIA H200 MIG 1g.18gb", "MIG-aaaaaaaa-0000-0000-0000-000000000000",
			  18ull << 30, 0, 1ull << 30};
static struct dev mig3 = {"NVIDIA H200 MIG 3g.71gb", "MIG-aaaaaaaa-3333-3333-3333-333333333333",
			  71ull << 30, 0, 5ull << 30};

// A name longer than NVML_DEVICE_NAME_BUFFER_SIZE (64) proves the V2 buffer size (96) is used.
static struct dev gpus[2] = {
	{"NVIDIA H100 80GB HBM3 with a product name longer than sixty-four bytes",
	 "GPU-00000000-1111-2222-3333-444444444444", 80ull << 30, 500ull << 20, 3ull << 30,
	 0x0000, 0x1b, 0x233010DE, -1, -1},
	{"NVIDIA H200", "GPU-55555555-6666-7777-8888-999999999999", 141ull << 30, 0, 1ull << 30,
	 0x0001, 0x9a, 0x233510DE, 1, 1, {&mig0, NULL, NULL, &mig3}},
};

static int refs, poisoned;

// misuse is what a call made while uninitialized answers: it poisons the library.
static int misuse(void) {
	poisoned = 1;
	return UNINIT;
}

// ENTER starts every entry point but nvmlInit_v2.
#define ENTER()                                 \
	do {                                    \
		if (poisoned) return UNKNOWN;   \
		if (refs == 0) return misuse(); \
	} while (0)

#ifndef NO_INIT
int nvmlInit_v2(void) {
	if (poisoned) return UNKNOWN;
	refs++;
	return OK;
}
#endif

#ifndef NO_SHUTDOWN
int nvmlShutdown(void) {
	ENTER();
	refs--;
	return OK;
}
#endif

int nvmlDeviceGetCount_v2(unsigned *n) {
	ENTER();
	if (!n) return BADARG;
	*n = 2;
	return OK;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, struct dev **d) {
	ENTER();
	if (i >= 2 || !d) return BADARG;
	*d = &gpus[i];
	return OK;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *id, struct dev **d) {
	ENTER();
	if (!id || !d) return BADARG;
	unsigned domain = 0, bus, device, fn = 0;
	int n;
	char end;
	if (sscanf(id, "%x:%x:%x.%x%c", &domain, &bus, &device, &fn, &end) == 4) {
		// domain:bus:device.function
	} else if (sscanf(id, "%x:%x:%x%n", &domain, &bus, &device, &n) == 3 && id[n] == 0) {
		fn = 0;
	} else if (sscanf(id, "%x:%x.%x%c", &bus, &device, &fn, &end) == 3) {
		domain = 0;
	} else {
		return BADARG;
	}
	for (int i = 0; i < 2; i++) {
		if (gpus[i].domain == domain && gpus[i].bus == bus && device == 0 && fn == 0) {
			*d = &gpus[i];
			return OK;
		}
	}
	return NOTFOUND;
}

static int gpu(struct dev *d) { return d == &gpus[0] || d == &gpus[1]; }
static int valid(struct dev *d) { return gpu(d) || d == &mig0 || d == &mig3; }

static int copy(const char *s, char *buf, unsigned len) {
	if (strlen(s) + 1 > len) return SHORT;
	strcpy(buf, s);
	return OK;
}

int nvmlDeviceGetName(struct dev *d, char *buf, unsigned len) {
	ENTER();
	if (!valid(d) || !buf) return BADARG;
	return copy(d->name, buf, len);
}

int nvmlDeviceGetUUID(struct dev *d, char *buf, unsigned len) {
	ENTER();
	if (!valid(d) || !buf) return BADARG;
	return copy(d->uuid, buf, len);
}

// v1: used includes the reserved memory.
int nvmlDeviceGetMemoryInfo(struct dev *d, nvmlMemory_t *m) {
	ENTER();
	if (!valid(d) || !m) return BADARG;
	m->total = d->total;
	m->used = d->used + d->reserved;
	m->free = d->total - m->used;
	return OK;
}

#ifndef NO_MEMORY_V2
int nvmlDeviceGetMemoryInfo_v2(struct dev *d, nvmlMemory_v2_t *m) {
	ENTER();
	if (!valid(d) || !m) return BADARG;
	if (m->version != (unsigned)(sizeof(nvmlMemory_v2_t) | (2u << 24))) return VERSION;
	m->total = d->total;
	m->reserved = d->reserved;
	m->used = d->used;
	m->free = d->total - d->reserved - d->used;
	return OK;
}
#endif

int nvmlDeviceGetPciInfo_v3(struct dev *d, nvmlPciInfo_t *p) {
	ENTER();
	if (!valid(d) || !p) return BADARG;
	if (!gpu(d)) return NOTSUP;
	memset(p, 0, sizeof *p);
	p->domain = d->domain;
	p->bus = d->bus;
	p->device = 0;
	p->pciDeviceId = d->pciid;
	p->pciSubSystemId = 0x16C110DE;
	snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%04X:%02X:%02X.0", d->domain, d->bus, 0);
	snprintf(p->busId, sizeof p->busId, "%08X:%02X:%02X.0", d->domain, d->bus, 0);
	return OK;
}

#ifndef NO_NUMA
int nvmlDeviceGetNumaNodeId(struct dev *d, unsigned *node) {
	ENTER();
	if (!valid(d) || !node) return BADARG;
	if (!gpu(d) || d->numa < 0) return NOTSUP;
	*node = (unsigned)d->numa;
	return OK;
}
#endif

int nvmlDeviceGetMigMode(struct dev *d, unsigned *current, unsigned *pending) {
	ENTER();
	if (!valid(d) || !current || !pending) return BADARG;
	if (!gpu(d) || d->mig < 0) return NOTSUP;
	*current = *pending = (unsigned)d->mig;
	return OK;
}

int nvmlDeviceGetMaxMigDeviceCount(struct dev *d, unsigned *count) {
	ENTER();
	if (!gpu(d) || !count) return BADARG;
	*count = d->mig == 1 ? 7 : 0;
	return OK;
}

int nvmlDeviceGetMigDeviceHandleByIndex(struct dev *d, unsigned i, struct dev **out) {
	ENTER();
	if (!gpu(d) || !out) return BADARG;
	if (d->mig != 1) return NOTSUP;
	if (i >= 7) return BADARG;
	if (!d->migs[i]) return NOTFOUND;
	*out = d->migs[i];
	return OK;
}
