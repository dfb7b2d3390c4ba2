package copyengine

// The Batcher: its job type, its state, and the calls of its API. What each method does lives
// in a file of its own (kernel.go, batchapi.go, percopy.go), as do the checks of a batch
// (validate.go), the kernel's staging ring (ring.go), the side stream and its fences
// (streams.go) and MethodAuto's calibration (calibrate.go).

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// Job is one copy of Len bytes from Src to Dst. Both are addresses the device can use: device
// memory, or pinned host memory mapped for the device (VMM host granules: the host address
// itself; registered or cuMemHostAlloc memory: its device pointer, pinned.Pool.DevicePointer).
// Its layout, three machine words, is the kernel's job layout. Jobs are raw addresses: the
// Batcher records no stream on the host buffers they touch (device.Heap's HtoDAsync and
// DtoHAsync do). Free a pinned.Pool buffer a batch uses with FreeAsync on the batch's stream,
// or call RecordStream before a plain Free; a pool of another device (one granted this device,
// pinned.Options.Devices) refuses the stream (pinned.ErrInvalidStream): synchronize the stream
// before freeing its buffer.
type Job struct {
	Dst, Src cuda.DevicePtr
	Len      int
}

// Batcher moves batches of copy jobs with one kernel launch, one batch call or one copy per
// job. See the package comment.
type Batcher struct {
	dev     *icuda.Device
	method  Method // as asked: MethodAuto, or the one forced
	static  Method // MethodAuto's choice without a calibration: the first the driver has
	kernel  bool   // the kernel is loaded
	batchOK bool   // the driver has the batch API
	cal     *Calibration
	calErr  error // why MethodAuto has no calibration
	low     bool
	trust   bool // skip the overlap check
	blocks  int  // grid bound; 0 = one block per job
	threads int

	mod icuda.Module
	fn  icuda.Function

	mu      sync.Mutex
	closed  bool
	side    icuda.Stream // own stream for LowPriority launches and legacy-stream batches; 0 if none
	fences  *icuda.EventPool
	stages  []*stage // FIFO: stages[0] is the least recently used
	retired []*stage // idle buffers to free: too small for a batch, or refused by Close
	lost    []*stage // buffers a failed launch may still read, no event saying when it is done (lose)
	held    held     // what else the driver refused to give back, for Close (held.go)
	checked checked  // the streams Copy found to be of the Batcher's context (streams.go)

	spans, spare      []span // scratch for the overlap check
	dsts, srcs, sizes []uintptr
}

// New makes a Batcher for dev, which must stay open until Close (a closed one fails New with an
// error matching pinmalloc.ErrClosed). With MethodAuto or MethodKernel it loads the kernel (one
// JIT compilation per process, cached by the driver across processes).
func New(pub *cuda.Device, o Options) (*Batcher, error) {
	b, err := makeBatcher(pub, o)
	return b, faulted(err)
}

// makeBatcher is New, its error not yet made to match ErrDeviceFault.
func makeBatcher(pub *cuda.Device, o Options) (*Batcher, error) {
	dev, err := icuda.Of(pub)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if err := dev.Do(func() error { return nil }); err != nil { // closed: its error, said once
		return nil, fmt.Errorf("copyengine: New: %w", err)
	}
	if o.Method > MethodPerCopy || o.MaxBlocks < 0 || o.BlockThreads < 0 || o.BlockThreads > 1024 || o.BlockThreads%32 != 0 ||
		!(o.SMShare >= 0 && o.SMShare <= 1) {
		return nil, fmt.Errorf("%w: %+v (method %s, MaxBlocks ≥ 0, BlockThreads a multiple of 32 up to 1024, SMShare in [0, 1])",
			ErrInvalidOptions, o, o.Method)
	}
	b := &Batcher{dev: dev, method: o.Method, low: o.LowPriority, trust: o.TrustNoOverlap, blocks: o.MaxBlocks, threads: o.BlockThreads,
		fences: icuda.NewEventPool(dev)}
	if b.threads == 0 {
		b.threads = defaultBlockThreads
	}
	var kerr, berr error
	if o.Method == MethodAuto || o.Method == MethodKernel {
		kerr = b.loadKernel()
		b.kernel = kerr == nil
	}
	if o.Method == MethodAuto || o.Method == MethodBatchAPI {
		berr = dev.MemcpyBatchSupported()
		b.batchOK = berr == nil
	}
	switch {
	case o.Method == MethodKernel && !b.kernel, o.Method == MethodBatchAPI && !b.batchOK:
		return nil, errors.Join(fmt.Errorf("%w: %s: %w", ErrMethodUnsupported, o.Method, errors.Join(kerr, berr)), b.Close())
	case b.kernel:
		b.static = MethodKernel
	case b.batchOK:
		b.static = MethodBatchAPI
	default:
		b.static = MethodPerCopy
	}
	if b.kernel {
		if err := b.boundGrid(o.SMShare); err != nil {
			return nil, errors.Join(err, b.Close())
		}
	}
	if o.Method == MethodAuto && (b.kernel || b.batchOK) {
		b.cal, b.calErr = calibrationFor(b)
	}
	return b, nil
}

