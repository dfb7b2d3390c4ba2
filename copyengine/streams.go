package copyengine

// The Batcher's side stream and the fences that keep a batch moved on it in the order of the
// caller's stream: LowPriority launches run there, and batch-API batches on the legacy stream,
// which that API refuses.

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// lowPriority creates the side stream at the device's least priority.
func (b *Batcher) lowPriority() error {
	least, _, err := b.dev.StreamPriorityRange()
	if err != nil {
		return err
	}
	b.side, err = b.dev.StreamCreateWithPriority(true, least)
	return err
}

// fence makes the work queued on to from now on wait for the work queued on from so far.
func (b *Batcher) fence(from, to cuda.Stream) error {
	ev, err := b.fences.Get()
	if err != nil {
		return err
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
