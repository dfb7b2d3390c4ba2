package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc"
)

// Loader state. Lock order: loadOnce, then initOnce, then a symbol's once inside the driver.
var (
	loadOnce sync.Once
	loadErr  error
	loaded   atomic.Pointer[driver] // set once libcuda.so.1 is open; read by Result.Error

	initOnce sync.Once
	initErr  error

	primaryRetains atomic.Int64 // retains taken by Open and not yet given back by Close
)

// Load opens the CUDA driver library, once; later calls return the first call's result. The
// library is libcuda.so.1, or the path in the environment variable named by LibraryEnv when it
// is set. The error wraps ErrNoDriver and names the dlopen failure when the library cannot be
// loaded. Load does not initialize the driver; Count and Open do.
func Load() error {
	_, err := loadDriver()
	return err
}

func loadDriver() (*driver, error) {
	loadOnce.Do(func() {
		path := libName
		if p := os.Getenv(LibraryEnv); p != "" {
			path = p
		}
		dr, err := loadFrom(path)
		if err != nil {
			loadErr = err
			return
		}
		loaded.Store(dr)
	})
	return loaded.Load(), loadErr
}

// initDriver loads the driver and runs cuInit(0), once.
func initDriver() (*driver, error) {
	dr, err := loadDriver()
	if err != nil {
		return nil, err
	}
	initOnce.Do(func() { initErr = initOn(dr) })
	return dr, initErr
}

// initOn runs cuInit(0) on dr; initDriver calls it once, tests on drivers from loadFrom.
func initOn(dr *driver) error { return initError(dr, dr.init()) }

// initError is the error of initOn for dr.init's err. A library without cuInit is no CUDA
// driver (every driver has it, from CUDA 1.0): its error matches ErrNoDriver, what a caller
// asking whether there is a driver tests, and still ErrSymbol, which names cuInit.
func initError(dr *driver, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pinmalloc.ErrSymbol):
		return &wrapped{what: "no CUDA driver", kind: pinmalloc.ErrNoDriver, err: err}
	}
	return wrap(err, "initializing the driver (cuInit)")
}

// DriverVersion returns the CUDA version the driver supports, as 1000*major + 10*minor
// (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	dr, err := loadDriver()
	if err != nil {
		return 0, err
	}
	return dr.driverVersion()
}

// Count returns the number of CUDA devices. With no driver it returns 0 and an error matching
// ErrNoDriver; with a driver but no device, 0 and an error matching ErrNoDevice, whether cuInit
// says so (CUDA_ERROR_NO_DEVICE, the usual answer) or cuDeviceGetCount counts none.
func Count() (int, error) {
	dr, err := initDriver()
	if err != nil {
		return 0, err
	}
	n, err := dr.deviceCount()
	switch {
	case err != nil:
		return 0, err
	case n == 0:
		return 0, fmt.Errorf("%w: cuDeviceGetCount counts none", pinmalloc.ErrNoDevice)
	}
	return n, nil
}

// PrimaryRetains returns the number of primary-context retains taken by Open and not yet
// released by Close, across all devices; tests use it to assert that no Device leaked.
func PrimaryRetains() int64 { return primaryRetains.Load() }

// Stats counts the resources live through one Device: allocated or registered through it and
// not yet freed. Each field is incremented on success of the allocating call and decremented
// on success of the freeing one.
type Stats struct {
	// DeviceAllocs counts MemAlloc, MemAllocAsync and MemAllocFromPoolAsync allocations.
	DeviceAllocs int64
	// ManagedAllocs counts MemAllocManaged allocations.
	ManagedAllocs int64
	// HostAllocs counts MemHostAlloc allocations.
	HostAllocs int64
	// HostRegistrations counts MemHostRegister registrations.
	HostRegistrations int64
	// Reservations counts MemAddressReserve reservations.
	Reservations int64
	// Handles counts MemCreate physical allocations.
	Handles int64
	// Streams counts streams from StreamCreate.
	Streams int64
	// Events counts events from EventCreate (including those an EventPool holds).
	Events int64
	// Modules counts modules from ModuleLoadData.
	Modules int64
	// Pools counts memory pools from MemPoolCreate.
	Pools int64
}

