package streamq

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
)

// Deferred lists: items (frees) that wait for a stream, kept per stream, with their points
// taken lazily.
//
// The rule is the one of points.go: an item pushed on stream s is handed back (Poll, Release)
// only after s has passed a point placed after the push: an event recorded after it that has
// completed, or a query that found s idle after it, or a synchronize the caller made after it
// (Release). A push costs no driver call. A poll gives a stream's open items (pushed since its
// last point) a point only when they have none: none at all when the stream is idle (they are
// done), else one event for all of them, and no other until that one has completed, so that a
// stuck stream costs one event however long it is stuck, and each stream's items wait for
// that stream alone.
//
// A list exists while its stream has items, and a little longer: a poll that finds a list
// empty for the linger'th time in a row takes it out (the poll that empties it counts), so
// that a stream used between every two polls keeps its list (and its caller's check with the
// driver), and a stream no longer used costs nothing after linger polls. Every call costs O(1)
// in the number of streams: a map lookup under the lists' lock when the stream is not the one
// found last, an insert for a new one. Forget drops a stream's state at once, for a stream about
// to be destroyed: the driver may give its handle to a new stream.
//
// Items may carry their own points (OwnPoints): an event the pusher recorded on the stream
// before the push, after the work the item and every item pushed on the stream before it wait
// for (a batch's event, which the caller needs for its own waits anyway). A poll then gives a
// stream's open items, when they have no point, the newest one's own point: passed, they are
// all done; else it becomes the list's point, borrowed: the lists query it and never record,
// put back or keep it past the moment its item is handed back (its owner's from then on). Such
// a stream costs a poll one query of an event and no event of the lists' own.
//
// A stream the driver refuses (destroyed while items waited on it) cannot take a point: Poll
// keeps its list aside as lost, with the number of open items it had then, and Recover
// synchronizes the whole context once for every lost list and hands back what they had.
//
// Concurrency: Push, PushMany, Find, Get, Lookup, Range and the totals are safe for concurrent
// use; Poll, Recover, Release and Forget are the reclaimer's, and their caller runs one at a
// time. Lock order: the lists' lock, then a list's.

// Tally is what an item counts for in a Lists' totals (Measure): items, bytes and a weight, all
// the caller's to define; an item counted elsewhere counts for nothing.
type Tally struct {
	Items, Bytes, Weight int64
}

// Lists keeps items of type T deferred per stream, in the order of each stream.
type Lists[T any] struct {
	points  *Points
	measure func(T) Tally
	linger  int
	pointOf func(T) Event // the items' own points (OwnPoints), or nil

	mu     sync.Mutex
	m      map[Stream]*List[T] // under mu: the streams with state
	peak   int                 // the most lists since m was last made, under mu
	n      atomic.Int32        // len(m), read without mu
	last   atomic.Pointer[List[T]]
	weight atomic.Int64 // the items' weight, read without a lock

	scan []*List[T] // Poll's snapshot of the lists
	lost []*List[T] // the lists Poll found lost, for Recover
}

// List is the items deferred on one stream: open ones, pushed since its point was placed, and
// marked ones, pushed before it. A stream has one point at most.
type List[T any] struct {
	s      Stream
	mu     sync.Mutex
	open   []T
	marked []T
	ev     Event // the point, recorded after marked were pushed; 0 for none
	// borrowed says that ev is the newest marked item's own point (OwnPoints), not the lists':
	// it leaves with that item and never goes back to the pool from here.
	borrowed bool
	// openT and markedT are what open and marked count for (Measure), so that a whole slice
	// leaves at no cost of measuring it again.
	openT, markedT Tally
	gone           bool // out of the lists: a push takes the stream's new list
	idle           int  // polls in a row that found it empty
	// lostOpen is the number of open items when Poll last found the list lost, or when Drain
	// began its wait: the synchronize that follows (Recover, Drain) covers those, not the ones
	// pushed after them.
	lostOpen int
}

// Stream is the list's stream.
func (l *List[T]) Stream() Stream { return l.s }

// NewLists returns empty lists whose points are points'; measure says what an item counts for
// in the totals (nil: nothing), and a list leaves the lists at the linger'th poll in a row that
// finds it empty (at least 1: at once).
func NewLists[T any](points *Points, measure func(T) Tally, linger int) *Lists[T] {
	return &Lists[T]{points: points, measure: measure, linger: max(linger, 1), m: map[Stream]*List[T]{}}
}

