package fakecuda

import (
	"fmt"
	"os"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// The fake's pinning section (the end of fakedriver.c.in, fake_pin_ctl): a cost model for the
// calls that pin host memory, fault injection for the VMM and registration calls, for
// cuEventRecord, for the stream waits (cuStreamWaitEvent, cuStreamSynchronize), for
// cuStreamCreate, cuEventCreate and the memsets, and for the calls that give back (free,
// unmap, release, unregister, destroy, unload), and what the host says about NUMA. The fake runs every call
// under one mutex; its pinning calls do their expensive part (and the modelled cost) outside
// it, so that calls on several threads overlap.
// What figures taken with the cost model can and cannot show is said at SetPinCost.

// Controls understood by fake_pin_ctl (the PC_ constants of the C source).
const (
	pctlPopulate = 1 + iota
	pctlDelay
	pctlFail
	pctlNUMAID
	pctlHostNUMA
	pctlNodeBytes
	pctlInflight
)

// PinCall names a driver call for FailAfter.
type PinCall int

// Calls FailAfter can make fail.
const (
	// CallCreate is cuMemCreate (any location).
	CallCreate PinCall = 1 + iota
	// CallMap is cuMemMap.
	CallMap
	// CallAccess is cuMemSetAccess.
	CallAccess
	// CallRegister is cuMemHostRegister.
	CallRegister
	// CallRecord is cuEventRecord (the event is left as it was).
	CallRecord
	// CallUnmap is cuMemUnmap (the range stays mapped).
	CallUnmap
	// CallRelease is cuMemRelease (the handle stays valid).
	CallRelease
	// CallUnregister is cuMemHostUnregister (the registration stays).
	CallUnregister
	// CallFreeHost is cuMemFreeHost (the allocation stays).
	CallFreeHost
	// CallStreamDestroy is cuStreamDestroy (the stream stays, its work and handle with it).
	CallStreamDestroy
	// CallEventDestroy is cuEventDestroy (the event stays, as it was).
	CallEventDestroy
	// CallModuleUnload is cuModuleUnload (the module stays loaded, its functions valid).
	CallModuleUnload
	// CallMemFree is cuMemFree (the allocation stays; the context is not synchronized).
	CallMemFree
	// CallAddressFree is cuMemAddressFree (the reservation stays).
	CallAddressFree
	// CallStreamWait is cuStreamWaitEvent (no wait is queued: the stream is as it was).
	CallStreamWait
	// CallStreamSync is cuStreamSynchronize (nothing runs: the stream's work stays queued, as
	// after a wait whose outcome the caller cannot know).
	CallStreamSync
	// CallStreamCreate is cuStreamCreate and cuStreamCreateWithPriority (no stream is made).
	CallStreamCreate
	// CallMemset is cuMemsetD8 and cuMemsetD8Async (nothing is queued: the memory stays as it
	// was, as when the driver refuses the memset before it begins).
	CallMemset
	// CallPrimaryRelease is cuDevicePrimaryCtxRelease (the retain stays held and the context
	// alive, as for every refusal here; UNMEASURED what a GPU's driver leaves).
	CallPrimaryRelease
	// CallEventCreate is cuEventCreate (no event is made: the count of live events unchanged).
	CallEventCreate
)

// More result codes for FailAfter.
const (
	// ResultInvalidValue is CUDA_ERROR_INVALID_VALUE.
	ResultInvalidValue = 1
	// ResultNotSupported is CUDA_ERROR_NOT_SUPPORTED.
	ResultNotSupported = 801
	// ResultInvalidHandle is CUDA_ERROR_INVALID_HANDLE.
	ResultInvalidHandle = 400
)

// NUMADefault, given to SetHostNUMAID, restores the default: device d reports node d modulo the
// number of nodes.
const NUMADefault = -2

// SetPinCost sets the cost model of the calls that pin host memory. With populate,
// cuMemCreate at a host location faults in every page of the new allocation and
// cuMemHostRegister every page of the range it registers (as the driver pins, and for new
// memory zeroes, them: pages touched beforehand register cheaply); pin is slept per 2 MiB by
// each of those calls and unpin per 2 MiB by cuMemRelease of host memory and
// cuMemHostUnregister, standing for the driver's own work (the H100 took 0.4–0.77 ms to
// create, map and grant a 2 MiB host granule, 0.2–0.4 ms to unmap and release it). Both happen
// outside the fake's lock. The default is none of it.
//
// Figures taken with it show whether pinmalloc overlaps its pinning calls, and what faulting
// pages in costs on this machine's cores; they cannot show how the real driver scales with
// threads: the delay assumes a driver that serializes nothing, which only a GPU can confirm.
func (d *Driver) SetPinCost(populate bool, pin, unpin time.Duration) {
	d.pinCtl(pctlPopulate, b2i(populate), 0)
	d.pinCtl(pctlDelay, int64(pin), int64(unpin))
}

// FailAfter makes call fail with result code once, after skip more calls of it have passed
// their argument checks. A call that gives something back and is made to fail changes nothing,
// as when the real driver refuses it (a bad handle or argument: ResultInvalidValue; its sticky
// error refuses it too, with no injection): what it names stays alive, and the same call
// again succeeds. A wait made to fail changes nothing either: cuStreamWaitEvent queues no wait,
// cuStreamSynchronize runs nothing, so the stream's work may still be queued after it. Nor does
// a refused create or memset: cuStreamCreate makes no stream, cuEventCreate no event,
// cuMemsetD8(Async) queues nothing.
// A refused cuDevicePrimaryCtxRelease leaves the retain held and the context alive.
func (d *Driver) FailAfter(call PinCall, skip, code int) {
	if skip < 0 || skip > 1<<40 || code <= 0 || code > 0xffff {
		panic(fmt.Sprintf("fakecuda: FailAfter(%d, %d, %d): out of range", call, skip, code))
	}
	d.pinCtl(pctlFail, int64(call), int64(skip)<<16|int64(code))
}

// SetHostNUMAID sets what device dev reports as its nearest host NUMA node (attribute
// HOST_NUMA_ID, 134): node, -1 for "unknown", or NUMADefault.
func (d *Driver) SetHostNUMAID(dev, node int) { d.pinCtl(pctlNUMAID, int64(dev), int64(node)) }

// RefuseHostNUMA makes the driver refuse host NUMA locations (cuMemCreate and
// cuMemGetAllocationGranularity at HOST_NUMA fail with CUDA_ERROR_NOT_SUPPORTED) while the
// HOST location still works, as a CUDA 13 driver does on a host without NUMA support or for a
// node without memory; attribute says whether attribute 141 still reads 1 meanwhile. false
// restores the default.
func (d *Driver) RefuseHostNUMA(refuse, attribute bool) {
	d.pinCtl(pctlHostNUMA, b2i(!refuse), b2i(attribute))
}

// NodeBytes returns the host memory held by cuMemCreate handles at host NUMA node node, or at
// the HOST location for node -1.
func (d *Driver) NodeBytes(node int) int64 { return d.pinCtl(pctlNodeBytes, int64(node), 0) }

// MaxInflight returns the most pinning calls (cuMemCreate of host memory, cuMemHostRegister,
// cuMemRelease of host memory, cuMemHostUnregister) that were inside their SetPinCost delay at
// once since it was last called, and starts counting again: how many threads pinned side by
// side. It counts only while a delay is set.
func (d *Driver) MaxInflight() int { return int(d.pinCtl(pctlInflight, 0, 0)) }

// LoadedFake returns the controls of the fake driver this process loaded through
// cuda.LibraryEnv: for programs that ExecOnFake started (the benchmark suite), which have no
// test to call Run from. It fails where the variable is unset or names no fake.
func LoadedFake() (*Driver, error) {
	path := os.Getenv(cuda.LibraryEnv)
	if path == "" {
		return nil, fmt.Errorf("fakecuda: %s is not set: no fake driver loaded", cuda.LibraryEnv)
	}
	return open(path)
}

// EventRefusal is a refusal of cuEventCreate that a test injects (FailAfter(CallEventCreate,
// skip, Code)), and the sentinel the library's error must match for it (Want).
type EventRefusal struct {
	Code int
	Want error
}

// EventRefusals lists the refusals of cuEventCreate a test of a missing event tries: out of
// memory, whose error must match oom (the package's ErrOutOfMemory), and an invalid value,
// whose error must match refused (the package's ErrRefused).
func EventRefusals(oom, refused error) []EventRefusal {
	return []EventRefusal{{ResultOutOfMemory, oom}, {ResultInvalidValue, refused}}
}