// Live reports the sum of all counters; zero means nothing is outstanding.
func (s Stats) Live() int64 {
	return s.DeviceAllocs + s.ManagedAllocs + s.HostAllocs + s.HostRegistrations +
		s.Reservations + s.Handles + s.Streams + s.Events + s.Modules + s.Pools
}

// Device is one CUDA device with its primary context retained. Methods are safe for concurrent
// use, Close included: it waits for the calls in flight, and the calls that start after it
// began fail with ErrClosed (calls.go).
type Device struct {
	drv      *driver
	ordinal  int
	dev      int32   // CUdevice
	ctx      uintptr // CUcontext of the primary context
	closed   atomic.Bool
	strict   atomic.Bool // queries and synchronizes in the thread's own capture mode (StrictCapture)
	calls    calls       // the calls in flight, which Close waits for
	closeMu  sync.Mutex  // held by a Close under way: a second waits for the first
	released bool        // the retain is given back (closeMu); a refused release leaves it false

	deviceAllocs, managedAllocs, hostAllocs, hostRegs atomic.Int64
	reservations, handles, streams, events            atomic.Int64
	modules, pools                                    atomic.Int64
	sites                                             siteBook // where live resources were made (sites.go), once RecordSites is called
}

// Open initializes the driver (once) and retains the primary context of the device with the
// given ordinal. Each Open must be paired with a Close.
func Open(ordinal int) (*Device, error) {
	dr, err := initDriver()
	if err != nil {
		return nil, err
	}
	return openOn(dr, ordinal)
}

// openOn is Open on an initialized driver; tests call it with drivers from loadFrom.
func openOn(dr *driver, ordinal int) (*Device, error) {
	if ordinal < math.MinInt32 || ordinal > math.MaxInt32 { // the driver's int would truncate it
		return nil, fmt.Errorf("%w: device %d: no driver has that ordinal", pinmalloc.ErrNoDevice,
			ordinal)
	}
	dev, err := dr.deviceGet(ordinal)
	if err != nil {
		return nil, wrap(err, "device %d", ordinal)
	}
	ctx, err := dr.primaryRetain(dev)
	if err != nil {
		return nil, wrap(err, "device %d: retain primary context", ordinal)
	}
	primaryRetains.Add(1)
	d := &Device{drv: dr, ordinal: ordinal, dev: dev, ctx: ctx}
	d.calls.init()
	noteOpen(d)
	return d, nil
}

// Close releases the primary-context retain taken by Open. It may race the Device's other
// calls: it marks the Device closed, so that the calls that start from then on fail with an
// error matching ErrClosed, waits for the calls in flight to end (a synchronize waits for its
// work) and then releases. When the driver refuses the release, Close returns its refusal,
// the Device stays closed and keeps its retain (PrimaryRetains counts it), and a later Close
// tries the release again. Once the retain is given back, Close returns nil: a Close during
// another waits for it, then returns nil, or tries again if that one was refused. Inside a Do
// of the same Device it cannot wait for that Do, and returns an error matching ErrBusy,
// closing nothing (nil if another Close is under way); nor may a function given to Do wait for
// a Close of its Device made elsewhere, which waits for that Do. It does not free what was
// allocated through the Device; the primary context (and its memory) lives on while anyone
// else retains it. Of the events its pools let go (capturetaint.go), it destroys those whose
// stream no longer captures and leaves the others to the driver; once the context is destroyed
// (no retain left), it forgets the tainted events of the Devices closed on it.
func (d *Device) Close() error {
	if d.drv.inDo(d.tag()) {
		if d.closed.Load() {
			return nil
		}
		return d.busyError()
	}
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if d.released {
		return nil
	}
	if !d.closed.Load() {
		d.closed.Store(true)
		d.drain()
		d.closeTaints()
	}
	if err := d.drv.primaryRelease(d.dev); err != nil {
		return wrap(err, "device %d: primary context not released (the device is closed; "+
			"a later Close tries again)", d.ordinal)
	}
	d.released = true
	primaryRetains.Add(-1)
	d.forgetDestroyedTaints()
	noteClose(d)
	return nil
}

