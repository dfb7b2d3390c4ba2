package device

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// Deferred frees: the frees FreeAsync cannot do at once (another stream's block, a huge
// block) wait on internal/streamq's Lists, one list per freeing stream (lists.go there has
// their rule, their lazy points and their life). This file is what the heap adds: which list a
// free goes on, the polls and waits that hand frees back, the answer for a stream the driver
// refuses, and the frees done.
//
// A push costs no driver call. A poll (every Alloc, Stats, DeferredByStream, Close) gives a
// stream's new frees one event, and no other until that one has completed, and hands them back
// at a poll that finds it complete; a stream found idle (streamq's Points.Idle: nothing queued
// on it, nor on the legacy default stream that a blocking stream's work waits for, is left to
// run) needs no event, its frees come back at once. The legacy stream is never found so: its
// frees are ordered after every blocking stream's earlier work, which only its event waits for.
//
// A stream destroyed without ForgetStream while frees wait on it is refused by the driver at
// the poll: the poll then synchronizes the context once (Lists.Recover), which waits for the
// work that stream still had, and hands its frees back. When a capture puts that synchronize
// off (or it fails), the list waits for a later poll's (streamq's lists ask the handle nothing
// meanwhile), and the stream's heap is parked (parkRefused, park.go): it leaves the handle,
// which the driver may give to a new stream meanwhile.
// Every free handed back is done (finishDone), even when an earlier one fails: none is lost.
// h.mu is held by every function here: the heap is the lists' one reclaimer.

// deferredList is the frees deferred on one stream.
type deferredList = streamq.List[cuda.DevicePtr]

// listLinger is the polls in a row that find a stream's list empty before it leaves the lists.
// A poll runs only while frees are deferred (poll): a stream that frees across streams now and
// then keeps its list (no allocation for a new one), and one no longer used costs nothing
// after listLinger polls made while other streams have frees deferred.
const listLinger = 8

// newLists returns the lists of a heap whose points are points.
func newLists(points *streamq.Points) *streamq.Lists[cuda.DevicePtr] {
	return streamq.NewLists[cuda.DevicePtr](points, nil, listLinger)
}

// afterLostSync, when set (by tests), runs in a poll between the synchronize of the context for
// the lists it found lost and the hand-back of their frees.
var afterLostSync func()

// poll does the deferred frees whose streams have passed them, and gives the busy streams a
// point for the frees they have; the lists of streams the driver refuses are answered with one
// synchronize of the context. It fails only when the driver refuses a stream and the context's
// synchronize fails too (those frees stay), or when a free handed back fails.
func (h *Heap) poll() error {
	if len(h.deferred) == 0 {
		return nil // nothing to do: the lists of idle streams stay as they are, at no cost
	}
	err := h.pollLists()
	if errors.Is(err, cuda.ErrCapturing) {
		// A capture put off the synchronize of the context that answers a stream the driver
		// refuses: its frees stay deferred for a poll after the capture, and the call goes on.
		err = nil
	}
	if ferr := h.finishDone(); ferr != nil { // joined only when not nil: no allocation
		err = errors.Join(err, ferr)
	}
	return err
}

// pollLists is Poll of the lists, and Recover of the lost ones, into h.done (Lists.Reclaim).
func (h *Heap) pollLists() error {
	var err error
	if h.done, err = h.lists.Reclaim(h.done, afterLostSync); err != nil {
		err = fmt.Errorf("device: deferred frees: %w", err)
		h.parkRefused()
	}
	return err
}

// drain waits for every stream with deferred frees (a synchronize of each) and does them. A
// stream the driver refuses to synchronize (destroyed without ForgetStream) is answered as a
// poll answers it, with a synchronize of the context; the error stays only if frees are left on
// the lists. The parked frees (park.go) are no drain's: settleParked says what keeps one.
func (h *Heap) drain() error {
	var err error
	if h.done, err = h.lists.Drain(h.done); err != nil {
		err = fmt.Errorf("device: wait for deferred frees: %w", err)
		if perr := h.pollLists(); perr != nil {
			err = errkind.Once(err, perr) // a fault said once
		}
	}
	ferr := h.finishDone()
	if err != nil && ferr == nil && len(h.deferred) == h.parkedFrees() {
		err = nil // every free on the lists was done: the refused streams were answered
	}
	return errors.Join(err, ferr)
}

// finishDone does the frees in h.done, every one even when some fail, and empties it.
func (h *Heap) finishDone() error {
	var errs []error
	for _, p := range h.done {
		if err := h.finish(p); err != nil {
			errs = append(errs, err)
		}
	}
	clear(h.done)
	h.done = h.done[:0]
	return errors.Join(errs...)
}

// finish does a deferred free whose stream has passed it.
func (h *Heap) finish(p cuda.DevicePtr) error {
	delete(h.deferred, p)
	owner, err := h.owner(p)
	if err != nil {
		return err
	}
	return h.free(owner, p)
}
