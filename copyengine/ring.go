package copyengine

// The kernel's staging ring: the job arrays the gather kernel reads, in pinned host memory
// mapped for the device. A buffer is written by Copy, read by the launch, and reused only once
// an event recorded after that launch has completed; up to maxStages buffers wait in a FIFO,
// and the oldest is waited for (cuEventSynchronize) only when all are in flight. A buffer too
// small for a batch is replaced by a bigger one and kept until Close frees it: cuMemFreeHost
// synchronizes the context, so a free in Copy would wait for the work of every stream of the
// device. A replacement is at least twice the size of the buffer it replaces, so the buffers
// kept take less memory than their replacements. The ring's allocations and frees run in the
// RELAXED capture mode, as cudamem's do (its doc.go): a user's capture on another thread
// neither refuses them nor is invalidated by them. A buffer that a failed launch may still
// read, with no event to say when (lose), leaves the ring for good, and only a Close that can
// confirm that launch done frees it (freeLost): by a synchronize of the launch's stream, in the
// same RELAXED mode, while that stream does not capture; else by one of the context, which any
// capture refuses and ends, so only while no capture is visible.

import (
	"errors"
	"fmt"
	"slices"

	"github.com/pinmalloc/pinmalloc"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

const (
	maxStages    = 4    // staging buffers in flight at most
	minStageJobs = 1024 // the smallest staging buffer, in jobs
	jobBytes     = 24   // one {dst, src, len} triple
)

// stage is a staging buffer for a kernel's job array: pinned host memory mapped for the device.
type stage struct {
	host uintptr         // host address, written by Copy
	dptr icuda.DevicePtr // the device's address of the same memory
	jobs int             // capacity in jobs
	ev   icuda.Event     // recorded after the launch that reads the buffer
	busy bool            // ev was recorded and may not have completed
	on   icuda.Stream    // lost (lose): the stream the launch that may still read it was queued on
	gone bool            // lost: on was destroyed (the side stream, by Close); the context confirms
	// byHandle: lost, then retired on a synchronize of on (waitLost), which names another
	// stream once on is destroyed and its handle given to a new one (by any binding): only the
	// buffer's free, which synchronizes the context, confirms its launch done.
	byHandle bool
}

// stage returns a staging buffer for n jobs that no launch in flight reads: the least recently
// used one whose launch has completed, else a new one while fewer than maxStages exist, else
// the least recently used after waiting for it (all are in flight then). It moves the buffer to
// the end of the FIFO.
func (b *Batcher) stage(n int) (*stage, error) {
	pick := -1
	for i, st := range b.stages { // least recently used first: most often the first is idle
		err := b.idle(st)
		if err == nil {
			pick = i
			break
		}
		if !errors.Is(err, pinmalloc.ErrNotReady) {
			return nil, err
		}
	}
	if pick < 0 && len(b.stages) >= maxStages {
		old := b.stages[0]
		if err := b.dev.EventSynchronize(old.ev); err != nil {
			return nil, fmt.Errorf("copyengine: waiting for a staging buffer: %w", err)
		}
		old.busy = false
		pick = 0
	}
	var st *stage
	if pick >= 0 {
		st = b.stages[pick]
		b.stages = append(b.stages[:pick], b.stages[pick+1:]...)
		if st.jobs < n { // too small: replace it, and keep it for Close (see the file comment)
			b.retired = append(b.retired, st)
			st = nil
		}
	}
	if st == nil {
		var err error
		if st, err = b.newStage(n); err != nil {
			return nil, err
		}
	}
	b.stages = append(b.stages, st)
	return st, nil
}

// idle returns nil when no launch in flight reads st, cuda.ErrNotReady while one may.
func (b *Batcher) idle(st *stage) error {
	if !st.busy {
		return nil
	}
	if err := b.dev.EventQuery(st.ev); err != nil {
		return err
	}
	st.busy = false
	return nil
}

// newStage allocates a staging buffer for at least n jobs. An event the driver cannot make for
// it (cuEventCreate refused) is streamq.ErrNoEvent (pinmalloc.ErrRefused; the driver's error,
// kept, matches pinmalloc.ErrOutOfMemory when memory ran out); the buffer is freed.
func (b *Batcher) newStage(n int) (*stage, error) {
	jobs := minStageJobs
	for jobs < n {
		jobs *= 2
	}
	defer b.dev.RelaxCapture()() // beside a user's capture, as cudamem's calls (doc.go)
	host, err := b.dev.MemHostAlloc(uintptr(jobs)*jobBytes, icuda.HostAllocDeviceMap|icuda.HostAllocPortable)
	if err != nil {
		return nil, fmt.Errorf("copyengine: allocating a staging buffer for %d jobs: %w", jobs, err)
	}
	st := &stage{host: host, jobs: jobs}
	if st.dptr, err = b.dev.MemHostGetDevicePointer(host); err == nil {
		if st.ev, err = b.dev.EventCreate(true); err != nil {
			// The driver's want or refusal, not the caller's jobs: as a stream's check says it.
			err = fmt.Errorf("%w to record after its launch: %w", streamq.ErrNoEvent, err)
		}
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("copyengine: staging buffer: %w", err), b.dev.MemFreeHost(host))
	}
	return st, nil
}