// Ordinal returns the device ordinal passed to Open.
func (d *Device) Ordinal() int { return d.ordinal }

// Context returns the primary context (CUcontext) as a raw handle, for other bindings.
func (d *Device) Context() uintptr { return d.ctx }

// Stats returns the counts of resources live through this Device.
func (d *Device) Stats() Stats {
	return Stats{
		DeviceAllocs:      d.deviceAllocs.Load(),
		ManagedAllocs:     d.managedAllocs.Load(),
		HostAllocs:        d.hostAllocs.Load(),
		HostRegistrations: d.hostRegs.Load(),
		Reservations:      d.reservations.Load(),
		Handles:           d.handles.Load(),
		Streams:           d.streams.Load(),
		Events:            d.events.Load(),
		Modules:           d.modules.Load(),
		Pools:             d.pools.Load(),
	}
}

// Do runs f on a locked OS thread with the device's primary context current, then restores the
// thread's previous context. Every method that needs a context uses it; callers use it to run
// calls of another binding (or several calls of this one) in the same context. It fails with
// ErrClosed, f not run, once Close has begun. Do may nest: a call of the Device (a Do included)
// made in f runs even after a racing Close has begun, which waits for it with the outer Do.
func (d *Device) Do(f func() error) (err error) {
	if !d.enter() {
		return d.closedError()
	}
	defer d.exit()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.drv.doPush(d.ctx, d.tag()); err != nil {
		return wrap(err, "push primary context")
	}
	defer func() {
		if perr := d.drv.doPop(); perr != nil && err == nil {
			err = wrap(perr, "pop primary context")
		}
	}()
	return f()
}

// Name returns the device's name ("NVIDIA H100 80GB HBM3"). Like every call that asks the
// driver, it fails with ErrClosed after Close, though it needs no context.
func (d *Device) Name() (string, error) {
	if !d.enter() {
		return "", d.closedError()
	}
	defer d.exit()
	return d.drv.deviceName(d.dev)
}

// TotalMem returns the device's total memory in bytes; ErrClosed after Close.
func (d *Device) TotalMem() (uintptr, error) {
	if !d.enter() {
		return 0, d.closedError()
	}
	defer d.exit()
	return d.drv.deviceTotalMem(d.dev)
}

// Attribute returns a device attribute (one of the Attr constants, or any
// CU_DEVICE_ATTRIBUTE_* value); ErrClosed after Close.
func (d *Device) Attribute(attr int) (int, error) {
	if !d.enter() {
		return 0, d.closedError()
	}
	defer d.exit()
	return d.drv.deviceAttribute(d.dev, attr)
}

// VMMSupported reports whether the device supports the virtual memory management API.
func (d *Device) VMMSupported() bool {
	v, err := d.Attribute(AttrVirtualMemoryManagementSupported)
	return err == nil && v != 0
}

// MemGetInfo returns the free and total device memory in bytes, as the driver sees it.
func (d *Device) MemGetInfo() (free, total uintptr, err error) {
	err = d.Do(func() (e error) { free, total, e = d.drv.memGetInfo(); return })
	return
}

// Synchronize waits until all work queued in the primary context has completed.
func (d *Device) Synchronize() error { return d.Do(d.drv.ctxSynchronize) }

// MemAlloc allocates n bytes of device memory.
func (d *Device) MemAlloc(n uintptr) (p DevicePtr, err error) {
	err = d.Do(func() (e error) { p, e = d.drv.memAlloc(n); return })
	return p, d.track(&d.deviceAllocs, uint64(p), 1, err)
}

// MemFree frees device memory from MemAlloc or MemAllocAsync.
func (d *Device) MemFree(p DevicePtr) error {
	return d.track(&d.deviceAllocs, uint64(p), -1, d.Do(func() error { return d.drv.memFree(p) }))
}