// OwnPoints makes the lists use the items' own points: pointOf(v) is an event v's pusher
// recorded on v's stream before the push, after the work v and every item pushed on the stream
// before it wait for, that stays as it is (recorded, not recorded again nor put back) until v
// is handed back; 0 for none (the lists then take a point of their own). Call it before the
// first push.
func (ls *Lists[T]) OwnPoints(pointOf func(T) Event) { ls.pointOf = pointOf }

// Points returns the lists' points.
func (ls *Lists[T]) Points() *Points { return ls.points }

// SetPoints replaces the lists' points (tests: points that the driver refuses).
func (ls *Lists[T]) SetPoints(p *Points) { ls.points = p }

// Find returns the list of s found last (it may have left the lists: a push follows it to the
// stream's new list), or the lists' own; nil when s has none.
func (ls *Lists[T]) Find(s Stream) *List[T] {
	if l := ls.last.Load(); l != nil && l.s == s {
		return l
	}
	return ls.Lookup(s)
}

// Last returns the list found last (Found), or nil.
func (ls *Lists[T]) Last() *List[T] { return ls.last.Load() }

// Found makes l the list found last.
func (ls *Lists[T]) Found(l *List[T]) { ls.last.Store(l) }

// Lookup returns the list of s in the lists, or nil.
func (ls *Lists[T]) Lookup(s Stream) *List[T] {
	ls.mu.Lock()
	l := ls.m[s]
	ls.mu.Unlock()
	return l
}

// Get returns the list of s, made when there is none.
func (ls *Lists[T]) Get(s Stream) *List[T] {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.m[s]; l != nil {
		return l
	}
	l := &List[T]{s: s}
	ls.m[s] = l
	ls.n.Store(int32(len(ls.m)))
	ls.peak = max(ls.peak, len(ls.m))
	return l
}

// Streams returns the number of streams with state, read without a lock.
func (ls *Lists[T]) Streams() int { return int(ls.n.Load()) }

// Totals returns the sum of Measure over the items on the lists, a list at a time under its
// lock (not for a hot path).
func (ls *Lists[T]) Totals() Tally {
	var sum Tally
	ls.mu.Lock()
	for _, l := range ls.m {
		l.mu.Lock()
		sum = sum.plus(l.openT).plus(l.markedT)
		l.mu.Unlock()
	}
	ls.mu.Unlock()
	return sum
}

// Weight returns the total weight of the items on the lists, read without a lock.
func (ls *Lists[T]) Weight() int64 { return ls.weight.Load() }

// plus returns t+u.
func (t Tally) plus(u Tally) Tally {
	return Tally{Items: t.Items + u.Items, Bytes: t.Bytes + u.Bytes, Weight: t.Weight + u.Weight}
}

// minus returns t-u.
func (t Tally) minus(u Tally) Tally {
	return Tally{Items: t.Items - u.Items, Bytes: t.Bytes - u.Bytes, Weight: t.Weight - u.Weight}
}

// measureAll sums measure over vs.
func (ls *Lists[T]) measureAll(vs []T) Tally {
	var t Tally
	if ls.measure == nil {
		return t
	}
	for _, v := range vs {
		t = t.plus(ls.measure(v))
	}
	return t
}