// Method returns the method the Batcher uses for every batch: the one forced, or the one the
// calibration chose at every block size and batch length (or, without a calibration, the
// first the driver has). It returns MethodAuto when the calibrated Batcher picks per batch
// (Choose tells which).
func (b *Batcher) Method() Method {
	switch {
	case b.method != MethodAuto:
		return b.method
	case b.cal == nil:
		return b.static
	}
	return b.cal.only
}

// Choose returns the method Copy uses for a batch of count jobs of size bytes each (on
// average).
func (b *Batcher) Choose(size, count int) Method {
	switch {
	case b.method != MethodAuto:
		return b.method
	case b.cal == nil:
		return b.static
	}
	return b.cal.Choice(size, count)
}

// Calibration returns what MethodAuto measured, shared by the Batchers of the same device and
// configuration; nil with ErrNotCalibrated and the reason when it did not calibrate (a forced
// method, a driver with one method only, or a calibration that failed: then it uses the first
// method the driver has).
func (b *Batcher) Calibration() (*Calibration, error) {
	switch {
	case b.cal != nil:
		return b.cal, nil
	case b.method != MethodAuto:
		return nil, fmt.Errorf("%w: the method %s is forced", ErrNotCalibrated, b.method)
	case b.calErr != nil:
		return nil, fmt.Errorf("%w: %w", ErrNotCalibrated, faulted(b.calErr))
	}
	return nil, fmt.Errorf("%w: the driver has one method, %s", ErrNotCalibrated, b.static)
}

// Copy queues every job on stream s and returns without waiting (see the package comment for
// the stream guarantees and errors). An empty batch does nothing; after Close, Copy fails with
// ErrClosed, empty or not. The per-thread default stream (CU_STREAM_PER_THREAD) is refused with
// ErrInvalidStream: it names the default stream of whichever OS thread a driver call runs on. So
// is a stream of another device (or of another CUDA context), whatever the method, before
// anything is queued: the kernel cannot run there, and a copy there would not be the Batcher's
// device's. A stream is asked its context (cuStreamGetCtx) when it is not among the last
// eight Copy accepted, or a stream was destroyed through package cuda since, or the driver
// refused a handle in a Copy since (a stream destroyed through another binding). A
// stream that is capturing a CUDA graph (or the legacy stream while a blocking stream captures)
// is refused with an error matching cuda.ErrCapturing, before anything is queued: a batch's
// staging buffer and fences are the Batcher's, reused by the next Copy, and a graph would use
// them again at every launch; queue the copies outside the capture. The host side of each job
// must stay allocated, and its bytes untouched, until s has passed the copy.
func (b *Batcher) Copy(jobs []Job, s cuda.Stream) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return faulted(b.copyLocked(jobs, s))
}

// copyLocked is Copy under b.mu, its error not yet made to match ErrDeviceFault.
func (b *Batcher) copyLocked(jobs []Job, s cuda.Stream) error {
	switch {
	case b.closed:
		return ErrClosed
	case len(jobs) == 0:
		return nil
	}
	if streamq.Stream(s) == streamq.PerThreadStream {
		return fmt.Errorf("%w: %w", ErrInvalidStream, streamq.ErrPerThreadStream)
	}
	if err := b.checkStream(s); err != nil {
		return err
	}
	return b.refused(s, b.queue(jobs, s))
}

