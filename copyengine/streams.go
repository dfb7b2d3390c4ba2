package copyengine

// The caller's stream, checked to be of the Batcher's device; the Batcher's side stream and
// the fences that keep a batch moved on it in the order of the caller's stream: LowPriority
// launches run there, and batch-API batches on the legacy stream, which that API refuses.

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// checked is the streams Copy found to be of the Batcher's context (checkStream), up to
// checkedStreams of them, and icuda.StreamDestroys when it asked: while no stream has been
// destroyed since, no other stream can have their handles.
type checked struct {
	s       [checkedStreams]cuda.Stream
	n       int // how many of s hold streams; the next one replaces s[n%checkedStreams]
	destroy uint64
}

// checkedStreams is how many streams a Batcher remembers as its context's: a serving loop
// feeding one Batcher from a stream per worker asks each once, not at every turn.
const checkedStreams = 8

// has reports whether s is remembered, with no stream destroyed since (destroy).
func (c *checked) has(s cuda.Stream, destroy uint64) bool {
	if c.destroy != destroy {
		return false
	}
	for _, x := range c.s[:min(c.n, checkedStreams)] {
		if x == s {
			return true
		}
	}
	return false
}

// add remembers s, asked when the destroy count was destroy: a later count forgets the others.
func (c *checked) add(s cuda.Stream, destroy uint64) {
	if c.destroy != destroy {
		c.n, c.destroy = 0, destroy
	}
	c.s[c.n%checkedStreams] = s
	c.n++
}

// checkStream refuses, with ErrInvalidStream, a stream s of another context than the
// Batcher's (another device's stream), or a handle the driver does not know, before anything
// is queued: the kernel's launch there fails, and a copy there would be ordered on another
// device's stream. The legacy stream, every context's, is not asked about. The streams
// accepted are remembered (checked), until a stream is destroyed through package cuda, or the
// driver refuses a handle in a Copy (refused): a Copy on one of them costs an atomic load and
// no driver call. A driver without cuStreamGetCtx
// takes the stream on trust. b.mu is held.
func (b *Batcher) checkStream(s cuda.Stream) error {
	if streamq.DefaultStream(streamq.Stream(s)) {
		return nil
	}
	destroy := icuda.StreamDestroys() // before the ask: a destroy after it makes the answer stale
	if b.checked.has(s, destroy) {
		return nil
	}
	c, err := b.dev.StreamContext(uintptr(s))
	switch {
	case errors.Is(err, pinmalloc.ErrSymbol): // the driver cannot say: the stream is taken on trust
	case errors.Is(err, cuda.ErrDeviceFault), errors.Is(err, pinmalloc.ErrClosed):
		return fmt.Errorf("copyengine: asking the context of stream %#x: %w", s, err) // not the stream's fault
	case err != nil:
		return fmt.Errorf("%w: stream %#x, refused as a stream of CUDA device %d: %w", ErrInvalidStream, s, b.dev.Ordinal(), err)
	case c != b.dev.Context():
		return fmt.Errorf("%w: stream %#x, refused as a stream of CUDA device %d: a stream of CUDA context %#x, not the device's %#x: %w",
			ErrInvalidStream, s, b.dev.Ordinal(), c, b.dev.Context(), pinmalloc.ErrInvalidHandle)
	}
	b.checked.add(s, destroy)
	return nil
}

// refused returns err, the error of a Copy on stream s, made to match ErrInvalidStream too when
// the driver refused a handle (CUDA_ERROR_INVALID_HANDLE) and s is no stream of the Batcher's
// context any more: checkStream remembered it, and it was destroyed since through another
// binding than package cuda (whose destroys icuda.StreamDestroys counts), its handle unused or
// given to another device's stream. The streams remembered are forgotten and s is asked again,
// so that a later Copy on it is refused before anything is queued. It costs nothing but on that
// error. b.mu is held.
func (b *Batcher) refused(s cuda.Stream, err error) error {
	if err == nil || !errors.Is(err, pinmalloc.ErrInvalidHandle) || streamq.DefaultStream(streamq.Stream(s)) {
		return err
	}
	b.checked.n = 0
	if cerr := b.checkStream(s); !errors.Is(cerr, ErrInvalidStream) {
		return err // s is still the context's: the refusal was of another handle
	}
	return errkind.Wrapf("copyengine: ", err, "%w: stream %#x, no stream of CUDA device %d since the Batcher checked it "+
		"(destroyed through another binding than package cuda)", ErrInvalidStream, s, b.dev.Ordinal())
}

