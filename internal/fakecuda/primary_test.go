//go:build cgo && linux

package fakecuda

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// Primary contexts (fakedriver.c.in, "Primary contexts"): one rule per function of
// primaryRules, each failing on a fake that counted the retains of all devices together and
// destroyed nothing at the last release. Each runs on the fake by a test of its own
// (TestPrimary...) and, where its calls are defined for a GPU's driver, on a GPU by
// TestCUDAPrimaryContextRules, which logs each answer of the driver and fails a rule whose answer
// differs from the fake's. A rule starts and ends with no retain held, and makes its calls on a
// thread locked to it.

// CUresults of contexts (cuda.h).
const (
	codeInvalidValue       = 1
	codeInvalidContext     = 201
	codeContextIsDestroyed = 709
	codeNotRegistered      = 713
)

// A primaryRule is one rule of primary contexts: rule runs it, with f nil on a GPU.
type primaryRule struct {
	name    string
	devices int  // the devices it needs
	gpu     bool // asks a GPU nothing the driver calls undefined (no handle of a destroyed context)
	rule    func(t *testing.T, p *primaryDriver, f *Driver)
}

var primaryRules = []primaryRule{
	{"RetainsPerDevice", 2, true, primaryRetainsPerDevice},
	{"ReleaseFreesMemory", 1, true, primaryReleaseFreesMemory},
	{"ReleaseEndsRegistrations", 1, true, primaryReleaseEndsRegistrations},
	{"ReleaseDestroysHandles", 1, false, primaryReleaseDestroysHandles},
	{"ReleaseKeepsPoolAndVMMMemory", 1, true, primaryReleaseKeepsPoolAndVMMMemory},
	{"DestroyedWhileCurrent", 1, true, primaryDestroyedWhileCurrent},
	{"UnregisterWithoutContext", 1, true, primaryUnregisterWithoutContext},
	{"UnregisterInDestroyedContext", 1, true, primaryUnregisterInDestroyedContext},
	{"UnregisterBesideDestroyedContext", 2, true, primaryUnregisterBesideDestroyedContext},
}

// onFakePrimary runs rule on the fake with n devices, with no Device open.
func onFakePrimary(t *testing.T, n int, rule func(*testing.T, *primaryDriver, *Driver)) {
	f := Run(t)
	if f == nil {
		return
	}
	f.SetDevices(n)
	if _, err := cuda.Count(); err != nil {
		t.Fatalf("cuda.Count: %v", err)
	}
	p, err := openPrimaryDriver()
	must(t, "openPrimaryDriver", err)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rule(t, p, f)
	if live := f.LiveObjects(); len(live) != 0 {
		t.Errorf("the fake holds %v after the rule", live)
	}
}

// TestCUDAPrimaryContextRules checks the rules of primaryRules that a GPU's driver defines, on
// device 0 of the real driver (and device 1 for the rules that need two), one subtest per rule;
// it skips only where there is no driver or no device (GPU). No Device may be open meanwhile:
// its retain would keep the context alive.
func TestCUDAPrimaryContextRules(t *testing.T) {
	d := GPU(t, 0)
	must(t, "Close", d.Close()) // the rules retain and release the context themselves
	if n := cuda.PrimaryRetains(); n != 0 {
		t.Fatalf("%d retains held by Devices of this process: the rules need none", n)
	}
	n, err := cuda.Count()
	must(t, "Count", err)
	p, err := openPrimaryDriver()
	must(t, "openPrimaryDriver", err)
	for _, c := range primaryRules {
		switch {
		case !c.gpu:
			t.Logf("%s: not asked of a GPU: its calls are undefined there", c.name)
		case n < c.devices:
			t.Logf("%s: not asked: needs %d devices, the driver counts %d", c.name, c.devices, n)
		default:
			t.Run(c.name, func(t *testing.T) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				c.rule(t, p, nil)
			})
		}
	}
}

