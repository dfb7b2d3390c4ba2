package copyengine

// What the driver refused to give back outside the staging ring (ring.go keeps its buffers in
// b.retired): the calibration's device buffers, streams and events, the fence events the
// Batcher's pool held at Close, the side stream (kept in b.side) and the kernel (b.mod). Close
// tries them again, and each is dropped once given back, so that nothing is freed or destroyed
// twice (a destroyed stream's handle may name the next stream created).

import (
	"errors"
	"fmt"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// held is what the driver refused to free or destroy, kept for Close.
type held struct {
	dev     []icuda.DevicePtr // device memory whose cuMemFree was refused
	streams []icuda.Stream    // streams whose cuStreamDestroy was refused
	events  []icuda.Event     // events whose cuEventDestroy was refused (or not yet tried)
}

// len is the number of things held.
func (h *held) len() int { return len(h.dev) + len(h.streams) + len(h.events) }

// freeHeld frees and destroys what b.held keeps, and keeps what the driver refuses again. Device
// memory is freed in the RELAXED capture mode, as the ring's and the calibration's is.
func (b *Batcher) freeHeld() error {
	if b.held.len() == 0 {
		return nil
	}
	defer b.dev.RelaxCapture()()
	var errs []error
	b.held.streams = keepRefused(b.held.streams, func(s icuda.Stream) error {
		if err := b.dev.StreamDestroy(s); err != nil {
			return fmt.Errorf("copyengine: destroying a stream: %w", err)
		}
		return nil
	}, &errs)
	b.held.events = keepRefused(b.held.events, func(ev icuda.Event) error {
		if err := b.dev.EventDestroy(ev); err != nil {
			return fmt.Errorf("copyengine: destroying an event: %w", err)
		}
		return nil
	}, &errs)
	b.held.dev = keepRefused(b.held.dev, func(p icuda.DevicePtr) error {
		if err := b.dev.MemFree(p); err != nil {
			return fmt.Errorf("copyengine: freeing device memory: %w", err)
		}
		return nil
	}, &errs)
	return errors.Join(errs...)
}

// keepRefused calls give for each of xs and returns those it failed for (in xs's array), their
// errors appended to errs.
func keepRefused[T any](xs []T, give func(T) error, errs *[]error) []T {
	kept := xs[:0]
	for _, x := range xs {
		if err := give(x); err != nil {
			*errs = append(*errs, err)
			kept = append(kept, x)
		}
	}
	clear(xs[len(kept):])
	return kept
}

// takeFences moves the fence events idle in b.fences into b.held.events, for freeHeld to destroy
// with the Batcher's other handles (so that Close counts and retries what the driver refuses in
// one list), and closes the pool. Every fence event is idle: fence, which takes one, holds b.mu,
// as Close does.
func (b *Batcher) takeFences() {
	for n := b.fences.Idle(); n > 0; n-- {
		ev, err := b.fences.Get()
		if err != nil {
			break
		}
		b.held.events = append(b.held.events, ev)
	}
	_ = b.fences.Close() // none idle: nothing to destroy
}

// closeSide waits for the side stream and destroys it. A stream the driver refuses to wait for
// or to destroy stays in b.side, for a later Close to wait for and destroy: a wait refused says
// that the Batcher cannot tell its work done, and the handle is the Batcher's until a destroy.
func (b *Batcher) closeSide() error {
	if b.side == 0 {
		return nil
	}
	if err := b.dev.StreamSynchronize(b.side); err != nil {
		return fmt.Errorf("copyengine: waiting for its stream (kept for a later Close): %w", err)
	}
	if err := b.dev.StreamDestroy(b.side); err != nil {
		return fmt.Errorf("copyengine: destroying its stream: %w", err)
	}
	for _, st := range b.lost { // its handle may name another stream later
		st.gone = st.gone || st.on == b.side
	}
	b.side = 0
	return nil
}