// queue refuses stream s while a CUDA graph capture holds it, and else queues jobs there by the
// method chosen. It holds the capture gate (icuda.HoldCaptureBegins) from its ask whether s
// captures to the last driver call the answer allows: a capture begun through package cuda on
// another goroutine meanwhile waits for it, so that the launch, the staging event and the
// fences are s's work, never nodes of that capture's graph (which would read the staging
// buffer, rewritten by the next Copy, at each of its launches). Under the gate it waits for
// nothing but driver calls. b.mu is held.
func (b *Batcher) queue(jobs []Job, s cuda.Stream) error {
	icuda.HoldCaptureBegins()
	defer icuda.ReleaseCaptureBegins()
	if err := streamq.CaptureRefusal(b.dev, streamq.Stream(s)); err != nil {
		return fmt.Errorf("copyengine: Copy refused: %w", err)
	}
	total, err := b.check(jobs)
	if err != nil {
		return err
	}
	m := b.method
	if m == MethodAuto {
		m = b.static
		if b.cal != nil {
			m = b.cal.Choice(int(total/uintptr(len(jobs))), len(jobs))
		}
	}
	switch m {
	case MethodKernel:
		return b.launch(jobs, s)
	case MethodBatchAPI:
		return b.batch(jobs, s)
	}
	return b.perCopy(jobs, s)
}

// Close waits for the launches that read the Batcher's staging buffers, frees them, unloads the
// kernel and destroys the Batcher's stream and events. Work queued by Copy on the caller's
// streams is not waited for, except what a staging buffer's event covers. A staging buffer,
// stream, event or calibration buffer the driver refuses to give back, or the kernel it refuses
// to unload, is kept (the driver refuses a free of pinned memory while a stream captures a
// graph in the global mode, and every call under the context's sticky error after a device
// fault), as is the Batcher's own stream when the driver refuses the wait for it before its
// destroy, and the next Close tries it again, giving back each once; otherwise Close is
// idempotent. Its error says a device fault once (it matches ErrDeviceFault), with
// what Close keeps. A staging buffer that a
// failed Copy's launch may still read, with no event to say when it is done (its record
// failed, and neither its stream nor the context could be synchronized then), is freed only
// once Close confirms that launch done: by a synchronize of the stream it was queued on, while
// that stream does not capture a graph, or else by one of the context, made only while no
// capture is visible (none on that stream, nor on the legacy stream, which answers for the
// blocking streams; a non-blocking stream's capture the Batcher never saw is not visible, and
// the driver ends it). Neither ends a capture Close can see. Until then the buffer is kept,
// unfreed, and the kernel loaded, Close's error wraps pinmalloc.ErrBusy, and the next Close
// tries again. A Close after the device's (a misuse) can give nothing back: it says so once,
// with an error matching pinmalloc.ErrClosed, and forgets what the Batcher held.
func (b *Batcher) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.dev.Do(func() error { return nil }); err != nil && b.dev.Closed() {
		return b.forget(err)
	}
	var errs []error
	if !b.closed {
		b.closed = true
		for _, st := range b.stages {
			if st.busy {
				errs = append(errs, b.dev.EventSynchronize(st.ev))
			}
		}
		b.retired = append(b.retired, b.stages...)
		b.stages = nil
		b.takeFences()
	}
	errs = append(errs, b.freeLost(), b.freeRetired(), b.closeSide(), b.freeHeld(), b.unload())
	return faulted(b.closeError(errs))
}

// unload unloads the gather kernel once no lost launch (lose) may still run it: while one may,
// the module stays loaded, as its staging buffer stays allocated, and the Close that frees the
// last such buffer unloads it. A buffer retired on a synchronize of its launch's stream handle
// alone (stage.byHandle) counts until its free: the handle may name another stream by then. A
// module the driver refuses to unload stays, for a later Close.
func (b *Batcher) unload() error {
	if b.mod == 0 || len(b.lost) != 0 || slices.ContainsFunc(b.retired, func(st *stage) bool { return st.byHandle }) {
		return nil
	}
	if err := b.dev.ModuleUnload(b.mod); err != nil {
		return fmt.Errorf("copyengine: unloading the gather kernel: %w", err)
	}
	b.mod, b.fn = 0, 0
	return nil
}

// forget closes a Batcher whose device was closed before it (closed, the device's error):
// what the Batcher holds no call can give back any more (it is the context's, freed with the
// context once its last user lets it go), so forget drops it and says so once; nil when the
// Batcher held nothing.
func (b *Batcher) forget(closed error) error {
	b.closed = true
	n := len(b.stages) + len(b.retired) + len(b.lost) + b.held.len()
	if b.side != 0 || b.mod != 0 {
		n++
	}
	b.stages, b.retired, b.lost, b.side, b.mod, b.fn = nil, nil, nil, 0, 0, 0
	b.held = held{}
	_ = b.fences.Close() // the device's refusals, once per event: said below
	if n == 0 {
		return nil
	}
	return fmt.Errorf("copyengine: Close after its device's, what it held left to the CUDA context: %w",
		closed)
}
