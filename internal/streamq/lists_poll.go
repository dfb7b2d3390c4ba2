package streamq

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Polls of the lists (lists.go has their rule): what the streams have passed handed back,
// a busy stream's new items given a point, an empty list retired.

// pollState is what poll found of a list.
type pollState int

const (
	pollBusy pollState = iota // items wait, or it is not empty for linger polls yet
	pollIdle                  // empty at linger polls in a row: retire it
	pollLost                  // the driver refuses its stream or its event
)

// Poll appends to done the items whose stream has passed their point, on every list, oldest
// first per stream, and gives the open items of a busy stream a point when it has none. A list
// the driver refuses is kept aside for Recover (Lost counts them), its error returned (a device
// fault, which every stream's call meets, said once, with how many streams met it). A busy
// stream whose point gets no event from the driver (cuEventCreate refused: ErrNoEvent) is not
// refused: its items wait, with no error, for a later poll. A list found empty at linger polls
// in a row leaves the lists.
//
// The default streams' lists come last: a point a poll records in the legacy stream waits for
// every blocking stream's earlier work, and a blocking stream asked after it would find it in
// flight (Points.Idle asks the legacy stream) and get a point of its own where it is idle.
func (ls *Lists[T]) Poll(done []T) ([]T, error) {
	var errs []error
	lists := ls.snapshot()
	for _, l := range lists {
		if !DefaultStream(l.s) {
			done, errs = ls.pollList(l, done, errs)
		}
	}
	for _, l := range lists {
		if DefaultStream(l.s) {
			done, errs = ls.pollList(l, done, errs)
		}
	}
	ls.endScan()
	return done, joinStreams(errs)
}

// pollList is Poll of l: a list the driver refuses is kept for Recover, its error appended to
// errs, and one found empty at linger polls in a row leaves the lists.
func (ls *Lists[T]) pollList(l *List[T], done []T, errs []error) ([]T, []error) {
	done, st, err := ls.poll(l, done)
	switch st {
	case pollLost:
		ls.keepLost(l)
		errs = append(errs, err)
	case pollIdle:
		ls.retire(l)
	}
	return done, errs
}

// snapshot returns the lists, taken under the lists' lock into ls.scan, for a walk that takes
// each list's lock alone (Poll, Drain: the reclaimer's); endScan ends the walk.
func (ls *Lists[T]) snapshot() []*List[T] {
	ls.mu.Lock()
	for _, l := range ls.m {
		ls.scan = append(ls.scan, l)
	}
	ls.mu.Unlock()
	return ls.scan
}

// endScan empties ls.scan, keeping its room.
func (ls *Lists[T]) endScan() {
	clear(ls.scan)
	ls.scan = ls.scan[:0]
}

// poll is Poll of l.
func (ls *Lists[T]) poll(l *List[T], done []T) ([]T, pollState, error) {
	cuda.HoldCaptureBegins() // from the ask whether l.s captures to the last act it allows
	defer cuda.ReleaseCaptureBegins()
	l.mu.Lock() // after the gate, always: a begin waiting would stop a hold taken under l.mu
	defer l.mu.Unlock()
	p := ls.points
	if (l.ev != 0 || len(l.open) > 0) && p.Capturing(l.s) {
		// A capture holds the stream: it is busy, its point (recorded before the capture, or
		// an item's own, maybe in it) is not asked, and it gets none (capture.go).
		return done, pollBusy, nil
	}
	if l.ev != 0 {
		passed, err := p.Passed(l.ev)
		if err != nil {
			return done, l.lose(), fmt.Errorf("streamq: stream %#x: %w", l.s, err)
		}
		if !passed {
			return done, pollBusy, nil
		}
		done = ls.take(done, l.marked, &l.markedT, true)
		l.dropPoint(p)
		clear(l.marked)
		l.marked = l.marked[:0]
	}
	if len(l.open) > 0 {
		if l.refused != nil { // the handle may name another stream now: Recover answers
			return done, l.lose(), l.refused // its synchronize covers every open item now
		}
		idle, ev, borrowed, quiet, err := ls.pointFor(l)
		if errors.Is(err, ErrNoEvent) {
			// The driver made no event for the point: the stream was not asked, and is not
			// lost. Its items wait, open, for a later poll's point (a wait's synchronize of the
			// stream takes them meanwhile): Recover's synchronize of the context would wait for
			// every stream's work, and end a capture on a stream the lists never saw.
			return done, pollBusy, nil
		}
		if err != nil {
			err = fmt.Errorf("streamq: stream %#x: %w", l.s, err)
			l.refusedLoss(err)
			return done, l.lose(), err
		}
		if !idle && ev == 0 {
			return done, pollBusy, nil // a capture began, by other code than ours: capture.go
		}
		if !idle {
			l.ev, l.borrowed, l.quiet = ev, borrowed, quiet
			l.seq = p.seq.Add(1)
			l.open, l.marked = l.marked, l.open
			l.openT, l.markedT = l.markedT, l.openT
			l.lostOpen = 0 // the open items a loss saw are marked now: Recover takes them so
			return done, pollBusy, nil
		}
		done = ls.take(done, l.open, &l.openT, true) // everything queued on it has completed
		clear(l.open)
		l.open = l.open[:0]
		l.lostOpen = 0
	}
	if len(l.marked) == 0 && l.refused == nil { // a refused list waits for Recover (Lose)
		if l.idle++; l.idle >= ls.linger {
			return done, pollIdle, nil
		}
	}
	return done, pollBusy, nil
}