// retainPush retains dev's primary context and pushes it; popRelease undoes both.
func retainPush(t *testing.T, p *primaryDriver, dev int) uintptr {
	t.Helper()
	c, err := p.Retain(dev)
	must(t, "cuDevicePrimaryCtxRetain", err)
	must(t, "cuCtxPushCurrent", p.Push(c))
	return c
}

func popRelease(t *testing.T, p *primaryDriver, dev int) {
	t.Helper()
	_, err := p.Pop()
	must(t, "cuCtxPopCurrent", err)
	must(t, "cuDevicePrimaryCtxRelease", p.Release(dev))
}

// reclaimed checks that the last release freed n objects the rule left to it (fake only).
func reclaimed(t *testing.T, f *Driver, n int64) {
	t.Helper()
	if f == nil {
		return
	}
	if got := f.ForgetReclaimed(); got != n {
		t.Errorf("the context's destruction freed %d objects, want %d", got, n)
	}
}

// TestPrimaryRetainsPerDevice: each device's primary context is counted by its own retains
// (D: "the primary context is unique per device"). Releasing device 1's last retain destroys its
// context (its memory goes) while device 0's stays, and a release of device 1 more than it was
// retained is CUDA_ERROR_INVALID_CONTEXT (D) even while device 0 is retained.
func TestPrimaryRetainsPerDevice(t *testing.T) { onFakePrimary(t, 2, primaryRetainsPerDevice) }

func primaryRetainsPerDevice(t *testing.T, p *primaryDriver, f *Driver) {
	c0 := retainPush(t, p, 0)
	p0, err := p.MemAlloc(4096)
	must(t, "cuMemAlloc on device 0", err)
	_, err = p.Pop()
	must(t, "cuCtxPopCurrent", err)
	retainPush(t, p, 1)
	p1, err := p.MemAlloc(4096)
	must(t, "cuMemAlloc on device 1", err)
	if f != nil && (f.Retains(0) != 1 || f.Retains(1) != 1) {
		t.Errorf("retains of devices 0 and 1: %d, %d; want 1, 1", f.Retains(0), f.Retains(1))
	}
	popRelease(t, p, 1)
	a0, err0 := p.Active(0)
	a1, err1 := p.Active(1)
	if err0 != nil || err1 != nil || !a0 || a1 {
		t.Errorf("after device 1's last release: active %v (%v), %v (%v); want device 0's context active, device 1's not", a0, err0, a1, err1)
	}
	answer(t, "cuDevicePrimaryCtxRelease of device 1, released as often as retained, device 0 retained", p.Release(1), codeInvalidContext)

	must(t, "cuCtxPushCurrent of device 0's context", p.Push(c0))
	answer(t, "cuMemsetD8 of device 0's memory after device 1's context went", p.MemsetD8(p0, 1, 4096), 0)
	_, err = p.Pop()
	must(t, "cuCtxPopCurrent", err)

	retainPush(t, p, 1)
	answer(t, "cuMemFree of device 1's memory from its destroyed context", p.MemFree(p1), codeInvalidValue)
	popRelease(t, p, 1)
	reclaimed(t, f, 1)

	must(t, "cuCtxPushCurrent of device 0's context", p.Push(c0))
	answer(t, "cuMemFree of device 0's memory", p.MemFree(p0), 0)
	popRelease(t, p, 0)
}

// faults reports whether the kernel refuses to read the byte at a (EFAULT from a write of it to
// a pipe): it is not mapped readable, and a CPU access would fault.
func faults(t *testing.T, a uintptr) bool {
	t.Helper()
	r, w, err := os.Pipe()
	must(t, "Pipe", err)
	defer r.Close()
	defer w.Close()
	_, err = syscall.Write(int(w.Fd()), mem.Bytes(a, 1))
	return errors.Is(err, syscall.EFAULT)
}

// TestPrimaryReleaseFreesMemory: the last release frees the context's cuMemAlloc,
// cuMemAllocManaged and cuMemHostAlloc memory (D: cuCtxDestroy's resources): the host-visible
// ones are no longer mapped (a stray CPU access faults), and each pointer is refused by its free
// in the next context, as any pointer not allocated (CUDA_ERROR_INVALID_VALUE).
func TestPrimaryReleaseFreesMemory(t *testing.T) { onFakePrimary(t, 1, primaryReleaseFreesMemory) }

