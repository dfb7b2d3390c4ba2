package streamq

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// The lists' waits: lost lists recovered by one synchronize of the context, every stream
// drained, one stream's items released after its synchronize.

// Lost returns the number of lists the polls and drains found lost and Recover has not
// answered.
func (ls *Lists[T]) Lost() int { return len(ls.lost) }

// RefusedLost appends to dst the streams of the lost lists whose handle the driver refused
// (destroyed: List.refused) and that Recover has not answered (a capture put it off, or its
// synchronize failed): the driver may give such a handle to a new stream before Recover can
// answer, so a caller that keeps state of its own under the handle parks it (Park). It is the
// reclaimer's, as Recover is, and allocates nothing while no list is lost.
func (ls *Lists[T]) RefusedLost(dst []Stream) []Stream {
	for _, l := range ls.lost {
		l.mu.Lock()
		if l.refused != nil && !slices.Contains(dst, l.s) {
			dst = append(dst, l.s)
		}
		l.mu.Unlock()
	}
	return dst
}

// Refused reports whether s's list is lost on a refusal of its handle (List.refused) that
// Recover has not answered: the driver may have given the handle to a new stream since, so a
// wait or query of the handle says nothing of the destroyed stream's work, which only a
// synchronize of the context waits for. A caller asks after its wait of the handle: a refusal
// a poll or drain found before the wait ended is seen then (Recover clears it only after its
// synchronize of the context, which waited for the destroyed stream's work too). Safe for
// concurrent use.
func (ls *Lists[T]) Refused(s Stream) bool {
	l := ls.Lookup(s)
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused != nil
}

// Lose keeps l lost for Recover, as a poll that found its stream refused keeps it, for a caller
// whose own wait or query of l's stream the driver refused with err (pinned.Pool's
// ForgetStream, which could not synchronize the context instead): its items wait for Recover's
// synchronize of the context, and when err is a refusal of the handle itself
// (pinmalloc.ErrInvalidHandle: the stream was destroyed) no poll, drain, Idle or Release asks
// the handle about them until then (List.refused), nor does a poll retire the list, so that a
// push of an item recorded on the destroyed stream waits with them: the driver may give the
// handle to a new stream first. It is the reclaimer's, as Recover is.
func (ls *Lists[T]) Lose(l *List[T], err error) {
	l.mu.Lock()
	l.lostOpen = len(l.open)
	l.refusedLoss(err)
	l.mu.Unlock()
	ls.keepLost(l)
}

// NoteRefused notes err, met by a caller's own query of l's stream outside the reclaimer (pinned's
// drainPend), when it is a refusal of the handle itself (pinmalloc.ErrInvalidHandle: the stream
// was destroyed): from then on no poll, drain, Idle or Release asks the handle about l's items,
// and the next poll keeps l lost for Recover's synchronize of the context, as if it had met the
// refusal itself. Without it, a new stream given the handle before that poll would answer for
// the destroyed one's work. A list that has left the lists passes the refusal on to its stream's
// list, as a push follows it (PushKnown: none when the stream was forgotten since and has no
// list). Other errors note nothing. Safe for concurrent use.
func (ls *Lists[T]) NoteRefused(l *List[T], err error) {
	if !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		return
	}
	for {
		l.mu.Lock()
		if !l.gone {
			l.refusedLoss(err)
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		if l = ls.follow(l, true); l == nil {
			return
		}
	}
}

// keepLost keeps l for Recover, once however many polls and drains find it lost before Recover
// (each Recover releases a lost list's items once).
func (ls *Lists[T]) keepLost(l *List[T]) {
	for _, k := range ls.lost {
		if k == l {
			return
		}
	}
	ls.lost = append(ls.lost, l)
}