// lowPriority creates the side stream at the device's least priority.
func (b *Batcher) lowPriority() error {
	least, _, err := b.dev.StreamPriorityRange()
	if err != nil {
		return err
	}
	b.side, err = b.dev.StreamCreateWithPriority(true, least)
	return err
}

// fence makes the work queued on to from now on wait for the work queued on from so far. An
// event the driver cannot make for it (cuEventCreate refused) queues nothing: streamq.ErrNoEvent
// (pinmalloc.ErrRefused; the driver's error, kept, matches pinmalloc.ErrOutOfMemory when memory
// ran out).
func (b *Batcher) fence(from, to cuda.Stream) error {
	ev, err := b.fences.Get()
	if err != nil {
		return fmt.Errorf("copyengine: ordering streams: %w to record with: %w", streamq.ErrNoEvent, err)
	}
	defer b.fences.Put(ev) // a wait already queued is not affected by a later record
	if err := b.dev.EventRecord(ev, uintptr(from)); err != nil {
		return fmt.Errorf("copyengine: ordering streams: %w", err)
	}
	if err := b.dev.StreamWaitEvent(uintptr(to), ev); err != nil {
		return fmt.Errorf("copyengine: ordering streams: %w", err)
	}
	return nil
}

// settle waits for the work queued on stream on, a batch's stream, after the batch of the
// caller's stream s was queued but what orders it could not be (its staging event, its fence
// back to s), and returns err: so that a failed Copy leaves no copy of its batch to run later
// out of the caller's stream order, or reading a staging buffer the next Copy reuses. When on
// cannot be synchronized, it waits for the whole context (wait).
func (b *Batcher) settle(on, s cuda.Stream, err error) error {
	return errors.Join(err, b.wait(on, s))
}

// wait waits for the work queued on stream on, a batch's stream for the caller's stream s, or,
// when on cannot be synchronized, for the whole context, which any capture on the context
// refuses and ends: so not when a capture refused on's synchronize, nor while one is visible
// (captureSeen). Its error says that neither could be, and the work may still run; it matches
// pinmalloc.ErrCapturing when a capture stopped the waits.
func (b *Batcher) wait(on, s cuda.Stream) error {
	if beforeWait != nil {
		beforeWait(on)
	}
	err := b.dev.StreamSynchronize(uintptr(on))
	if err == nil {
		return nil
	}
	if !errors.Is(err, pinmalloc.ErrCapturing) {
		if cerr := b.captureSeen(on, s); cerr != nil {
			err = fmt.Errorf("%w; and the context's would end a CUDA graph capture: %w", err, cerr)
		} else if cerr := b.dev.Synchronize(); cerr != nil {
			err = fmt.Errorf("%w; and the context's: %w", err, cerr)
		} else {
			return nil
		}
	}
	return fmt.Errorf("copyengine: waiting for the batch after that failure: %w", err)
}

// captureSeen returns the refusal (streamq.CaptureRefusal) of a stream a CUDA graph capture
// holds among those the Batcher knows: the legacy stream (which answers for a capture on any
// blocking stream), ss, its side stream, and the streams of the launches its lost staging
// buffers wait for (not destroyed since); nil when none does. A synchronize of the context,
// which any capture on the context refuses and ends, is made only when it returns nil. A
// capture on a non-blocking stream the Batcher was never given is not seen. Each ask is one
// cuStreamIsCapturing, which ends nothing; it runs only where the context would be synchronized.
func (b *Batcher) captureSeen(ss ...cuda.Stream) error {
	if err := streamq.CaptureRefusal(b.dev, 0); err != nil {
		return err
	}
	for _, s := range ss {
		if err := streamq.CaptureRefusal(b.dev, streamq.Stream(s)); err != nil {
			return err
		}
	}
	if b.side != 0 {
		if err := streamq.CaptureRefusal(b.dev, b.side); err != nil {
			return err
		}
	}
	for _, st := range b.lost {
		if st.gone {
			continue
		}
		if err := streamq.CaptureRefusal(b.dev, st.on); err != nil {
			return err
		}
	}
	return nil
}

// beforeWait, when set (by tests), runs in wait before its synchronize of on.
var beforeWait func(on cuda.Stream)