// MemAllocAsync allocates n bytes of device memory from the device's default memory pool,
// ordered on stream s (requires AttrMemoryPoolsSupported).
func (d *Device) MemAllocAsync(n uintptr, s Stream) (p DevicePtr, err error) {
	err = d.Do(func() (e error) { p, e = d.drv.memAllocAsync(n, s); return })
	return p, d.track(&d.deviceAllocs, uint64(p), 1, err)
}

// MemFreeAsync frees device memory back to its pool, ordered on stream s.
func (d *Device) MemFreeAsync(p DevicePtr, s Stream) error {
	return d.track(&d.deviceAllocs, uint64(p), -1, d.Do(func() error { return d.drv.memFreeAsync(p, s) }))
}

// MemAllocManaged allocates n bytes of managed memory; flags is MemAttachGlobal or
// MemAttachHost. Free it with MemFreeManaged.
func (d *Device) MemAllocManaged(n uintptr, flags uint32) (p DevicePtr, err error) {
	err = d.Do(func() (e error) { p, e = d.drv.memAllocManaged(n, flags); return })
	return p, d.track(&d.managedAllocs, uint64(p), 1, err)
}

// MemFreeManaged frees managed memory from MemAllocManaged (cuMemFree).
func (d *Device) MemFreeManaged(p DevicePtr) error {
	return d.track(&d.managedAllocs, uint64(p), -1, d.Do(func() error { return d.drv.memFree(p) }))
}

// MemHostAlloc allocates n bytes of page-locked host memory; flags is a combination of the
// HostAlloc constants. Free it with MemFreeHost.
func (d *Device) MemHostAlloc(n uintptr, flags uint32) (p uintptr, err error) {
	err = d.Do(func() (e error) { p, e = d.drv.memHostAlloc(n, flags); return })
	return p, d.track(&d.hostAllocs, uint64(p), 1, err)
}

// MemFreeHost frees host memory from MemHostAlloc.
func (d *Device) MemFreeHost(p uintptr) error {
	return d.track(&d.hostAllocs, uint64(p), -1, d.Do(func() error { return d.drv.memFreeHost(p) }))
}

// MemHostRegister page-locks the host range [p, p+n) and registers it with the driver; flags is
// a combination of the HostRegister constants. Registering a range that overlaps a registered
// one fails with an error matching ErrAlreadyRegistered.
func (d *Device) MemHostRegister(p, n uintptr, flags uint32) error {
	return d.track(&d.hostRegs, uint64(p), 1, d.Do(func() error { return d.drv.memHostRegister(p, n, flags) }))
}

// MemHostUnregister unregisters a range registered by MemHostRegister at p.
func (d *Device) MemHostUnregister(p uintptr) error {
	return d.track(&d.hostRegs, uint64(p), -1, d.Do(func() error { return d.drv.memHostUnregister(p) }))
}

// MemHostGetDevicePointer returns the device address of mapped host memory (allocated with
// HostAllocDeviceMap or registered with HostRegisterDeviceMap).
func (d *Device) MemHostGetDevicePointer(p uintptr) (dp DevicePtr, err error) {
	err = d.Do(func() (e error) { dp, e = d.drv.memHostGetDevicePointer(p); return })
	return
}

// MemsetD8 sets n bytes of device memory at p to v.
func (d *Device) MemsetD8(p DevicePtr, v byte, n uintptr) error {
	return d.Do(func() error { return d.drv.memsetD8(p, v, n) })
}

// MemsetD8Async sets n bytes of device memory at p to v, ordered on stream s.
func (d *Device) MemsetD8Async(p DevicePtr, v byte, n uintptr, s Stream) error {
	return d.Do(func() error { return d.drv.memsetD8Async(p, v, n, s) })
}

// MemcpyHtoD copies n bytes from host address src to device address dst.
func (d *Device) MemcpyHtoD(dst DevicePtr, src uintptr, n uintptr) error {
	return d.Do(func() error { return d.drv.memcpyHtoD(dst, src, n) })
}