// Recover answers the lost lists: it synchronizes the context once (Points.WaitAll, which waits
// for the work the refused streams still had), calls after (nil: none), and appends to done
// the items each lost list had when Poll found it lost. When the synchronize fails, the items
// stay and the error is returned; the lists are polled again either way, and those lost on a
// refusal of their handle stay lost (keepRefusedLost: RefusedLost names them). While a capture
// holds a stream of the lists, one of the caller's others (SetOthers) or the legacy stream
// (Captured), whose capture a synchronize of the context would invalidate, it synchronizes
// nothing: the lost lists stay for a later call, and the error, matching
// pinmalloc.ErrCapturing, names that stream.
func (ls *Lists[T]) Recover(done []T, after func()) ([]T, error) {
	if len(ls.lost) == 0 {
		return done, nil
	}
	c, held, err := ls.WaitAllUncaptured()
	if held {
		return done, fmt.Errorf("streamq: the items deferred on %d streams the driver refuses stay: "+
			"a synchronize of the context would end the CUDA graph capture on stream %#x: %w",
			len(ls.lost), c, pinmalloc.ErrCapturing)
	}
	if err != nil {
		err = fmt.Errorf("streamq: the items deferred on %d streams the driver refuses stay: synchronize: %w", len(ls.lost), err)
		ls.keepRefusedLost()
		return done, err
	}
	defer func() {
		clear(ls.lost)
		ls.lost = ls.lost[:0]
	}()
	if after != nil {
		after()
	}
	for _, l := range ls.lost {
		l.mu.Lock()
		n := l.lostOpen // set by the reclaimer's Poll, as this is the reclaimer: it stays
		if l.refused != nil {
			// Answered: the handle's answers count again, for later items, and it may name a
			// new stream, whose order Idle asks anew.
			l.refused = nil
			l.order.Store(orderUnknown)
		}
		l.mu.Unlock()
		done = ls.release(l, n, done)
	}
	return done, nil
}

// keepRefusedLost keeps, of the lost lists, those lost on a refusal of their handle
// (List.refused), after a Recover whose synchronize failed: they wait for the next Recover as
// they would after a capture put it off, and RefusedLost names them meanwhile (a poll finds
// them lost again, asking the handle nothing). The others are forgotten: a later poll asks
// their stream again.
func (ls *Lists[T]) keepRefusedLost() {
	kept := ls.lost[:0]
	for _, l := range ls.lost {
		l.mu.Lock()
		if l.refused != nil {
			kept = append(kept, l)
		}
		l.mu.Unlock()
	}
	clear(ls.lost[len(kept):])
	ls.lost = kept
}

// Reclaim is Poll, then Recover of the lists the poll found lost (after as for Recover): it
// appends to done what the streams have passed. Its error is the poll's when no list was lost;
// none when Recover answered every refusal (the refused streams' items came back), else the
// poll's and Recover's (one matching pinmalloc.ErrCapturing when a capture put Recover off;
// the poll's alone when both say the context's fault: errkind.Once).
// It is the reclaimer's, as Poll is.
func (ls *Lists[T]) Reclaim(done []T, after func()) ([]T, error) {
	done, err := ls.Poll(done)
	if ls.Lost() == 0 {
		return done, err
	}
	done, rerr := ls.Recover(done, after)
	if rerr != nil {
		return done, errkind.Once(err, rerr)
	}
	return done, nil
}

// joinStreams joins errs, each a stream's (Poll's, Drain's), saying a device fault once: the
// context's sticky error fails every stream's call alike, so the first that matches
// pinmalloc.ErrDeviceFault stands for the others, with how many streams met it.
func joinStreams(errs []error) error {
	first, faults := -1, 0
	out := errs[:0]
	for _, err := range errs {
		if errors.Is(err, pinmalloc.ErrDeviceFault) {
			if faults++; faults > 1 {
				continue
			}
			first = len(out)
		}
		out = append(out, err)
	}
	if faults > 1 {
		out[first] = fmt.Errorf("%w (alike on %d streams)", out[first], faults)
	}
	return errors.Join(out...)
}

