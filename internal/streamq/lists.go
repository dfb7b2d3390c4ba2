package streamq

import (
	"iter"
	"sync"
	"sync/atomic"
)

// Deferred lists: items (frees) that wait for a stream, kept per stream, with their points
// taken lazily.
//
// The rule is the one of points.go: an item pushed on stream s is handed back (Poll, Release)
// only after s has passed a point placed after the push: an event recorded after it that has
// completed, or a query that found s idle after it (Points.Idle, which also asks the legacy
// default stream, whose earlier work a blocking stream's points wait for), or a synchronize the
// caller made after it
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
// to be destroyed: the driver may give its handle to a new stream. Park takes a forgotten
// stream's list out of the lists with its items, for a caller that can wait for them only with
// a synchronize of the context it cannot make yet (a stream destroyed during another's capture):
// the handle then has no state, and the items wait for the caller's Release.
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
// synchronizes the whole context once for every lost list and hands back what they had. When
// the driver refused the handle itself (pinmalloc.ErrInvalidHandle: a stream destroyed), no
// later poll or drain asks the handle about the list's items until Recover has answered, nor
// does a poll retire the list: the driver may give the handle to a new stream, whose answers say
// nothing of the old one's work. A caller whose own wait for a stream the driver refused keeps
// the list so with Lose.
//
// A push may find its list gone from the lists (retired, or released by Forget) since its caller
// found it: Push follows it to the stream's new list, made if need be. PushKnown does so unless
// the stream was forgotten since (Forget) and has had no list made for it: it then pushes nothing
// and says so, under the lists' lock, so that a Forget comes wholly before the push (refused: the
// caller frees the item at once, as the stream has passed it) or after it (the item on the list
// Forget returns, for Release). Push makes a list for the forgotten handle there, which the
// driver may give to a new stream: the item waits for that stream's work (or for a synchronize
// of the context, the handle destroyed), the list keeps the old stream's answers (Idle's
// "non-blocking?") for the new one, and the stream no longer counts as forgotten.
//
// Concurrency: Push, PushMany, PushKnown, PushManyKnown, Find, Get, GetKnown, Lookup, Range and
// the totals are safe for concurrent use; Poll, Recover, Captured, Release and Forget are the
// reclaimer's, and their caller runs one at a time. Lock order: the lists' lock, then a list's.

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
	pointOf func(T) Event    // the items' own points (OwnPoints), or nil
	others  iter.Seq[Stream] // the caller's streams a capture check asks too (SetOthers), or nil

	mu     sync.Mutex
	m      map[Stream]*List[T] // under mu: the streams with state
	parked map[*List[T]]bool   // under mu: the lists parked with items (Park), until released
	peak   int                 // the most lists since m was last made, under mu
	n      atomic.Int32        // len(m), read without mu
	last   atomic.Pointer[List[T]]
	weight atomic.Int64 // the items' weight, read without a lock

	scan []*List[T] // Poll's snapshot of the lists
	lost []*List[T] // the lists Poll found lost, for Recover

	forgot  map[Stream]struct{} // under mu: streams forgotten with no list made since (lists_seen.go)
	seen    map[Stream]struct{} // under mu: streams Check accepted, not forgotten since (lists_seen.go)
	seenArr []Stream            // Captured's snapshot of seen
	nforgot atomic.Int32        // len(forgot), read without mu
	checks  atomic.Int64        // streams asked of the driver (Check)
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
	// quiet says that ev was recorded when a query had just found the stream's own work all
	// run (Points.Quiet): it waits only for the work the stream's order puts before it, of the
	// legacy stream for a blocking stream, of the blocking streams for a default one (Settle
	// waits for such points). seq orders the points of every lists on the same Points by their
	// recording (Points.seq).
	quiet bool
	seq   uint64
	// openT and markedT are what open and marked count for (Measure), so that a whole slice
	// leaves at no cost of measuring it again.
	openT, markedT Tally
	gone           bool        // out of the lists: a push takes the stream's new list
	left           atomic.Bool // gone, read without the list's lock (Left)
	idle           int         // polls in a row that found it empty
	// lostOpen is the number of open items when Poll last found the list lost (or a Drain or
	// Release kept a list lost on a refused handle: keepRefused): the synchronize that follows
	// (Recover) covers those, not the ones pushed after them.
	lostOpen int
	// refused is the refusal of the stream's handle itself (pinmalloc.ErrInvalidHandle, said
	// as a poll or a drain said it) that lost the list: the stream was destroyed, and the
	// driver may have given its handle to a new stream since, whose queries, points and
	// synchronizes say nothing of the old one's work. Until Recover's synchronize of the
	// context answers the loss, the list's items get no answer from the handle (refusedLoss).
	refused error
	// order is whether the stream's work is ordered against the legacy stream's, asked of the
	// driver once (Idle): orderUnknown, orderBlocking or orderNonBlocking.
	order atomic.Int32
}

// A list's order.
const (
	orderUnknown = iota
	orderBlocking
	orderNonBlocking
)

// Idle reports whether l's stream has passed everything ordered before now (Points.Idle): its
// own query, and the legacy stream's unless the stream is non-blocking, which it asks the
// driver once per list (a stream destroyed without Forget whose handle the driver gives to a
// new stream keeps the old answer, unless a poll or drain found the handle refused, after
// which Recover has it asked anew: forget a stream before destroying it). A list lost on a
// refusal of its handle (List.refused) is not idle until Recover has answered it: the handle
// may name a new stream now, whose query says nothing of the destroyed one's work; so is a list
// that has left the lists while its stream's list in the lists is lost so (Refused). Safe for
// concurrent use.
func (ls *Lists[T]) Idle(l *List[T]) (bool, error) {
	l.mu.Lock()
	refused, gone := l.refused != nil, l.gone
	l.mu.Unlock()
	if refused || gone && ls.Refused(l.s) {
		return false, nil
	}
	return ls.points.Idle(l.s, ls.nonBlocking(l))
}