// MemcpyDtoH copies n bytes from device address src to host address dst.
func (d *Device) MemcpyDtoH(dst uintptr, src DevicePtr, n uintptr) error {
	return d.Do(func() error { return d.drv.memcpyDtoH(dst, src, n) })
}

// MemcpyDtoD copies n bytes between device addresses.
func (d *Device) MemcpyDtoD(dst, src DevicePtr, n uintptr) error {
	return d.Do(func() error { return d.drv.memcpyDtoD(dst, src, n) })
}

// MemcpyHtoDAsync queues a copy of n bytes from host src to device dst on stream s. For the
// copy to be asynchronous (and at full bandwidth) src must be page-locked.
func (d *Device) MemcpyHtoDAsync(dst DevicePtr, src uintptr, n uintptr, s Stream) error {
	return d.Do(func() error { return d.drv.memcpyHtoDAsync(dst, src, n, s) })
}

// MemcpyDtoHAsync queues a copy of n bytes from device src to host dst on stream s.
func (d *Device) MemcpyDtoHAsync(dst uintptr, src DevicePtr, n uintptr, s Stream) error {
	return d.Do(func() error { return d.drv.memcpyDtoHAsync(dst, src, n, s) })
}

// MemcpyDtoDAsync queues a copy of n bytes between device addresses on stream s.
func (d *Device) MemcpyDtoDAsync(dst, src DevicePtr, n uintptr, s Stream) error {
	return d.Do(func() error { return d.drv.memcpyDtoDAsync(dst, src, n, s) })
}

// MemGetAllocationGranularity returns the minimum and the recommended granularity of a pinned
// physical allocation on this device (MemCreate sizes and MemMap offsets and sizes must be
// multiples of the minimum).
func (d *Device) MemGetAllocationGranularity() (minimum, recommended uintptr, err error) {
	err = d.Do(func() (e error) {
		if minimum, e = d.drv.memGetGranularity(d.ordinal, false); e != nil {
			return e
		}
		recommended, e = d.drv.memGetGranularity(d.ordinal, true)
		return e
	})
	return
}

// MemAddressReserve reserves size bytes of device virtual address space aligned to align
// (0 for the default). Nothing is backed until MemMap.
func (d *Device) MemAddressReserve(size, align uintptr) (p DevicePtr, err error) {
	err = d.Do(func() (e error) { p, e = d.drv.memAddressReserve(size, align); return })
	return p, d.track(&d.reservations, uint64(p), 1, err)
}

// MemAddressFree frees a reservation made by MemAddressReserve; it must be wholly unmapped.
func (d *Device) MemAddressFree(p DevicePtr, size uintptr) error {
	return d.track(&d.reservations, uint64(p), -1, d.Do(func() error { return d.drv.memAddressFree(p, size) }))
}

// MemCreate allocates size bytes of pinned physical memory on this device and returns its
// handle; size must be a multiple of the minimum granularity.
func (d *Device) MemCreate(size uintptr) (h MemHandle, err error) {
	err = d.Do(func() (e error) { h, e = d.drv.memCreate(size, d.ordinal); return })
	return h, d.track(&d.handles, uint64(h), 1, err)
}

// MemRelease releases a handle from MemCreate. The memory is freed once it is also unmapped.
func (d *Device) MemRelease(h MemHandle) error {
	return d.track(&d.handles, uint64(h), -1, d.Do(func() error { return d.drv.memRelease(h) }))
}

// MemMap maps the whole of physical allocation h at [p, p+size) of a reservation. The range is
// not accessible until MemSetAccess.
func (d *Device) MemMap(p DevicePtr, size uintptr, h MemHandle) error {
	return d.Do(func() error { return d.drv.memMap(p, size, h) })
}

// MemUnmap unmaps [p, p+size), which must cover whole mappings.
func (d *Device) MemUnmap(p DevicePtr, size uintptr) error {
	return d.Do(func() error { return d.drv.memUnmap(p, size) })
}