func primaryReleaseFreesMemory(t *testing.T, p *primaryDriver, f *Driver) {
	retainPush(t, p, 0)
	dp, err := p.MemAlloc(1 << 20)
	must(t, "cuMemAlloc", err)
	mp, err := p.MemAllocManaged(1 << 20)
	must(t, "cuMemAllocManaged", err)
	hp, err := p.MemHostAlloc(1 << 16)
	must(t, "cuMemHostAlloc", err)
	must(t, "cuMemsetD8 of managed memory", p.MemsetD8(mp, 1, 1<<20))
	mem.Bytes(hp, 1<<16)[0] = 1
	if faults(t, hp) || faults(t, uintptr(mp)) {
		t.Fatal("host or managed memory unreadable while its context lives")
	}
	popRelease(t, p, 0)

	if !faults(t, hp) {
		t.Error("cuMemHostAlloc memory still readable after its context was destroyed")
	}
	if !faults(t, uintptr(mp)) {
		t.Error("cuMemAllocManaged memory still readable after its context was destroyed")
	}
	retainPush(t, p, 0)
	answer(t, "cuMemFree of a destroyed context's cuMemAlloc memory", p.MemFree(dp), codeInvalidValue)
	answer(t, "cuMemFree of a destroyed context's managed memory", p.MemFree(mp), codeInvalidValue)
	answer(t, "cuMemFreeHost of a destroyed context's cuMemHostAlloc memory", p.MemFreeHost(hp), codeInvalidValue)
	popRelease(t, p, 0)
	reclaimed(t, f, 3)
	if f != nil && (f.Stat(DeviceAllocs) != 0 || f.Stat(ManagedAllocs) != 0 || f.Stat(HostAllocs) != 0 || f.Used(0) != 0) {
		t.Errorf("after the destruction: %d device, %d managed, %d host allocations, %d bytes used; want none",
			f.Stat(DeviceAllocs), f.Stat(ManagedAllocs), f.Stat(HostAllocs), f.Used(0))
	}
}

// TestPrimaryReleaseEndsRegistrations: the last release ends the context's cuMemHostRegister
// registrations (R: openucx/ucx 7114352): the memory stays the caller's, its unregister in the
// next context is CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, and it registers again.
func TestPrimaryReleaseEndsRegistrations(t *testing.T) {
	onFakePrimary(t, 1, primaryReleaseEndsRegistrations)
}

func primaryReleaseEndsRegistrations(t *testing.T, p *primaryDriver, f *Driver) {
	const n = 64 << 10
	buf, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANONYMOUS|unix.MAP_PRIVATE)
	must(t, "Mmap", err)
	defer unix.Munmap(buf)
	a := mem.Addr(buf)
	retainPush(t, p, 0)
	must(t, "cuMemHostRegister", p.MemHostRegister(a, n))
	popRelease(t, p, 0)
	reclaimed(t, f, 1)
	buf[0], buf[n-1] = 1, 2 // the memory is still the caller's

	retainPush(t, p, 0)
	answer(t, "cuMemHostUnregister of a destroyed context's registration", p.MemHostUnregister(a), codeNotRegistered)
	answer(t, "cuMemHostRegister of the range again", p.MemHostRegister(a, n), 0)
	answer(t, "cuMemHostUnregister", p.MemHostUnregister(a), 0)
	popRelease(t, p, 0)
	if f != nil && (f.Stat(Registrations) != 0 || f.Stat(RegisteredBytes) != 0) {
		t.Errorf("%d registrations of %d bytes left", f.Stat(Registrations), f.Stat(RegisteredBytes))
	}
}

// emptyPTX is a module of one kernel that does nothing.
const emptyPTX = `.version 7.0
.target sm_75
.address_size 64
.visible .entry nothing()
{
	ret;
}
`