// nonBlocking reports whether l's stream was created non-blocking, asking the driver the first
// time (see Idle).
func (ls *Lists[T]) nonBlocking(l *List[T]) bool {
	order := l.order.Load()
	if order == orderUnknown {
		if nb, err := ls.points.NonBlocking(l.s); err == nil {
			order = orderBlocking
			if nb {
				order = orderNonBlocking
			}
			l.order.Store(order)
		}
	}
	return order == orderNonBlocking
}

// Stream is the list's stream.
func (l *List[T]) Stream() Stream { return l.s }

// Left reports whether l has left the lists (a push then follows it to its stream's new list,
// or, with PushKnown, finds its stream forgotten), read without a lock: once true, it stays.
func (l *List[T]) Left() bool { return l.left.Load() }

// NewLists returns empty lists whose points are points'; measure says what an item counts for
// in the totals (nil: nothing), and a list leaves the lists at the linger'th poll in a row that
// finds it empty (at least 1: at once).
func NewLists[T any](points *Points, measure func(T) Tally, linger int) *Lists[T] {
	return &Lists[T]{points: points, measure: measure, linger: max(linger, 1), m: map[Stream]*List[T]{}, forgot: map[Stream]struct{}{}, seen: map[Stream]struct{}{}}
}

// OwnPoints makes the lists use the items' own points: pointOf(v) is an event v's pusher
// recorded on v's stream before the push, after the work v and every item pushed on the stream
// before it wait for, that stays as it is (recorded, not recorded again nor put back) until v
// is handed back; 0 for none (the lists then take a point of their own). Call it before the
// first push.
func (ls *Lists[T]) OwnPoints(pointOf func(T) Event) { ls.pointOf = pointOf }

// SetOthers gives the lists the streams their caller knows beyond the lists' own, which a
// capture check asks too (Captured, and so Recover before its synchronize of the context): a
// stream that may have no list while a capture on it would end at that synchronize (a device
// heap's stream heaps, whose lists leave at linger polls). others is called by the reclaimer,
// under whatever guards what it walks. Call it before the first poll.
func (ls *Lists[T]) SetOthers(others iter.Seq[Stream]) { ls.others = others }

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
	return ls.getLocked(s)
}

// GetKnown is Get unless s is forgotten (Forgotten): then it makes no list and returns nil. The
// look and the making are one step under the lists' lock, so that a Forget comes before both
// (nil) or after both (the list made, which Forget returns): a caller that looked with
// Forgotten and then called Get made a list for a stream forgotten in between, and so forgot
// that it was forgotten. Safe for concurrent use.
func (ls *Lists[T]) GetKnown(s Stream) *List[T] {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.m[s]; l != nil {
		return l
	}
	if _, forgot := ls.forgot[s]; forgot {
		return nil
	}
	return ls.getLocked(s)
}

// getLocked is Get, under the lists' lock.
func (ls *Lists[T]) getLocked(s Stream) *List[T] {
	if l := ls.m[s]; l != nil {
		return l
	}
	l := &List[T]{s: s}
	ls.m[s] = l
	ls.n.Store(int32(len(ls.m)))
	if len(ls.forgot) > 0 { // a list for s: s is seen again (lists_seen.go)
		delete(ls.forgot, s)
		ls.nforgot.Store(int32(len(ls.forgot)))
	}
	ls.peak = max(ls.peak, len(ls.m))
	return l
}

// Streams returns the number of streams with state, read without a lock.
func (ls *Lists[T]) Streams() int { return int(ls.n.Load()) }

// Totals returns the sum of Measure over the items on the lists, the parked ones' included
// (Park), a list at a time under its lock (not for a hot path).
func (ls *Lists[T]) Totals() Tally {
	var sum Tally
	ls.mu.Lock()
	for _, l := range ls.m {
		l.mu.Lock()
		sum = sum.plus(l.openT).plus(l.markedT)
		l.mu.Unlock()
	}
	for l := range ls.parked {
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
	ls.PushMany(l, []T{v}) // a slice of one on the stack: PushMany keeps vs no longer than the call
}

// PushMany is Push of vs, under one lock.
func (ls *Lists[T]) PushMany(l *List[T], vs []T) { ls.push(l, vs, false) }

// PushKnown is Push of v, unless l has left the lists and its stream was forgotten since (Forget)
// with no list made for it: then it pushes nothing and returns false, and the stream has passed
// what v waits for (its user said so at Forget), so the caller hands v back itself. See above.
func (ls *Lists[T]) PushKnown(l *List[T], v T) bool {
	return ls.push(l, []T{v}, true) // on the stack, as for Push
}

// PushManyKnown is PushKnown of vs, under one lock: all pushed, or none.
func (ls *Lists[T]) PushManyKnown(l *List[T], vs []T) bool { return ls.push(l, vs, true) }

// push is PushMany, or with known PushManyKnown.
func (ls *Lists[T]) push(l *List[T], vs []T, known bool) bool {
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
			return true
		}
		l.mu.Unlock()
		if l = ls.follow(l, known); l == nil {
			return false
		}
	}
}

// follow returns the list that takes the place of l, which left the lists; with known, nil when
// l's stream was forgotten since and has no list (GetKnown).
func (ls *Lists[T]) follow(l *List[T], known bool) *List[T] {
	var next *List[T]
	if known {
		if next = ls.GetKnown(l.s); next == nil {
			return nil
		}
	} else {
		next = ls.Get(l.s)
	}
	ls.last.CompareAndSwap(l, next)
	return next
}