// MemSetAccess makes the mapped range [p, p+size) readable and writable by this device.
func (d *Device) MemSetAccess(p DevicePtr, size uintptr) error {
	return d.Do(func() error { return d.drv.memSetAccess(p, size, d.ordinal) })
}

// MemPrefetchAsync queues a migration of the managed range [p, p+n) to loc (a device, or the
// host) on stream s, through cuMemPrefetchAsync_v2 (CUDA 12.2 or later).
func (d *Device) MemPrefetchAsync(p DevicePtr, n uintptr, loc MemLocation, s Stream) error {
	return d.Do(func() error { return d.drv.memPrefetchAsync(p, n, loc, s) })
}

// MemAdvise gives advice about the managed range [p, p+n) for loc, through cuMemAdvise_v2
// (CUDA 12.2 or later).
func (d *Device) MemAdvise(p DevicePtr, n uintptr, advice int32, loc MemLocation) error {
	return d.Do(func() error { return d.drv.memAdvise(p, n, advice, loc) })
}

// StreamCreate creates a stream. A non-blocking stream does not synchronize with the legacy
// default stream.
func (d *Device) StreamCreate(nonBlocking bool) (s Stream, err error) {
	var flags uint32
	if nonBlocking {
		flags = 0x1 // CU_STREAM_NON_BLOCKING
	}
	err = d.Do(func() (e error) { s, e = d.drv.streamCreate(flags); return })
	return s, d.track(&d.streams, uint64(s), 1, err)
}

// StreamNonBlocking reports whether s was created non-blocking (CU_STREAM_NON_BLOCKING): its
// work is not ordered against the legacy default stream's. The default streams are not.
func (d *Device) StreamNonBlocking(s Stream) (bool, error) {
	var flags uint32
	err := d.Do(func() (e error) { flags, e = d.drv.streamGetFlags(s); return })
	return flags&0x1 != 0, err
}

// StreamContext returns the context s belongs to (cuStreamGetCtx). It queues nothing, and a
// capture on s allows it. A driver without the call answers an error matching ErrSymbol.
func (d *Device) StreamContext(s Stream) (uintptr, error) {
	var c uintptr
	err := d.Do(func() (e error) { c, e = d.drv.streamGetCtx(s); return })
	return c, err
}

// StreamDestroy destroys a stream from StreamCreate; queued work still completes. The events
// let go after a capture of s took their records (capturetaint.go) are destroyed with it: a
// capture does not outlive its stream, and the driver gives the handle to a new stream.
func (d *Device) StreamDestroy(s Stream) error {
	seq := taints.seq.Load() // the let-go events tainted before the destroy name this stream
	err := d.track(&d.streams, uint64(s), -1, d.Do(func() error { return d.drv.streamDestroy(s) }))
	streamDestroys.Add(1) // after the destroy: a check made before it is stale from now on
	d.letGoAfterAsk(s, seq, err == nil)
	return err
}

// streamDestroys counts the StreamDestroy calls of the process, on every device.
var streamDestroys atomic.Uint64

// StreamDestroys returns the number of StreamDestroy calls made so far in the process, on
// every device, refused or not. A check of a stream handle (its context, say) made after
// reading it holds while it has not changed: no stream was destroyed through this binding
// since, so no handle was given back for the driver to hand to a new stream. Streams another
// binding destroys are not counted. It costs an atomic load.
func StreamDestroys() uint64 { return streamDestroys.Load() }

// StreamSynchronize waits until all work queued on s has completed.
func (d *Device) StreamSynchronize(s Stream) error {
	return d.Do(func() error { return d.relaxed(func() error { return d.drv.streamSynchronize(s) }) })
}

// StreamQuery returns nil if all work queued on s has completed, and an error matching
// ErrNotReady while some is pending. Like StreamSynchronize, EventQuery and EventSynchronize,
// it runs in the RELAXED capture mode (see StrictCapture).
func (d *Device) StreamQuery(s Stream) error {
	if !d.enter() {
		return d.closedError()
	}
	err := d.drv.streamQueryIn(d.ctx, s, !d.strict.Load()) // Do's push, call and pop in one cgo call
	d.exit()
	return err
}