// Push adds v to the open items of l, or of the list that took l's place when l left the
// lists: v is handed back once l's stream has passed a point placed after the call.
func (ls *Lists[T]) Push(l *List[T], v T) {
	var t Tally
	if ls.measure != nil {
		t = ls.measure(v)
	}
	for {
		l.mu.Lock()
		if !l.gone {
			l.open = append(l.open, v)
			l.idle = 0
			l.openT = l.openT.plus(t)
			if t.Weight != 0 {
				ls.weight.Add(t.Weight)
			}
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		l = ls.follow(l)
	}
}

// PushMany is Push of vs, under one lock.
func (ls *Lists[T]) PushMany(l *List[T], vs []T) {
	t := ls.measureAll(vs)
	for {
		l.mu.Lock()
		if !l.gone {
			l.open = append(l.open, vs...)
			l.idle = 0
			l.openT = l.openT.plus(t)
			if t.Weight != 0 {
				ls.weight.Add(t.Weight)
			}
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		l = ls.follow(l)
	}
}

// follow returns the list that takes the place of l, which left the lists.
func (ls *Lists[T]) follow(l *List[T]) *List[T] {
	next := ls.Get(l.s)
	ls.last.CompareAndSwap(l, next)
	return next
}

// pollState is what poll found of a list.
type pollState int

const (
	pollBusy pollState = iota // items wait, or it is not empty for linger polls yet
	pollIdle                  // empty at linger polls in a row: retire it
	pollLost                  // the driver refuses its stream or its event
)

// Poll appends to done the items whose stream has passed their point, on every list, oldest
// first per stream, and gives the open items of a busy stream a point when it has none. A list
// the driver refuses is kept aside for Recover (Lost counts them), its error returned. A list
// found empty at linger polls in a row leaves the lists.
func (ls *Lists[T]) Poll(done []T) ([]T, error) {
	ls.mu.Lock()
	for _, l := range ls.m {
		ls.scan = append(ls.scan, l)
	}
	ls.mu.Unlock()
	var errs []error
	for _, l := range ls.scan {
		var st pollState
		var err error
		switch done, st, err = ls.poll(l, done); st {
		case pollLost:
			ls.lost = append(ls.lost, l)
			errs = append(errs, err)
		case pollIdle:
			ls.retire(l)
		}
	}
	clear(ls.scan)
	ls.scan = ls.scan[:0]
	return done, errors.Join(errs...)
}

// poll is Poll of l.
func (ls *Lists[T]) poll(l *List[T], done []T) ([]T, pollState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := ls.points
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
		own := ls.ownPoint(l.open)
		var idle bool
		var err error
		if own != 0 {
			idle, err = p.Passed(own) // every open item's work is before it
		} else {
			idle, err = p.Idle(l.s)
		}
		switch {
		case err != nil:
			return done, l.lose(), fmt.Errorf("streamq: stream %#x: %w", l.s, err)
		case idle: // everything queued on it has completed
			done = ls.take(done, l.open, &l.openT, true)
			clear(l.open)
			l.open = l.open[:0]
		default:
			ev := own
			if own == 0 {
				if ev, err = p.Mark(l.s); err != nil {
					return done, l.lose(), fmt.Errorf("streamq: stream %#x: event: %w", l.s, err)
				}
			}
			l.ev, l.borrowed = ev, own != 0
			l.open, l.marked = l.marked, l.open
			l.openT, l.markedT = l.markedT, l.openT
			return done, pollBusy, nil
		}
	}
	if len(l.marked) == 0 {
		if l.idle++; l.idle >= ls.linger {
			return done, pollIdle, nil
		}
	}
	return done, pollBusy, nil
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
	l.ev, l.borrowed = 0, false
}

// lose notes how many open items l has as poll finds it lost. l.mu is held.
func (l *List[T]) lose() pollState {
	l.lostOpen = len(l.open)
	return pollLost
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

// Lost returns the number of lists the polls found lost and Recover has not answered.
func (ls *Lists[T]) Lost() int { return len(ls.lost) }

// Recover answers the lost lists: it synchronizes the context once (Points.WaitAll, which waits
// for the work the refused streams still had), calls after (nil: none), and appends to done
// the items each lost list had when Poll found it lost. When the synchronize fails, the items
// stay and the error is returned; the lists are polled again either way.
func (ls *Lists[T]) Recover(done []T, after func()) ([]T, error) {
	if len(ls.lost) == 0 {
		return done, nil
	}
	defer func() {
		clear(ls.lost)
		ls.lost = ls.lost[:0]
	}()
	if err := ls.points.WaitAll(); err != nil {
		return done, fmt.Errorf("streamq: the items deferred on %d streams the driver refuses stay: synchronize: %w", len(ls.lost), err)
	}
	if after != nil {
		after()
	}
	for _, l := range ls.lost {
		done = ls.Release(l, false, done)
	}
	return done, nil
}

// Drain waits for the stream of every list with items (a synchronize of each) and appends to
// done the items pushed before its wait; the items pushed while it waits stay for a later call.
// A stream the driver refuses to synchronize keeps its items, and its error is returned. It is
// the reclaimer's, as Poll is.
func (ls *Lists[T]) Drain(done []T) ([]T, error) {
	ls.mu.Lock()
	for _, l := range ls.m {
		ls.scan = append(ls.scan, l)
	}
	ls.mu.Unlock()
	var errs []error
	for _, l := range ls.scan {
		l.mu.Lock()
		n, empty := len(l.open), len(l.open)+len(l.marked) == 0
		l.mu.Unlock()
		if empty {
			continue
		}
		if err := ls.points.WaitStream(l.s); err != nil {
			errs = append(errs, fmt.Errorf("streamq: wait for stream %#x: %w", l.s, err))
			continue
		}
		l.mu.Lock()
		l.lostOpen = n // the open items the wait covers (Release)
		l.mu.Unlock()
		done = ls.Release(l, false, done)
	}
	clear(ls.scan)
	ls.scan = ls.scan[:0]
	return done, errors.Join(errs...)
}

// Release appends to done the items of l its stream has passed, by a synchronize of the
// stream or the context that followed their pushes: with all every one (a stream forgotten,
// where no other goroutine pushes on it), else the marked ones and the open ones Poll saw as it
// found l lost, before the synchronize (a live stream's list whose event the driver refused gets
// more since, and their work may be queued after the synchronize). When none is left it takes l
// out of the lists.
func (ls *Lists[T]) Release(l *List[T], all bool, done []T) []T {
	ls.mu.Lock()
	l.mu.Lock()
	open := len(l.open)
	if !all {
		open = min(open, l.lostOpen)
	}
	l.dropPoint(ls.points)
	done = ls.take(ls.take(done, l.marked, &l.markedT, true), l.open[:open], &l.openT, open == len(l.open))
	clear(l.marked)
	rest := copy(l.open, l.open[open:])
	clear(l.open[rest:])
	l.open = l.open[:rest]
	l.marked = l.marked[:0]
	gone := !l.gone && len(l.open) == 0
	if gone {
		ls.unlist(l)
	}
	l.mu.Unlock()
	ls.mu.Unlock()
	if gone {
		ls.last.CompareAndSwap(l, nil)
	}
	return done
}

// Forget is the start of forgetting stream s, which the caller is about to synchronize and
// destroy: the list found last stops standing for s (a new stream may get its handle), and it
// returns s's list in the lists, or nil, for Release(l, true, ...) once s is synchronized.
func (ls *Lists[T]) Forget(s Stream) *List[T] {
	if l := ls.last.Load(); l != nil && l.s == s {
		ls.last.CompareAndSwap(l, nil)
	}
	return ls.Lookup(s)
}

// unlist takes l out of the lists: a push then takes a new list for its stream. The lists' lock
// and l's are held.
func (ls *Lists[T]) unlist(l *List[T]) {
	l.marked, l.open, l.gone = nil, nil, true
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

// Range calls f with each list's stream and items (marked, then open: oldest first), a list at
// a time under its lock; f must not keep items nor call the lists.
func (ls *Lists[T]) Range(f func(s Stream, marked, open []T)) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for s, l := range ls.m {
		l.mu.Lock()
		f(s, l.marked, l.open)
		l.mu.Unlock()
	}
}

// Verify checks, with the lists' lock and every list's held, that each list is the entry of
// its stream and in the lists, that it has an event exactly when it has marked items (a
// borrowed one the newest marked item's own point), and that the totals are those of the
// items; it calls f (nil: none) with each list's items, for the caller's own checks, while the
// locks are held.
func (ls *Lists[T]) Verify(f func(s Stream, marked, open []T)) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if int(ls.n.Load()) != len(ls.m) {
		return fmt.Errorf("streamq: invariant: %d lists counted, %d lists", ls.n.Load(), len(ls.m))
	}
	var sum Tally
	for s, l := range ls.m {
		if l.s != s { // before its lock: a list under two keys is locked once
			return fmt.Errorf("streamq: invariant: the list of stream %#x is of %#x", s, l.s)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.gone {
			return fmt.Errorf("streamq: invariant: the list of stream %#x left the lists", s)
		}
		if (l.ev != 0) != (len(l.marked) > 0) {
			return fmt.Errorf("streamq: invariant: stream %#x: event %#x with %d marked items", s, l.ev, len(l.marked))
		}
		if l.borrowed && (ls.pointOf == nil || len(l.marked) == 0 || l.ev != ls.pointOf(l.marked[len(l.marked)-1])) {
			return fmt.Errorf("streamq: invariant: stream %#x: borrowed point %#x is not the newest marked item's own", s, l.ev)
		}
		if ls.measureAll(l.marked) != l.markedT || ls.measureAll(l.open) != l.openT {
			return fmt.Errorf("streamq: invariant: stream %#x counts %+v marked and %+v open, holds %+v and %+v", s, l.markedT, l.openT, ls.measureAll(l.marked), ls.measureAll(l.open))
		}
		sum = sum.plus(l.markedT).plus(l.openT)
		if f != nil {
			f(s, l.marked, l.open)
		}
	}
	if sum.Weight != ls.weight.Load() {
		return fmt.Errorf("streamq: invariant: weight %d, the items weigh %d", ls.weight.Load(), sum.Weight)
	}
	return nil
}
