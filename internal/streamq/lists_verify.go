package streamq

import (
	"fmt"
)

// The lists seen whole: each list's items (Range) and the invariants (Verify).

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
// items, the parked lists' (Park) included, each out of the lists; it calls f (nil: none) with
// each list's items, not the parked ones' (Items walks those), for the caller's own checks,
// while the locks are held.
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
	for l := range ls.parked {
		l.mu.Lock()
		defer l.mu.Unlock()
		if !l.gone || ls.m[l.s] == l {
			return fmt.Errorf("streamq: invariant: the parked list of stream %#x is in the lists", l.s)
		}
		if (l.ev != 0) != (len(l.marked) > 0) {
			return fmt.Errorf("streamq: invariant: parked stream %#x: event %#x with %d marked items", l.s, l.ev, len(l.marked))
		}
		if ls.measureAll(l.marked) != l.markedT || ls.measureAll(l.open) != l.openT {
			return fmt.Errorf("streamq: invariant: parked stream %#x counts %+v marked and %+v open, holds %+v and %+v", l.s, l.markedT, l.openT, ls.measureAll(l.marked), ls.measureAll(l.open))
		}
		sum = sum.plus(l.markedT).plus(l.openT)
	}
	if sum.Weight != ls.weight.Load() {
		return fmt.Errorf("streamq: invariant: weight %d, the items weigh %d", ls.weight.Load(), sum.Weight)
	}
	return nil
}