// StrictCapture makes the device's queries and synchronizes (StreamQuery, StreamSynchronize,
// EventQuery, EventSynchronize) run in the calling thread's own capture interaction mode, for
// tests of the driver's capture rules. By default they run in the RELAXED mode, the thread's
// own restored after (cuThreadExchangeStreamCaptureMode): the driver counts them among the
// potentially unsafe calls that a capture begun GLOBAL on any thread prohibits, refusing them
// and invalidating that capture (PyTorch's NCCL watchdog and caching allocator met it with
// cudaEventQuery, and relax it the same way), and the library's own (a poll of a deferred
// free, a purge, a wait for its own stream) must neither fail nor end a user's capture. A
// query or synchronize of a capturing stream, or of an event recorded in a capture, conflicts
// with the capture itself: RELAXED does not allow it.
func (d *Device) StrictCapture(on bool) { d.strict.Store(on) }

// relaxed runs f in the RELAXED capture mode (RelaxCapture) unless StrictCapture.
func (d *Device) relaxed(f func() error) error {
	if !d.strict.Load() {
		defer d.RelaxCapture()()
	}
	return f()
}

// EventCreate creates an event. Events with timing disabled are cheaper to record and query;
// EventElapsed needs timing. The new event is not tainted (EventTainted), whatever was said
// of an event the driver gave its handle before.
func (d *Device) EventCreate(disableTiming bool) (ev Event, err error) {
	var flags uint32
	if disableTiming {
		flags = 0x2 // CU_EVENT_DISABLE_TIMING
	}
	err = d.Do(func() (e error) { ev, e = d.drv.eventCreate(flags); return })
	if err == nil {
		dropTaint(ev) // an event the driver destroyed unseen (its context's end) had the handle
	}
	return ev, d.track(&d.events, uint64(ev), 1, err)
}

// EventRecord records ev on stream s: it completes when the work queued before it does.
func (d *Device) EventRecord(ev Event, s Stream) error {
	if !d.enter() {
		return d.closedError()
	}
	err := d.drv.eventRecordIn(d.ctx, ev, s) // as StreamQuery
	d.exit()
	return err
}

// EventQuery returns nil if ev has completed and an error matching ErrNotReady if not.
func (d *Device) EventQuery(ev Event) error {
	if !d.enter() {
		return d.closedError()
	}
	err := d.drv.eventQueryIn(d.ctx, ev, !d.strict.Load()) // as StreamQuery
	d.exit()
	return err
}

// EventSynchronize waits until ev has completed.
func (d *Device) EventSynchronize(ev Event) error {
	return d.Do(func() error { return d.relaxed(func() error { return d.drv.eventSynchronize(ev) }) })
}

// EventElapsed returns the time in milliseconds between two completed events recorded with
// timing enabled; an event with timing disabled, or not recorded, gives an error matching
// ErrInvalidHandle.
func (d *Device) EventElapsed(start, end Event) (ms float32, err error) {
	err = d.Do(func() (e error) { ms, e = d.drv.eventElapsed(start, end); return })
	return
}

// EventDestroy destroys an event from EventCreate. Destroying a tainted event (EventTainted,
// or one an EventPool let go) is the caller's word that the capture that may have taken its
// record has ended: the event leaves the tainted ones, so that a new event the driver gives
// its handle is not taken for tainted, nor destroyed as a let-go one (DestroyLetGo, or an ask
// that finds its stream not capturing). One whose destroy the driver refuses stays tainted.
func (d *Device) EventDestroy(ev Event) error {
	was, o := dropTaint(ev)
	err := d.track(&d.events, uint64(ev), -1, d.Do(func() error { return d.drv.eventDestroy(ev) }))
	if err != nil {
		restoreTaint(ev, was, o)
	}
	return err
}
