package copyengine

// The Batcher's side stream and the fences that keep a batch moved on it in the order of the
// caller's stream: LowPriority launches run there, and batch-API batches on the legacy stream,
// which that API refuses.

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
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

// settle waits for the work queued on stream on, a batch's stream, after the batch was queued
// but what orders it could not be (its staging event, its fence back to the caller's stream),
// and returns err: so that a failed Copy leaves no copy of its batch to run later out of the
// caller's stream order, or reading a staging buffer the next Copy reuses. When on cannot be
// synchronized, it waits for the whole context (wait).
func (b *Batcher) settle(on cuda.Stream, err error) error {
	return errors.Join(err, b.wait(on))
}

// wait waits for the work queued on stream on, or, when on cannot be synchronized, for the
// whole context; its error says that neither could be, and the work may still run.
func (b *Batcher) wait(on cuda.Stream) error {
	err := b.dev.StreamSynchronize(uintptr(on))
	if err != nil {
		err = b.dev.Synchronize()
	}
	if err != nil {
		return fmt.Errorf("copyengine: waiting for the batch after that failure: %w", err)
	}
	return nil
}