// Drain waits for the stream of every list with items (a synchronize of each) and appends to done
// the items pushed before its wait; the items pushed while it waits stay for a later call. A stream
// the driver refuses to synchronize keeps its items for Recover (Lost counts it), and its error is
// returned (a device fault said once, as Poll says it), as does one whose handle a caller found
// refused while it waited (NoteRefused: the handle it synchronized may name a new stream since);
// a stream a capture holds
// (Points.Capturing) keeps its items, not lost, and its error (matching pinmalloc.ErrCapturing)
// is returned, and so does a default stream whose point gets no event from the driver
// (cuEventCreate refused: ErrNoEvent), which was not asked. It is the reclaimer's, as Poll is.
func (ls *Lists[T]) Drain(done []T) ([]T, error) {
	var errs []error
	for _, l := range ls.snapshot() {
		l.mu.Lock()
		n, empty, refused := len(l.open), len(l.open)+len(l.marked) == 0, l.refused
		l.mu.Unlock()
		if empty {
			continue
		}
		if refused != nil { // a synchronize of the handle may be another stream's: Recover's
			l.mu.Lock()
			l.lostOpen = max(l.lostOpen, len(l.open)) // each pushed before Recover's synchronize
			l.mu.Unlock()
			ls.keepLost(l)
			errs = append(errs, refused)
			continue
		}
		if err := ls.points.WaitStream(l.s); errors.Is(err, pinmalloc.ErrCapturing) {
			errs = append(errs, err) // its work runs when the user launches the graph: its items stay
			continue
		} else if errors.Is(err, ErrNoEvent) {
			// A default stream's point got no event: the stream was not asked, and is not lost.
			// Its items stay for a later wait or poll: Recover's synchronize of the context would
			// wait for every stream's work, and end a capture on a stream the lists never saw.
			errs = append(errs, fmt.Errorf("streamq: wait for stream %#x: %w", l.s, err))
			continue
		} else if err != nil {
			// Kept for Recover, as a poll keeps a list it finds lost: the point a poll recorded
			// before the stream was destroyed may still answer "not ready", so no poll would.
			err = fmt.Errorf("streamq: wait for stream %#x: %w", l.s, err)
			l.mu.Lock()
			l.lostOpen = n
			l.refusedLoss(err)
			l.mu.Unlock()
			ls.keepLost(l)
			errs = append(errs, err)
			continue
		}
		l.mu.Lock()
		if refused = l.refused; refused != nil {
			// Noted while it waited (NoteRefused, outside the reclaimer): the handle it
			// synchronized may name a new stream, whose wait covers nothing of the old one's.
			l.lostOpen = max(l.lostOpen, n)
		}
		l.mu.Unlock()
		if refused != nil {
			ls.keepLost(l)
			errs = append(errs, refused)
			continue
		}
		done = ls.release(l, n, done) // the open items the wait covers
	}
	ls.endScan()
	return done, joinStreams(errs)
}

// Release appends to done every item of l, whose stream the caller has synchronized after their
// pushes: a stream forgotten (Forget), where no other goroutine pushes on it. When none is left
// it takes l out of the lists. A list lost on a refusal of its handle (a stream destroyed,
// List.refused) that Recover has not answered gives back nothing: the synchronize of a stream
// the driver gave the handle since does not cover the destroyed one's work, and the items
// pushed after the loss may be either stream's. The list stays, lost, for Recover's
// synchronize of the context, which covers every item on it now (its stream then counts as
// not forgotten: it has state).
func (ls *Lists[T]) Release(l *List[T], done []T) []T {
	l.mu.Lock()
	refused := l.refused != nil && !l.gone
	l.mu.Unlock()
	if refused {
		ls.keepRefused(l)
		return done
	}
	return ls.release(l, -1, done)
}

// keepRefused is Release of l, lost on a refusal of its handle: every item stays for Recover,
// which hands back the open ones there are now.
func (ls *Lists[T]) keepRefused(l *List[T]) {
	ls.mu.Lock()
	l.mu.Lock()
	// Every open item was pushed before Recover's synchronize, which covers it; the handle
	// keeps state: a push waits with the list, and the stream is not forgotten.
	l.lostOpen = len(l.open)
	if _, ok := ls.forgot[l.s]; ok {
		delete(ls.forgot, l.s)
		ls.nforgot.Store(int32(len(ls.forgot)))
	}
	l.mu.Unlock()
	ls.mu.Unlock()
	ls.keepLost(l)
}

// release is Release of the marked items and the first n open ones (n < 0: all), those a
// synchronize covers: the open items Poll saw as it found l lost (Recover), or those there were
// before a stream's wait (Drain); a live stream's list gets more meanwhile, and their work may be
// queued after the synchronize.
func (ls *Lists[T]) release(l *List[T], n int, done []T) []T {
	ls.mu.Lock()
	l.mu.Lock()
	open := len(l.open)
	if n >= 0 {
		open = min(open, n)
	}
	l.dropPoint(ls.points)
	done = ls.take(ls.take(done, l.marked, &l.markedT, true), l.open[:open], &l.openT, open == len(l.open))
	l.lostOpen = max(l.lostOpen-open, 0) // the open items a loss saw are the oldest (lose)
	clear(l.marked)
	rest := copy(l.open, l.open[open:])
	clear(l.open[rest:])
	l.open = l.open[:rest]
	l.marked = l.marked[:0]
	gone := !l.gone && len(l.open) == 0
	if gone {
		ls.unlist(l)
	} else if len(l.open) == 0 && ls.parked[l] {
		delete(ls.parked, l) // a parked list released: nothing of it left
	}
	l.mu.Unlock()
	ls.mu.Unlock()
	if gone {
		ls.last.CompareAndSwap(l, nil)
	}
	return done
}

