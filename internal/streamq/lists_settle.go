package streamq

import (
	"errors"
	"fmt"
	"slices"

	"github.com/pinmalloc/pinmalloc/internal/errkind"
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
// The same holds of the points earlier polls recorded after the caller's last wait, the
// lists' or their peers' (other lists on the same Points with points in the same streams, such
// as a device heap's idle purge's): in flight, they make their streams' queries say running. A
// poll asks a stream's own work just before it records a point there (Points.Quiet); found all
// run, the point is quiet (List.quiet): it waits only for the work the stream's order puts
// before it, every blocking stream's for the legacy stream, the legacy stream's for a blocking
// stream (whose items get a point of their own while the legacy stream runs one of ours). When
// a stream is found running, Settle waits for such points where they wait for no work of the
// caller's (waitOwn says when), and asks again. They wait only for unseen blocking streams'
// work, as its own point does, and for work another goroutine queues in their stream between
// the poll's query and its point, which Settle then waits for instead of saying running; the
// memory is safe either way, as the decision to hand items back is still Running's, after the
// waits. A point recorded while the stream's own work ran is not quiet, whoever's that work was
// (another lists' point in flight there too): Settle then says running.

// Settle hands back every item of the lists when no stream that may use them has work in
// flight: it asks Points.Running of the lists' streams and of ss (the caller's other
// streams, such as those with memory of their own freed in their own order), so of the
// legacy default stream too when one of them is blocking or a default stream; when one is
// running only for points the polls of the lists or of peers recorded, it waits for them and
// asks again. Peers are other lists on the same Points whose polls record points in the same
// streams (a device heap's idle purge: a *Lists of any item type), the caller's reclaimer's as
// these are; their streams with a point are asked too, and their items stay theirs (a Reclaim
// of them after a Settle that found every stream idle finds their points passed). A stream the
// driver refuses (destroyed without Forget, its work still run by the driver), none running,
// is answered with one synchronize of the context, which waits for that work, unless a capture
// holds a stream the lists know (Captured), which that synchronize would end: that stream is
// returned as running. When one has
// work in flight it returns that stream, running true; when the legacy stream's query fails,
// or that synchronize, the error; either after a Reclaim (done gets what the streams have
// passed, the busy streams their points). Else it appends to done the items of every
// non-default stream (found idle now, with the legacy stream), and, when a default stream is
// among ss or the lists, records a point in it, waits for it (which waits for the earlier work
// of every blocking stream, seen or not, but not for non-blocking streams) and appends the
// items its lists had before the point. Lost lists are recovered as Reclaim recovers them.
// Items pushed meanwhile, or on a stream that gets work queued meanwhile, stay. A device fault,
// which fails every call, is said once (errkind.Once). It is the reclaimer's, as Poll is, and is
// not for a hot path.
func (ls *Lists[T]) Settle(done []T, ss []Stream, peers ...Peer) (_ []T, s Stream, running bool, err error) {
	lists := slices.Clone(ls.snapshot()) // Reclaim below takes its own snapshot
	ls.endScan()
	all := slices.Clone(ss)
	for _, l := range lists {
		all = append(all, l.s)
	}
	// The points in flight, the lists' and the peers' (stable: the reclaimer's).
	pts := ls.settlePoints(nil)
	for _, peer := range peers {
		n := len(pts)
		pts = peer.settlePoints(pts)
		for _, pt := range pts[n:] {
			if !slices.Contains(all, pt.s) {
				all = append(all, pt.s)
			}
		}
	}
	// A default stream among them: 0 and CU_STREAM_LEGACY name the same stream, one point
	// covers both.
	dflt := slices.IndexFunc(all, DefaultStream)
	s, running, err = ls.running(all)
	if running {
		// Points of ours, recorded by polls after the caller's last wait, may be all that runs.
		if werr := ls.waitOwn(pts, all); werr != nil {
			running, err = false, werr
		} else {
			s, running, err = ls.running(all)
		}
	}
	if running || err != nil {
		// A device fault fails the query and the reclaim's synchronize alike: said once.
		done, perr := ls.Reclaim(done, nil)
		return done, s, running, errkind.Once(err, perr)
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
			err = errkind.Once(err, rerr)
		}
	}
	return done, 0, false, errors.Join(err, werr)
}