// TestPrimaryReleaseDestroysHandles: the last release destroys the context's streams, events and
// modules (D: cuCtxDestroy's resources); the next context refuses their handles with
// CUDA_ERROR_INVALID_CONTEXT (what a GPU gave for cuStreamDestroy after a reset, openucx/ucx#4647;
// the driver calls their use undefined, so no GPU is asked) and makes streams of its own.
func TestPrimaryReleaseDestroysHandles(t *testing.T) {
	onFakePrimary(t, 1, primaryReleaseDestroysHandles)
}

func primaryReleaseDestroysHandles(t *testing.T, p *primaryDriver, f *Driver) {
	retainPush(t, p, 0)
	s, err := p.StreamCreate()
	must(t, "cuStreamCreate", err)
	e, err := p.EventCreate()
	must(t, "cuEventCreate", err)
	m, err := p.ModuleLoadData(emptyPTX)
	must(t, "cuModuleLoadData", err)
	popRelease(t, p, 0)
	reclaimed(t, f, 3)
	if f != nil && (f.Stat(Streams) != 0 || f.Stat(Events) != 0) {
		t.Errorf("%d streams and %d events left after the destruction", f.Stat(Streams), f.Stat(Events))
	}

	retainPush(t, p, 0)
	answer(t, "cuStreamQuery of a destroyed context's stream", p.StreamQuery(s), codeInvalidContext)
	answer(t, "cuEventQuery of a destroyed context's event", p.EventQuery(e), codeInvalidContext)
	answer(t, "cuStreamDestroy of a destroyed context's stream", p.StreamDestroy(s), codeInvalidContext)
	answer(t, "cuEventDestroy of a destroyed context's event", p.EventDestroy(e), codeInvalidContext)
	answer(t, "cuModuleUnload of a destroyed context's module", p.ModuleUnload(m), codeInvalidContext)
	s2, err := p.StreamCreate()
	must(t, "cuStreamCreate in the new context", err)
	answer(t, "cuStreamQuery of the new context's stream", p.StreamQuery(s2), 0)
	must(t, "cuStreamDestroy", p.StreamDestroy(s2))
	popRelease(t, p, 0)
}

// TestPrimaryReleaseKeepsPoolAndVMMMemory: the last release runs the context's queued work and
// leaves the memory of pools (cuMemAllocAsync) and of the VMM API (cuMemCreate handles, and
// reservations: UNMEASURED), which belongs to no context (D: cuCtxDestroy's note): the next
// context reads what the queued memset wrote and frees each.
func TestPrimaryReleaseKeepsPoolAndVMMMemory(t *testing.T) {
	onFakePrimary(t, 1, primaryReleaseKeepsPoolAndVMMMemory)
}

func primaryReleaseKeepsPoolAndVMMMemory(t *testing.T, p *primaryDriver, f *Driver) {
	const n, g = 4096, 2 << 20
	retainPush(t, p, 0)
	pa, err := p.MemAllocAsync(n, 0)
	must(t, "cuMemAllocAsync", err)
	must(t, "cuMemsetD8Async", p.MemsetD8Async(pa, 7, n, 0))
	h, err := p.MemCreate(g, 0)
	must(t, "cuMemCreate", err)
	va, err := p.MemAddressReserve(g)
	must(t, "cuMemAddressReserve", err)
	popRelease(t, p, 0)
	reclaimed(t, f, 0)

	retainPush(t, p, 0)
	hb, err := p.MemHostAlloc(n)
	must(t, "cuMemHostAlloc", err)
	answer(t, "cuMemcpyDtoH of pool memory made in a destroyed context", p.MemcpyDtoH(hb, pa, n), 0)
	if !bytes.Equal(mem.Bytes(hb, n), bytes.Repeat([]byte{7}, n)) {
		t.Error("the memset queued before the last release did not run, or the pool memory lost it")
	}
	must(t, "cuMemFreeHost", p.MemFreeHost(hb))
	answer(t, "cuMemFreeAsync of pool memory made in a destroyed context", p.MemFreeAsync(pa, 0), 0)
	must(t, "cuCtxSynchronize", p.Synchronize())
	answer(t, "cuMemRelease of a handle made in a destroyed context", p.MemRelease(h), 0)
	answer(t, "cuMemAddressFree of a reservation made in a destroyed context", p.MemAddressFree(va, g), 0)
	popRelease(t, p, 0)
}