// freeStage frees an idle staging buffer. What the driver refused to free stays in st, for a
// later call to try again.
func (b *Batcher) freeStage(st *stage) error {
	defer b.dev.RelaxCapture()() // beside a user's capture, as cudamem's calls (doc.go)
	var errs []error
	if st.ev != 0 {
		if err := b.dev.EventDestroy(st.ev); err != nil {
			errs = append(errs, err)
		} else {
			st.ev = 0
		}
	}
	if st.host != 0 {
		if err := b.dev.MemFreeHost(st.host); err != nil {
			errs = append(errs, err)
		} else {
			st.host, st.byHandle = 0, false // the free synchronized the context: its launch is done
		}
	}
	return errkind.Once(errs...) // a fault refuses both alike: said once
}

// lose takes st out of the ring for good: a launch queued with it on stream on may still read
// it, and no event says when it is done (its record failed, and neither its stream nor the
// context could be synchronized). No Copy writes it again; Close frees it once it can confirm
// that launch done (freeLost).
func (b *Batcher) lose(st *stage, on icuda.Stream) {
	if i := slices.Index(b.stages, st); i >= 0 {
		b.stages = slices.Delete(b.stages, i, i+1)
	}
	st.on = on
	b.lost = append(b.lost, st)
}

// freeLost retires the lost staging buffers (lose), to be freed, once it confirms that no
// launch reads them. It runs in the RELAXED capture mode, as the ring's other calls, and ends no
// capture it can see. For each buffer it synchronizes the stream its launch was queued on,
// unless a capture holds that stream (streamq.CaptureRefusal): that is enough to know the
// launch done. The buffers it cannot confirm so (a stream that captures, was destroyed or is
// refused) it confirms by one synchronize of the context, which the driver refuses while any
// stream of the context captures, ending that capture: so only while no capture is visible
// (captureSeen), neither on those streams, nor on the side stream, nor on the legacy stream,
// which answers for any blocking stream's. A capture on a non-blocking stream the Batcher never
// saw is not visible. Where it cannot confirm, the buffers stay lost and unfreed, and the error,
// wrapping pinmalloc.ErrBusy and the reason, says how many: a later Close tries again. It holds
// the capture gate (icuda.HoldCaptureBegins) from its first look to its last synchronize, so
// that a capture begun through package cuda on another goroutine meanwhile waits for it rather
// than fall between a look and the synchronize it allows.
func (b *Batcher) freeLost() error {
	if len(b.lost) == 0 {
		return nil
	}
	icuda.HoldCaptureBegins()
	defer icuda.ReleaseCaptureBegins()
	defer b.dev.RelaxCapture()()
	var errs []error
	kept := b.lost[:0]
	for _, st := range b.lost {
		err := b.waitLost(st)
		if err != nil {
			errs = append(errs, err)
			kept = append(kept, st)
			continue
		}
		st.byHandle = true
		b.retired = append(b.retired, st)
	}
	clear(b.lost[len(kept):])
	b.lost = kept
	if len(b.lost) == 0 {
		return nil
	}
	err := b.captureSeen() // the legacy stream, the side stream, the lost launches' streams
	if err == nil {
		if err = b.dev.Synchronize(); err == nil {
			b.retired = append(b.retired, b.lost...)
			clear(b.lost)
			b.lost = b.lost[:0]
			return nil
		}
	}
	return fmt.Errorf("copyengine: %d staging buffers that failed launches may still read are kept, unfreed, until a Close can confirm those launches done: %w: %w",
		len(b.lost), pinmalloc.ErrBusy, errors.Join(append(errs, err)...))
}

// waitLost synchronizes the stream of the launch that may still read the lost buffer st, unless
// a capture holds it or it was destroyed: nil when that launch is done.
func (b *Batcher) waitLost(st *stage) error {
	if st.gone {
		return fmt.Errorf("copyengine: the stream %#x of a failed launch was destroyed", st.on)
	}
	if err := streamq.CaptureRefusal(b.dev, st.on); err != nil {
		return err
	}
	return b.dev.StreamSynchronize(st.on)
}

// freeRetired frees the retired staging buffers and keeps those the driver refused to free.
func (b *Batcher) freeRetired() error {
	var errs []error
	kept := b.retired[:0]
	for _, st := range b.retired {
		if err := b.freeStage(st); err != nil {
			errs = append(errs, fmt.Errorf("copyengine: freeing a staging buffer: %w", err))
			kept = append(kept, st)
		}
	}
	clear(b.retired[len(kept):])
	b.retired = kept
	return errors.Join(errs...)
}