// running is Points.Running of ss, its error saying which stream's query failed. A stream the
// driver refuses (destroyed without Forget), with none of ss running, is answered as Recover
// answers a lost list: one synchronize of the context (Points.WaitAll), which waits for the work
// the driver still runs for it; once that has returned, every stream has passed what was queued
// before it: running false, no error. When it fails, the error says both. Running has found no
// capture on a stream of ss, nor on the legacy stream (a refused stream counts as blocking); a
// capture on another stream the lists know (Captured: the caller's others, the streams seen,
// whose lists may have left) would end at that synchronize too: such a stream is returned
// running, and nothing is waited for. A refusal of the legacy stream's query is returned as it
// is.
func (ls *Lists[T]) running(ss []Stream) (Stream, bool, error) {
	s, running, err := ls.points.Running(ss)
	switch {
	case err == nil:
		return s, running, nil
	case DefaultStream(s):
		return s, running, fmt.Errorf("streamq: query stream %#x: %w", s, err)
	}
	if c, held, werr := ls.WaitAllUncaptured(); held {
		return c, true, nil
	} else if werr != nil {
		return s, false, fmt.Errorf("streamq: query stream %#x: %w; synchronize the context for its work: %w", s, err, werr)
	}
	return 0, false, nil
}

// Peer is what Settle asks of other lists on the same Points (any *Lists is one): the points
// their polls recorded, for Settle to wait for as for its own.
type Peer interface {
	settlePoints(pts []settlePoint) []settlePoint
}

// settlePoint is a point a poll recorded, as Settle sees it.
type settlePoint struct {
	ev    Event
	seq   uint64 // List.seq
	s     Stream
	quiet bool // List.quiet
}

// settlePoints appends to pts the points of the lists, borrowed ones too (never quiet): the
// reclaimer's, as Settle is, so that they stay as they are. Lock order: the lists', a list's.
func (ls *Lists[T]) settlePoints(pts []settlePoint) []settlePoint {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, l := range ls.m {
		l.mu.Lock()
		if l.ev != 0 {
			pts = append(pts, settlePoint{l.ev, l.seq, l.s, l.quiet})
		}
		l.mu.Unlock()
	}
	return pts
}

// waitOwn waits for points pts (the lists' own and their peers') that keep streams of all
// running, for Settle once Running has found one, when none of them waits for work the caller
// has in flight (but unseen blocking streams', which Settle's own point waits for too); it
// waits for nothing otherwise, and the Running that follows decides. The points are the quiet
// ones (List.quiet): each waits only for the work its stream's order puts before it.
//
//   - Each non-default stream of all that has work of its own queued must have a point in
//     pts, and only quiet ones: a blocking stream's, which waits only for the legacy stream's
//     earlier work. Any other stream with work queued is running: nothing is waited for.
//   - When the legacy stream has work of its own queued, each point in a default stream not
//     passed must be a quiet one, recorded before those of the busy streams above (seq): such
//     a point waits for the legacy stream's work before it (none, found quiet), and for the
//     blocking streams' earlier work: an idle stream's has run, and a busy one's was before
//     its own quiet point, so had run when that point was recorded. It waits for them, then
//     asks the legacy stream again: work of its own still queued is the caller's, after them.
//   - The legacy stream quiet, it waits for the busy streams' points: their streams' work
//     before them had run when they were recorded, and the legacy stream's has now.
func (ls *Lists[T]) waitOwn(pts []settlePoint, all []Stream) error {
	p := ls.points
	var busy []settlePoint
	first := ^uint64(0) // the first seq of busy's points
	for i, s := range all {
		if DefaultStream(s) || slices.Contains(all[:i], s) {
			continue
		}
		if quiet, err := p.Quiet(s); err != nil || quiet {
			continue // a stream the driver refuses is Running's to answer
		}
		n := len(busy)
		for _, pt := range pts {
			if pt.s != s {
				continue
			}
			if !pt.quiet {
				return nil
			}
			busy = append(busy, pt)
			first = min(first, pt.seq)
		}
		if len(busy) == n {
			return nil // no point of ours: the work is the caller's
		}
	}
	if quiet, err := p.Quiet(streamLegacy); err != nil {
		return fmt.Errorf("streamq: query the legacy default stream: %w", err)
	} else if !quiet {
		var legacy []settlePoint
		for _, pt := range pts {
			if !DefaultStream(pt.s) {
				continue
			}
			if !pt.quiet || pt.seq > first {
				if passed, err := p.Passed(pt.ev); err != nil || !passed {
					return err
				}
				continue // passed: before the query that found the legacy stream busy
			}
			legacy = append(legacy, pt)
		}
		if len(legacy) == 0 {
			return nil
		}
		for _, pt := range legacy {
			if err := p.Wait(pt.ev); err != nil {
				return fmt.Errorf("streamq: wait for a point in the default stream %#x: %w", pt.s, err)
			}
		}
		if quiet, err := p.Quiet(streamLegacy); err != nil || !quiet {
			return err
		}
	}
	for _, pt := range busy {
		if err := p.Wait(pt.ev); err != nil {
			return fmt.Errorf("streamq: wait for a point in stream %#x: %w", pt.s, err)
		}
	}
	return nil
}