// TestPrimaryDestroyedWhileCurrent: the last release leaves the context current to the thread
// that pushed it (D: the release "does not pop the context from stack"), and every call there
// that needs a context is CUDA_ERROR_CONTEXT_IS_DESTROYED (D); so after a pop and a push of the
// handle again (UNMEASURED: the push accepted). A release without a retain is
// CUDA_ERROR_INVALID_CONTEXT (D). A later retain gives the same handle (R: lupine#844) and the
// thread where it is current calls into the new context.
func TestPrimaryDestroyedWhileCurrent(t *testing.T) {
	onFakePrimary(t, 1, primaryDestroyedWhileCurrent)
}

func primaryDestroyedWhileCurrent(t *testing.T, p *primaryDriver, f *Driver) {
	c := retainPush(t, p, 0)
	must(t, "cuDevicePrimaryCtxRelease", p.Release(0))
	if active, err := p.Active(0); err != nil || active {
		t.Errorf("after the last release: active %v (%v), want not", active, err)
	}
	_, err := p.MemAlloc(4096)
	answer(t, "cuMemAlloc with the destroyed context current", err, codeContextIsDestroyed)
	answer(t, "cuCtxSynchronize with the destroyed context current", p.Synchronize(), codeContextIsDestroyed)
	answer(t, "cuDevicePrimaryCtxRelease of a context no retain holds", p.Release(0), codeInvalidContext)
	popped, err := p.Pop()
	if err != nil || popped != c {
		t.Fatalf("cuCtxPopCurrent = %#x, %v; want the context pushed, %#x", popped, err, c)
	}
	err = p.Push(c)
	answer(t, "cuCtxPushCurrent of a context no retain holds", err, 0)
	if err == nil {
		_, err = p.MemAlloc(4096)
		answer(t, "cuMemAlloc there", err, codeContextIsDestroyed)
		c2, err := p.Retain(0)
		must(t, "cuDevicePrimaryCtxRetain", err)
		if c2 != c {
			t.Errorf("the retain after the destruction gave context %#x, want the same handle %#x", c2, c)
		}
		dp, err := p.MemAlloc(4096)
		answer(t, "cuMemAlloc with the handle current after a new retain", err, 0)
		if err == nil {
			must(t, "cuMemFree", p.MemFree(dp))
		}
		popRelease(t, p, 0)
	}
	if f != nil && f.Retains(0) != 0 {
		t.Errorf("%d retains left", f.Retains(0))
	}
}

// TestPrimaryUnregisterWithoutContext: cuMemHostUnregister needs no current context (R: openucx/ucx
// 7114352, "does not produce an error when invoked from a different context than the one it was
// originally registered in (or even without an active context)"; the documentation lists
// CUDA_ERROR_INVALID_CONTEXT among its results but names no context it needs): a registration
// made in a context that still lives is ended from a thread with no context current, for a
// registration without the PORTABLE flag too, and the range registers again.
func TestPrimaryUnregisterWithoutContext(t *testing.T) {
	onFakePrimary(t, 1, primaryUnregisterWithoutContext)
}