// Park takes l, the list of a stream forgotten (Forget) that its caller can neither synchronize
// nor answer with a synchronize of the context now (a stream destroyed while a CUDA graph capture
// holds another stream), out of the lists with its items: the stream's handle then has no state,
// so that a new stream the driver gives that handle gets a list of its own (its own answer to
// Idle's "non-blocking?", its own points), and a push on l follows to that list. l's items stay
// l's, out of every poll, drain and recovery (a loss Poll found is forgotten: the caller answers
// it), and still count in Weight and Totals (Verify checks them); the caller hands them back with
// Release once the context has been synchronized after the call (Points.SyncedSince), and walks
// them with Items meanwhile. It is the reclaimer's, as Release is.
func (ls *Lists[T]) Park(l *List[T]) {
	ls.mu.Lock()
	l.mu.Lock()
	l.gone = true
	l.left.Store(true)
	l.lostOpen = 0
	l.refused = nil // the caller's synchronize of the context answers it
	if ls.m[l.s] == l {
		delete(ls.m, l.s)
		ls.n.Store(int32(len(ls.m)))
	}
	if len(l.open)+len(l.marked) > 0 {
		ls.addParked(l)
	}
	l.mu.Unlock()
	ls.mu.Unlock()
	ls.last.CompareAndSwap(l, nil)
	if i := slices.Index(ls.lost, l); i >= 0 {
		ls.lost = slices.Delete(ls.lost, i, i+1)
	}
}

// ParkItems returns a new list of stream s holding vs, parked as Park leaves a list: out of the
// lists, its items out of every poll, drain and recovery, for the caller to Release once the
// context has been synchronized after the call. For items that must wait with a stream parked
// already (a device heap's free of a held block, made at its last Release after its stream was
// parked). It is the reclaimer's, as Park is.
func (ls *Lists[T]) ParkItems(s Stream, vs []T) *List[T] {
	l := &List[T]{s: s, gone: true}
	l.left.Store(true)
	l.open = append(l.open, vs...)
	l.openT = ls.measureAll(vs)
	if l.openT.Weight != 0 {
		ls.weight.Add(l.openT.Weight)
	}
	if len(vs) > 0 {
		ls.mu.Lock()
		ls.addParked(l)
		ls.mu.Unlock()
	}
	return l
}

// addParked counts l among the lists parked with items, until its Release. The lists' lock is
// held.
func (ls *Lists[T]) addParked(l *List[T]) {
	if ls.parked == nil {
		ls.parked = map[*List[T]]bool{}
	}
	ls.parked[l] = true
}

// Items calls f with l's items (marked, then open: oldest first) under l's lock; f must not keep
// them nor call the lists. For a list out of the lists (Park), which Range does not walk.
func (l *List[T]) Items(f func(marked, open []T)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l.marked, l.open)
}

// unlist takes l out of the lists: a push then takes a new list for its stream. The lists' lock
// and l's are held.
func (ls *Lists[T]) unlist(l *List[T]) {
	l.marked, l.open, l.gone = nil, nil, true
	l.left.Store(true)
	if ls.m[l.s] != l {
		return
	}
	delete(ls.m, l.s)
	ls.n.Store(int32(len(ls.m)))
	if n := len(ls.m); ls.peak > 64 && 8*n < ls.peak {
		// A Go map keeps its room when emptied, and a walk visits the room: make it again
		// (amortized O(1): it shrank by 8x since the last time).
		ls.m = maps.Clone(ls.m)
		ls.peak = n
	}
}

// WaitAllUncaptured synchronizes the context (Points.WaitAll) unless a capture holds a stream
// the lists know (Captured: returned, held), with the capture gate held from the ask to the
// synchronize (capture.go): a caller about to synchronize the context for a stream the driver
// refuses asks it rather than Captured then WaitAll. It is the reclaimer's, as Poll is.
func (ls *Lists[T]) WaitAllUncaptured() (c Stream, held bool, err error) {
	cuda.HoldCaptureBegins()
	defer cuda.ReleaseCaptureBegins()
	if c, held = ls.Captured(); held {
		return c, true, nil
	}
	return 0, false, ls.points.WaitAll()
}
