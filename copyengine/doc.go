// Package copyengine moves batches of scattered copies between device memory and pinned host
// memory: a Batcher queues a batch on a stream in as few driver calls as it can. It is the
// copy engine of the uvm tier (uvm.Mover), usable on its own; package device keeps the heaps
// and their checked copies.
//
// # Use
//
// Make one Batcher per device with New, queue each batch of jobs (destination, source,
// length) on a stream with Copy, and Close the Batcher when done:
//
//	b, err := copyengine.New(dev, copyengine.Options{}) // MethodAuto: calibrates once
//	jobs := []copyengine.Job{{Dst: d0, Src: h0, Len: 4096}, {Dst: d1, Src: h1, Len: 8192}}
//	err = b.Copy(jobs, stream) // queued on stream; it does not wait for the copies
//	err = dev.StreamSynchronize(stream)
//	err = b.Close()
//
// Copy returns once the batch is queued: work queued on the stream after it sees the copies
// done. Errors match sentinels with errors.Is (ErrInvalidJob, ErrOverlap, ErrInvalidStream,
// ErrClosed, ...). The rest of this comment is the design: how a method is chosen, how the
// staging buffers are reused, and what each failure leaves behind.
//
// # Methods
//
//   - MethodKernel: one launch of a gather/scatter kernel per batch, for scattered small
//     blocks, where one copy per block is bound by the cost of a driver call (the GPU check's
//     batch-* cases and calibration measure the three methods; docs/bench.md keeps an earlier
//     session's H100 figures, unreproduced). It runs on the SMs, so it competes with the
//     caller's kernels:
//     Options.LowPriority moves it to a stream of the device's least priority with a bounded
//     grid, and Options.SMShare caps its grid at a share of the device's multiprocessors.
//   - MethodBatchAPI: one cuMemcpyBatchAsync_v2 call (CUDA 13.0 drivers): the copy
//     engines, with a cost per job.
//   - MethodPerCopy: one cuMemcpyAsync per job.
//
// Which is fastest depends on the device, the block size and the batch length (peers measured
// batched DMA at 4–7 GB/s for 4–24 KiB blocks where a gather kernel wins below about 28 KiB, and
// a kernel of one block per job cannot fill the link with a few huge jobs), so MethodAuto
// calibrates: New times every method the driver has at a few block sizes and batch lengths,
// once per device, configuration and process, and Copy picks the fastest for
// each batch by its mean block size and its length. Where the calibration cannot run (no
// memory for its buffers), MethodAuto takes the kernel when the driver loads it, else the batch
// API when the driver has it, else one copy per job, and Calibration says why. A forced method
// (Options.Method) is never calibrated; one the driver cannot do makes New fail with
// ErrMethodUnsupported.
//
// # Kernel launches
//
// The kernel reads the job array from pinned host memory mapped for the device (cuMemHostAlloc
// with DEVICEMAP), a staging buffer the Batcher owns. A buffer is written by Copy, read by the
// launch, and reused only once an event recorded after that launch has completed; the Batcher
// keeps up to 4 buffers in a FIFO ring and waits for the oldest
// (cuEventSynchronize) only when all are in flight. A buffer too small for a batch is replaced
// by one at least twice its size, and Close frees the small one: cuMemFreeHost synchronizes the
// context. The PTX is loaded
// once per Batcher (the driver caches the JIT result across processes).
//
// # Streams
//
// Copy queues the jobs on the caller's stream s and returns without waiting: they run after the
// work queued on s before, and work queued on s after sees them done. With LowPriority the
// kernel runs on the Batcher's own low-priority stream instead, fenced by events both ways (s →
// side before the launch, side → s after), which keeps those guarantees. The batch
// API refuses the legacy default stream (0), so a batch on stream 0 is fenced through the side
// stream the same way. The per-thread default stream (CU_STREAM_PER_THREAD) is refused with
// ErrInvalidStream: it names the default stream of whichever OS thread a driver call runs on,
// and a goroutine moves between threads from one call to the next. So is a stream of another
// device or CUDA context, with every method: the kernel cannot be launched there, and the
// copy methods would queue the batch on another device's stream. A stream's context is asked
// (cuStreamGetCtx) when Copy is given a stream not among the last eight it accepted, or after
// a stream was destroyed through package cuda (its handle may go to another device's stream);
// a stream destroyed through another binding is not seen so: where the driver then refuses the
// handle (no stream has it, or the launch on another device's stream given it), Copy's error
// matches ErrInvalidStream and the stream is asked again at the next Copy, but a copy method
// queues the batch on another device's stream given the handle. A stream capturing a CUDA
// graph (cuStreamBeginCapture), or the legacy stream while a blocking stream captures, is
// refused with an error matching cuda.ErrCapturing before anything is queued: the staging
// buffers and fences of a batch are the Batcher's, reused by the next Copy, and a graph would
// use them again at every launch. A capture begun through package cuda on another goroutine
// while a Copy queues its batch waits for that Copy (the capture gate); one begun by another
// binding of the driver between Copy's check and its launch is not seen, and its graph takes
// the batch.
//
// # Errors
//
// Jobs are checked before anything is queued: a zero length, a zero address or a range that wraps
// around the address space is ErrInvalidJob, and two jobs whose destinations overlap, or a
// destination that overlaps any job's source, is ErrOverlap (the jobs of one batch run in no
// particular order; Options.TrustNoOverlap skips that check). Addresses are not checked against the
// driver: a job the device cannot reach fails the batch API or per-copy call with an error wrapping
// cuda.ErrInvalidValue, and faults the kernel: CUDA_ERROR_ILLEGAL_ADDRESS, which on a real GPU is
// sticky and ends the context. A failing launch or batch call is reported, not retried with another
// method: a fault is not recoverable, the other failures are misuse that a retry would repeat, and
// the caller (uvm) must know that a block did not move. Per copy, a failure at job k leaves jobs
// 0..k-1 queued; the error says which job failed. A launch or batch call that was queued but whose
// staging event or fence back to s could not be is waited for before Copy returns the error, so
// that no copy of a failed Copy runs later out of s's order or from a staging buffer reused since:
// by a synchronize of the stream, else of the context, made only while no capture is visible (as
// for Close, below; its error then matches cuda.ErrCapturing). Where even that wait fails, the
// launch's staging buffer leaves the ring, never written again, and Close frees it, and unloads
// the kernel, only once it confirms the launch done (until then its error wraps
// pinmalloc.ErrBusy): by synchronizing its
// stream, while that stream does not capture a graph, else the context, while no capture is
// visible (a non-blocking stream's capture the Batcher never saw is not), so that Close ends no
// capture it can see.
// After a device fault, Copy, Close and New fail with errors matching ErrDeviceFault (and
// cuda.ErrDeviceFault, the driver's sticky error). The sentinels are of the module's shared
// kinds (package pinmalloc).
//
// # Concurrency
//
// A Batcher is safe for concurrent use; Copy calls are serialized by a mutex (the staging ring
// and the scratch arrays are shared). Close may race with Copy: a Copy after it fails with
// ErrClosed.
package copyengine