func primaryUnregisterWithoutContext(t *testing.T, p *primaryDriver, f *Driver) {
	const n = 64 << 10
	buf, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANONYMOUS|unix.MAP_PRIVATE)
	must(t, "Mmap", err)
	defer unix.Munmap(buf)
	a := mem.Addr(buf)
	c := retainPush(t, p, 0)
	must(t, "cuMemHostRegister", p.MemHostRegister(a, n))
	_, err = p.Pop()
	must(t, "cuCtxPopCurrent", err)
	answer(t, "cuMemHostUnregister with no context current, the registering context alive", p.MemHostUnregister(a), 0)
	must(t, "cuCtxPushCurrent", p.Push(c))
	answer(t, "cuMemHostRegister of the range again", p.MemHostRegister(a, n), 0)
	answer(t, "cuMemHostUnregister in the context", p.MemHostUnregister(a), 0)
	popRelease(t, p, 0)
	if f != nil && (f.Stat(Registrations) != 0 || f.Stat(RegisteredBytes) != 0) {
		t.Errorf("%d registrations of %d bytes left", f.Stat(Registrations), f.Stat(RegisteredBytes))
	}
}

// TestPrimaryUnregisterInDestroyedContext: cuMemHostUnregister with a destroyed primary context
// current is CUDA_ERROR_CONTEXT_IS_DESTROYED, before the pointer is looked at (UNMEASURED: the
// fake's choice, fakedriver.c.in at cuMemHostUnregister; on a GPU, TestCUDAPrimaryContextRules
// measures it): the registration the destruction ended answers so, and with no context current
// it is CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED.
func TestPrimaryUnregisterInDestroyedContext(t *testing.T) {
	onFakePrimary(t, 1, primaryUnregisterInDestroyedContext)
}

func primaryUnregisterInDestroyedContext(t *testing.T, p *primaryDriver, f *Driver) {
	const n = 64 << 10
	buf, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANONYMOUS|unix.MAP_PRIVATE)
	must(t, "Mmap", err)
	defer unix.Munmap(buf)
	a := mem.Addr(buf)
	retainPush(t, p, 0)
	must(t, "cuMemHostRegister", p.MemHostRegister(a, n))
	must(t, "cuDevicePrimaryCtxRelease", p.Release(0)) // destroyed, and still current
	reclaimed(t, f, 1)
	answer(t, "cuMemHostUnregister with the destroyed context current", p.MemHostUnregister(a),
		codeContextIsDestroyed)
	_, err = p.Pop()
	must(t, "cuCtxPopCurrent", err)
	answer(t, "cuMemHostUnregister of the ended registration, no context current",
		p.MemHostUnregister(a), codeNotRegistered)
}

// TestPrimaryUnregisterBesideDestroyedContext: a registration made in device 1's context, which
// lives, cannot be ended from a thread where device 0's destroyed primary context is current
// (CUDA_ERROR_CONTEXT_IS_DESTROYED, UNMEASURED as above) and stays registered; popped, with no
// context current, it ends.
func TestPrimaryUnregisterBesideDestroyedContext(t *testing.T) {
	onFakePrimary(t, 2, primaryUnregisterBesideDestroyedContext)
}

func primaryUnregisterBesideDestroyedContext(t *testing.T, p *primaryDriver, f *Driver) {
	const n = 64 << 10
	buf, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANONYMOUS|unix.MAP_PRIVATE)
	must(t, "Mmap", err)
	defer unix.Munmap(buf)
	a := mem.Addr(buf)
	retainPush(t, p, 1)
	must(t, "cuMemHostRegister in device 1's context", p.MemHostRegister(a, n))
	_, err = p.Pop()
	must(t, "cuCtxPopCurrent", err)
	retainPush(t, p, 0)
	must(t, "cuDevicePrimaryCtxRelease of device 0", p.Release(0)) // destroyed, and still current
	answer(t, "cuMemHostUnregister with device 0's destroyed context current",
		p.MemHostUnregister(a), codeContextIsDestroyed)
	_, err = p.Pop()
	must(t, "cuCtxPopCurrent", err)
	answer(t, "cuMemHostUnregister with no context current", p.MemHostUnregister(a), 0)
	must(t, "cuDevicePrimaryCtxRelease of device 1", p.Release(1))
	if f != nil && (f.Stat(Registrations) != 0 || f.Stat(RegisteredBytes) != 0) {
		t.Errorf("%d registrations of %d bytes left", f.Stat(Registrations), f.Stat(RegisteredBytes))
	}
}
