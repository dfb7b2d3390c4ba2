package streamq

import (
	"errors"
	"fmt"
	"slices"
)

// Settling: every item handed back at once, for a caller about to let go of all the memory
// its items and its streams may use (device.Heap's Close), or told that a stream still has
// work in flight.
//
// A poll cannot do it: the legacy default stream is never found idle by a query (its work
// waits for every blocking stream's, which no query sees), so its items get an event, and an
// event recorded now is not passed yet when the caller looks, however idle the device (for a
// few microseconds on a GPU; under the fake driver's Hold until something synchronizes). The
// caller cannot tell that event from the user's work, and would report work in flight that
// is its own point. Settle asks the streams first: when none the caller can see has work in
// flight, a point it then records waits only for work that has run, or for work of blocking
// streams the caller never saw, which the legacy stream's order puts before it (and which the
// memory must wait for: a free there comes after it, as cudaFreeAsync's does). So it waits
// for that point (cuEventSynchronize), and for no point it did not record itself.
//
// The same holds of a point an earlier poll recorded in the legacy stream after the caller's
// last wait: in flight, it makes the legacy stream's query say running. A poll queries the
// legacy stream just before it records such a point; found idle, the point is quiet
// (List.quiet): the legacy stream's own work before it had all run, and it waits only for
// blocking streams' earlier work. When the legacy stream is the one found running, every
// other stream idle (Running asks them first), Settle waits for the quiet points and asks
// again: they wait for no work of the caller's streams (idle) and for no work of the legacy
// stream's (run before them), only for unseen blocking streams' work, as its own point does.
// The one exception is work another goroutine queues in the legacy stream between the poll's
// query and its point, which Settle then waits for instead of saying running; the memory is
// safe either way, as the decision to hand items back is still the second Running's.

// Settle hands back every item of the lists when no stream that may use them has work in
// flight: it asks Points.Running of the lists' streams and of ss (the caller's other
// streams, such as those with memory of their own freed in their own order), so of the
// legacy default stream too when one of them is blocking or a default stream; the legacy
// stream found running, the others idle, it waits for the points its polls recorded there
// when its own work had all run, and asks again. When one has
// work in flight it returns that stream, running true; when the legacy stream's query fails,
// the error; either after a Reclaim (done gets what the streams have passed, the busy streams
// their points). Else it appends to done the items of every non-default stream (found idle
// now, with the legacy stream), and, when a default stream is among ss or the lists, records
// a point in it, waits for it (which waits for the earlier work of every blocking stream,
// seen or not, but not for non-blocking streams) and appends the items its lists had before
// the point. Lost lists are recovered as Reclaim recovers them. Items pushed meanwhile, or on
// a stream that gets work queued meanwhile, stay. It is the reclaimer's, as Poll is, and is
// not for a hot path.
func (ls *Lists[T]) Settle(done []T, ss []Stream) (_ []T, s Stream, running bool, err error) {
	lists := slices.Clone(ls.snapshot()) // Reclaim below takes its own snapshot
	ls.endScan()
	all := slices.Clone(ss)
	for _, l := range lists {
		all = append(all, l.s)
	}
	// A default stream among them: 0 and CU_STREAM_LEGACY name the same stream, one point
	// covers both.
	dflt := slices.IndexFunc(all, DefaultStream)
	s, running, err = ls.running(all)
	if running && DefaultStream(s) {
		// Every other stream is idle: the legacy stream may be running only points of ours,
		// recorded by polls after the caller's last wait. Wait for them and ask again.
		if waited, werr := ls.waitQuiet(lists); werr != nil {
			running, err = false, werr
		} else if waited {
			s, running, err = ls.running(all)
		}
	}
	if running || err != nil {
		done, perr := ls.Reclaim(done, nil)
		return done, s, running, errors.Join(err, perr)
	}
	// Every stream is idle, the legacy stream too when it matters: every point placed before
	// has been passed. The non-default streams first, whose Idle asks the legacy stream, before
	// a point of ours is queued there.
	var errs []error
	for _, l := range lists {
		if DefaultStream(l.s) {
			continue
		}
		done, errs = ls.pollList(l, done, errs)
	}
	var werr error
	if dflt >= 0 {
		counts := make([]int, len(lists)) // the open items of each default stream's list before the point
		for i, l := range lists {
			if DefaultStream(l.s) {
				l.mu.Lock()
				counts[i] = len(l.open)
				l.mu.Unlock()
			}
		}
		if werr = ls.points.WaitPoint(all[dflt]); werr != nil {
			werr = fmt.Errorf("streamq: wait for a point in the default stream %#x: %w", all[dflt], werr)
		} else {
			for i, l := range lists {
				if DefaultStream(l.s) {
					done = ls.release(l, counts[i], done)
				}
			}
		}
	}
	err = errors.Join(errs...)
	if ls.Lost() > 0 {
		var rerr error
		if done, rerr = ls.Recover(done, nil); rerr == nil {
			err = nil // the refused streams' items came back, as Reclaim says
		} else {
			err = errors.Join(err, rerr)
		}
	}
	return done, 0, false, errors.Join(err, werr)
}

// running is Points.Running of ss, its error saying which stream's query failed.
func (ls *Lists[T]) running(ss []Stream) (Stream, bool, error) {
	s, running, err := ls.points.Running(ss)
	if err != nil {
		err = fmt.Errorf("streamq: query stream %#x: %w", s, err)
	}
	return s, running, err
}

// waitQuiet waits for the quiet points of the default streams' lists (List.quiet), for Settle
// once the legacy stream is found running and every other stream idle: such a point waits
// only for the legacy stream's work queued between the query that found it quiet and the
// point, and for the earlier work of blocking streams, the caller's (found idle) or not (which
// Settle's own point waits for too), so that it waits for nothing the caller has in flight
// (but work another goroutine queues on the legacy stream between that query and the point).
// It reports whether it waited for one.
func (ls *Lists[T]) waitQuiet(lists []*List[T]) (waited bool, err error) {
	for _, l := range lists {
		if !DefaultStream(l.s) {
			continue
		}
		l.mu.Lock()
		ev, quiet := l.ev, l.quiet // the reclaimer's, as Settle is: it stays as it is
		l.mu.Unlock()
		if ev == 0 || !quiet {
			continue
		}
		if err := ls.points.Wait(ev); err != nil {
			return waited, fmt.Errorf("streamq: wait for a point in the default stream %#x: %w", l.s, err)
		}
		waited = true
	}
	return waited, nil
}