// pointFor reports whether l's stream has passed l's open items now, and gives them a point
// when it has not: the newest item's own point (borrowed), else an event recorded now. A
// default stream, which no query finds idle (Points.Idle), is asked by querying that event at
// once. quiet says the stream's own work had all run when it was recorded (the query that
// asked whether it was idle: Points.IdleQuiet), so that it waits only for the work the
// stream's order puts before it (Settle). No point and not idle: a capture holds the stream
// now (begun by code that does not wait for the capture gate). The gate and l.mu are held.
func (ls *Lists[T]) pointFor(l *List[T]) (idle bool, ev Event, borrowed, quiet bool, err error) {
	p := ls.points
	if own := ls.ownPoint(l.open); own != 0 {
		idle, err = p.Passed(own) // every open item's work is before it
		return idle, own, true, false, err
	}
	if idle, quiet, err = p.idleQuiet(l.s, ls.nonBlocking(l)); err != nil || idle {
		return idle, 0, false, false, err
	}
	var held bool
	if ev, held, err = p.mark(l.s); err != nil || held {
		if err != nil && !errors.Is(err, ErrNoEvent) { // that one poll answers (above)
			err = fmt.Errorf("event: %w", err)
		}
		return false, 0, false, false, err
	}
	if DefaultStream(l.s) {
		if idle, err = p.Passed(ev); err != nil || idle {
			p.Put(ev)
			return idle, 0, false, false, err
		}
	}
	return false, ev, false, quiet, nil
}

// ownPoint returns the own point of the newest of open (OwnPoints), or 0.
func (ls *Lists[T]) ownPoint(open []T) Event {
	if ls.pointOf == nil {
		return 0
	}
	return ls.pointOf(open[len(open)-1])
}

// dropPoint lets go of l's point: back to the pool when it is the lists' own, left to its item
// when borrowed. l.mu is held.
func (l *List[T]) dropPoint(p *Points) {
	if l.ev != 0 && !l.borrowed {
		p.Put(l.ev)
	}
	l.ev, l.borrowed, l.quiet = 0, false, false
}

// lose notes how many open items l has as poll finds it lost. l.mu is held. The count is
// kept in step with the open items leaving the list (marked or handed back by a later poll,
// released by Drain): it counts the oldest open items, those pushed before the loss, and a
// count left as it was would make Recover hand back newer ones, pushed while its synchronize
// ran, in their place.
func (l *List[T]) lose() pollState {
	l.lostOpen = len(l.open)
	return pollLost
}

// refusedLoss notes err, the loss of l, as a refusal of its stream's handle (List.refused)
// when it is one: the open items then wait for Recover's synchronize of the context, not for
// a query, point or synchronize of a handle the driver may have given to a new stream. l.mu
// is held.
func (l *List[T]) refusedLoss(err error) {
	if errors.Is(err, pinmalloc.ErrInvalidHandle) {
		l.refused = err
	}
}

// take appends vs, leaving their list, to done, and takes t, what they count for, off the
// list's count (*from: all of it when vs is the whole slice, whole). The list's lock is held.
func (ls *Lists[T]) take(done, vs []T, from *Tally, whole bool) []T {
	t := *from
	if !whole {
		t = ls.measureAll(vs)
	}
	*from = from.minus(t)
	if t.Weight != 0 {
		ls.weight.Add(-t.Weight)
	}
	return append(done, vs...)
}

// retire takes l out of the lists if it is still idle.
func (ls *Lists[T]) retire(l *List[T]) {
	ls.mu.Lock()
	l.mu.Lock()
	if !l.gone && len(l.open) == 0 && len(l.marked) == 0 && l.idle >= ls.linger {
		ls.unlist(l)
	}
	l.mu.Unlock()
	ls.mu.Unlock()
}
