package device

import (
	"errors"
	"fmt"
	"slices"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// Parked streams: the state of a stream destroyed before its ForgetStream, which ForgetStream
// could not wait for because a CUDA graph capture held the context.
//
// The driver refuses a destroyed stream's handle, so only a synchronize of the context waits for
// the work it still runs there (waitRefused), and the driver refuses that synchronize, ending the
// capture, while any stream of the context captures. ForgetStream then cannot give s's deferred
// frees or its heap's memory back; but it must not leave them under s's handle either, which the
// driver gives to the next stream created: that stream would take s's heap (blocks freed on s,
// whose work may still be queued, handed out on a stream not ordered after it), s's list of
// deferred frees (its frees handed back when the new stream is idle) and the list's answer to
// "non-blocking?" (a blocking stream's frees then handed back before the legacy stream's earlier
// work). So ForgetStream parks them: s's list (and the idle purge's list of requests for s's
// heap) leaves the lists with its items (streamq's Lists.Park), s's heap leaves h.streams and the
// purge, and all of them wait in h.parked, under no handle, with a mark of the points' context
// synchronizes (Points.SyncMark). A new stream given s's handle starts with nothing of s's.
//
// A parked stream is released once a synchronize of the context has succeeded after its mark
// (Points.SyncedSince): whichever made it (a poll's or Close's answer to a stream the driver
// refuses, another ForgetStream), settleParked then hands its deferred frees back and closes its
// heap, or, while blocks of that heap are live (freed on other streams, or not yet freed), trims
// it and keeps it until they are freed: every block that goes back to it from then on has passed
// its free. ForgetStream, Sync, Trim, an Alloc out of memory (reclaim) and Close make that
// synchronize themselves when a parked stream waits for one, unless a capture still holds the
// context (they ask Lists.Captured first, as waitRefused does); Stats and a purge tick release
// those whose synchronize has been made (a tick none while a free parked waits to be cleared:
// parkedClears). Nothing on the hot path (Alloc, Free, FreeAsync) looks at them.
// The synchronize is needed (a destroyed stream's handle is refused, so nothing narrower waits
// for its work) and bounded: made only while an entry not yet passed by one waits (freed false,
// its mark not SyncedSince), one for all of them, none while nothing is parked
// (TestFakeParkedSyncBounded); for ForgetStream(t) of a stream t parked under no handle of t's it
// is not t's need but an early release of the others.
//
// Every walk of the heap's state walks them too: the live blocks and bytes (live, Usage), the
// streams with a heap (Stats), the deferred frees (verify, DeferredByStream), the capture
// checks (heapStreams: a parked handle may name a new stream the heap has not seen) and Close,
// which synchronizes the context for them before it gives anything back.

// parkedStream is what a stream destroyed before its ForgetStream left, parked (see above).
type parkedStream struct {
	s     cuda.Stream            // the handle it had (the driver may have given it to a new stream)
	mark  uint64                 // the points' SyncMark when it was parked
	list  *deferredList          // its deferred frees, or nil (none, or handed back)
	trims *streamq.List[trimReq] // the idle purge's requests for sh, or nil
	sh    *heap.Heap             // its heap, or nil (none, or closed)
	freed bool                   // a synchronize of the context has passed it: its work is done
	scrub bool                   // list's blocks are cleared before they are freed (parkFree)
	// refused says the entry is not a stream's but the free of a held block whose memset the
	// driver refused at its last Release (parkFree): s is the free's stream, not a handle
	// parked, and nothing asks the driver about it.
	refused bool
	// lost says the entry is a heap parked alone for a refusal of its handle (parkHeap; sh nil
	// when the stream had none): until a synchronize of the context passes it, a heap under s
	// is a new stream's (parkRefused).
	lost bool
}

// park moves s's list l (nil: none), the purge's list of s and s's heap out from under the
// handle s, which the driver may give to a new stream, into h.parked (see above). The caller has
// made s forgotten in h.lists (Forget) and could not wait for it. h.mu is held.
func (h *Heap) park(s cuda.Stream, l *deferredList) {
	ps := parkedStream{s: s, mark: h.points().SyncMark()}
	if l != nil {
		h.lists.Park(l)
		ps.list = l
	}
	if tl := h.purge.trims.Forget(streamq.Stream(s)); tl != nil {
		h.purge.trims.Park(tl)
		ps.trims = tl
	}
	ps.sh = h.takeHeap(s)
	h.parked = append(h.parked, ps)
}

// takeHeap takes s's heap (nil: none) out of h.streams and the purge, which then skips its
// requests, for a parked entry. h.mu is held.
func (h *Heap) takeHeap(s cuda.Stream) *heap.Heap {
	sh := h.streams[s]
	if sh != nil {
		delete(h.streams, s)
		delete(h.purge.looks, sh)
		delete(h.passed, sh)
	}
	return sh
}

// parkRefused parks the heaps of the streams destroyed without ForgetStream that a poll of the
// deferred frees or of the purge's requests found refused (the driver refused the handle
// itself) and could not answer with a synchronize of the context (a capture held it, or it
// failed): the driver may give such a handle to a new stream before that synchronize, and the
// new stream must not take the old one's heap (blocks freed on it whose work may still be
// queued), as after a ForgetStream parked. The lists stay: streamq's lists ask a refused
// handle nothing until Recover's synchronize has answered it. A list stays lost, refused, at
// every poll until then: a stream whose heap was parked for the refusal already (parkedLost)
// is skipped, as the heap under its handle now is a new stream's, made since (parking it too
// would leave that stream a new heap, and a new segment, at each Alloc until the capture
// ends). It allocates nothing while no list is lost. h.mu is held.
func (h *Heap) parkRefused() {
	for _, s := range h.purge.trims.RefusedLost(h.lists.RefusedLost(nil)) {
		if !h.parkedLost(cuda.Stream(s)) {
			h.parkHeap(cuda.Stream(s))
		}
	}
}

// parkHeap parks the heap of stream s (if any), whose handle the driver refused, alone
// (park.go): it leaves h.streams and the purge, and is released once a synchronize of the
// context has passed it. h.mu is held.
func (h *Heap) parkHeap(s cuda.Stream) {
	// An entry even when s had no heap: it marks the refusal as met (parkedLost), so that a
	// later poll meeting it does not park the heap a new stream given s's handle makes since.
	h.parked = append(h.parked, parkedStream{s: s, mark: h.points().SyncMark(), sh: h.takeHeap(s), lost: true})
}

// parkedLost reports whether a heap parked under handle s for a refusal of that handle
// (parkHeap) waits still for a synchronize of the context: a refusal it was parked for is not
// answered yet. h.mu is held.
func (h *Heap) parkedLost(s cuda.Stream) bool {
	return h.parkedSyncWaits(func(ps *parkedStream) bool { return ps.s == s && ps.lost })
}

// settleParked releases the parked streams that a synchronize of the context has passed: their
// deferred frees are done, their heaps closed (trimmed while blocks of theirs are live, and
// closed at a later call once none is). With wait, when one has not been passed, it first
// synchronizes the context, unless a CUDA graph capture holds a stream of the heap's or the
// legacy stream (Lists.Captured): then those stay, and the error matches cuda.ErrCapturing;
// when the synchronize fails, they stay, and its error is returned (wrapping ErrDeviceFault
// after a fault). It costs nothing while no stream is parked, and makes that synchronize once
// for the entries parked before it: only an entry parked since needs another.
//
// An entry that stays for a reason of its own (the memset of a held block's free refused again,
// its heap's Close refused) is tried again at every call: its error is returned by the calls
// mine answers true for (nil: every entry), for whom it is their outcome; the others say
// nothing of it (ForgetStream of another stream, Stats), and a later Sync, Trim or Close
// returns it again. An error of a free done (finishDone), which no later call would see again,
// goes to h.parkErr, which the next Sync, Trim or Close returns (takeParkErr). h.mu is held.
func (h *Heap) settleParked(wait bool, mine func(ps *parkedStream) bool) error {
	syncErr, keptErr := h.settleParkedApart(wait, mine)
	if syncErr == nil {
		return keptErr
	}
	if keptErr == nil {
		return syncErr
	}
	return errors.Join(syncErr, keptErr)
}

// settleParkedApart is settleParked, its errors apart: syncErr, its synchronize's, which every
// entry not yet passed by one shares (a capture's refusal, say), and keptErr, those of the
// entries mine answers true for that stay for a reason of their own (a clear refused). Close
// says keptErr with ErrBusy, ForgetStream(s) says syncErr only when an entry parked under s
// waited for it, and Sync and Trim only while one waits for a synchronize still after their
// second settle (parkedSyncWaits). h.mu is held.
func (h *Heap) settleParkedApart(wait bool,
	mine func(ps *parkedStream) bool) (syncErr, keptErr error) {
	if len(h.parked) == 0 {
		return nil, nil
	}
	pts := h.points()
	kept := func(ps *parkedStream, e error) { // an error the entry's next settle meets again
		if mine == nil || mine(ps) {
			keptErr = errors.Join(keptErr, e)
		}
	}
	if wait && slices.ContainsFunc(h.parked, func(ps parkedStream) bool { return !ps.freed && !pts.SyncedSince(ps.mark) }) {
		syncErr = h.syncParked()
	}
	for i := range h.parked {
		ps := &h.parked[i]
		if !ps.freed && !pts.SyncedSince(ps.mark) {
			continue // its destroyed stream's work may still be queued
		}
		if ps.scrub && ps.list != nil {
			if serr := h.scrubParked(ps.list); serr != nil {
				kept(ps, serr)
				continue // parked still: cleared and freed at a later call
			}
		}
		ps.freed = true
		if ps.list != nil {
			h.done = h.lists.Release(ps.list, h.done)
			ps.list = nil
			if ferr := h.finishDone(); ferr != nil {
				what := fmt.Sprintf("deferred frees of destroyed stream %#x", ps.s)
				if ps.refused {
					what = "frees of held blocks made at their last Release"
				}
				h.parkErr = errors.Join(h.parkErr, fmt.Errorf("device: %s: %w", what, ferr))
			}
		}
		if ps.trims != nil {
			h.purge.done = h.purge.trims.Release(ps.trims, h.purge.done)
			ps.trims = nil
			h.purgeDone() // requests for a heap the purge no longer watches: skipped
		}
	}
	h.parked = slices.DeleteFunc(h.parked, func(ps parkedStream) bool {
		if !ps.freed {
			return false
		}
		if ps.sh != nil {
			if ps.sh.Stats().Live > 0 {
				ps.sh.Trim() // its free memory is past every free: to the arena
				return false
			}
			if cerr := ps.sh.Close(); cerr != nil {
				kept(&ps, fmt.Errorf("device: heap of destroyed stream %#x: %w", ps.s, cerr))
				return false
			}
		}
		return true
	})
	return syncErr, keptErr
}

// parkedUnder returns the settleParked filter of the entries parked with handle s (a stream's,
// not a refused free's): ForgetStream(s)'s own.
func parkedUnder(s cuda.Stream) func(ps *parkedStream) bool {
	return func(ps *parkedStream) bool { return ps.s == s && !ps.refused }
}

// parkedSyncWaits reports whether a parked entry that which answers true for (nil: any) waits
// still for a synchronize of the context: none has passed it since it was parked. A synchronize's
// error (settleParked's syncErr) is the outcome of such entries alone. h.mu is held.
func (h *Heap) parkedSyncWaits(which func(ps *parkedStream) bool) bool {
	pts := h.points()
	for i := range h.parked {
		ps := &h.parked[i]
		if !ps.freed && !pts.SyncedSince(ps.mark) && (which == nil || which(ps)) {
			return true
		}
	}
	return false
}

// parkedClears reports whether a parked entry holds frees to clear before they are made
// (Options.ZeroOnFree: scrubParked), which a settle would clear on the legacy stream and wait
// for. h.mu is held.
func (h *Heap) parkedClears() bool {
	return slices.ContainsFunc(h.parked, func(ps parkedStream) bool { return ps.scrub && ps.list != nil })
}

// holdsFrees is the parkedSyncWaits filter of the entries with deferred frees (Sync's).
func holdsFrees(ps *parkedStream) bool {
	n := 0
	if ps.list != nil {
		ps.list.Items(func(marked, open []cuda.DevicePtr) { n += len(marked) + len(open) })
	}
	return n > 0
}

// noneMine is the settleParked filter of a caller that returns no error of the entries (Stats,
// DeferredByStream, and ForgetStream once its stream is forgotten), and of the first of Sync's
// and Trim's two settles: the second tries again what the first kept, and says it.
func noneMine(*parkedStream) bool { return false }

// takeParkErr returns the errors of the parked frees done since the last call (settleParked),
// and forgets them: Sync, Trim and Close report them once. h.mu is held.
func (h *Heap) takeParkErr() error {
	err := h.parkErr
	h.parkErr = nil
	return err
}

// scrubParked clears (Options.ZeroOnFree) the blocks of parked list l, whose stream the
// context's synchronize has passed (parkFree). h.mu is held.
func (h *Heap) scrubParked(l *deferredList) error {
	var ps []cuda.DevicePtr
	l.Items(func(marked, open []cuda.DevicePtr) { ps = append(append(ps, marked...), open...) })
	for _, p := range ps {
		if err := h.scrub(p, nil, parkedLater); err != nil {
			return errkind.Wrapf("device: ", err,
				"device: the free of held block %#x, made at its last Release, waits", p)
		}
	}
	return nil
}

// syncParked synchronizes the context for the parked entries, unless a capture holds a stream
// of the heap's or the legacy stream (see settleParked). Its error names what waits for that
// synchronize (syncWaiters). h.mu is held.
func (h *Heap) syncParked() error {
	what, stay := h.syncWaiters()
	c, held, err := h.lists.WaitAllUncaptured()
	if held {
		return fmt.Errorf("device: %s would end the CUDA graph capture on stream %#x: %w; %s",
			what, c, cuda.ErrCapturing, stay)
	}
	if err != nil {
		if errors.Is(err, cuda.ErrDeviceFault) {
			return fmt.Errorf("%w: %s failed: %w", ErrDeviceFault, what, err)
		}
		return fmt.Errorf("device: %s failed: %w; %s", what, err, stay)
	}
	return nil
}

// syncWaiters says what waits for syncParked's synchronize of the context, the parked streams,
// the held blocks' frees parked after their memset was refused (parkFree), or both, as the
// synchronize (what), and what stays while it is not made (stay). h.mu is held.
func (h *Heap) syncWaiters() (what, stay string) {
	const sync = "the synchronize of the context that waits for "
	const streams, frees = "the work of the streams destroyed before their ForgetStream",
		"the frees of held blocks made at their last Release"
	st := h.parkedSyncWaits(func(ps *parkedStream) bool { return !ps.refused })
	switch fr := h.parkedSyncWaits(func(ps *parkedStream) bool { return ps.refused }); {
	case st && fr:
		return sync + streams + " and " + frees,
			"their deferred frees and memory, and those frees, stay parked"
	case fr:
		return sync + frees, "they stay parked"
	}
	return sync + streams, "their deferred frees and memory stay parked"
}

// parkedAs reports whether a stream parked with handle s waits still. h.mu is held.
func (h *Heap) parkedAs(s cuda.Stream) bool {
	return slices.ContainsFunc(h.parked, func(ps parkedStream) bool { return ps.s == s && !ps.refused })
}

// parkedLive returns the live blocks of the heaps parked with handle s. h.mu is held.
func (h *Heap) parkedLive(s cuda.Stream) uint64 {
	var n uint64
	for _, ps := range h.parked {
		if ps.s == s && ps.sh != nil {
			n += ps.sh.Stats().Live
		}
	}
	return n
}

// parkedFrees returns the number of deferred frees the parked streams hold. h.mu is held.
func (h *Heap) parkedFrees() int {
	n := 0
	for _, ps := range h.parked {
		if ps.list != nil {
			ps.list.Items(func(marked, open []cuda.DevicePtr) { n += len(marked) + len(open) })
		}
	}
	return n
}

// parkedHeaps returns the number of parked heaps. h.mu is held.
func (h *Heap) parkedHeaps() int {
	n := 0
	for _, ps := range h.parked {
		if ps.sh != nil {
			n++
		}
	}
	return n
}

// betweenSettles, when set (by tests), runs in Sync and reclaim (Trim, an Alloc out of memory)
// between their two settles of the parked entries, before the drain.
var betweenSettles func()
