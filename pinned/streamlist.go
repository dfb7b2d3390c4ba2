package pinned

import (
	"fmt"
	"maps"
	"sync"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// The per-stream lists of deferred buffers.
//
// A list exists while its stream has buffers deferred on it, and a little longer: a reclaim
// walks the lists in streamOrder.lists, and one that finds a list empty for the second time in
// a row takes it out (retire), so a stream freed on between every two reclaims keeps its list
// (and is not checked with the driver again), and a stream no longer used costs nothing after
// two reclaims. Every call costs O(1) in the number of streams the pool has seen: a map lookup
// under listMu when the stream is not the one check found last, an insert for a new one.

// streamList is the buffers deferred on one stream: open ones, freed since its point was
// placed, and marked ones, freed before it. A stream has one point at most, an event: the open
// buffers get the next once it has completed, so a stuck stream costs one event however long it
// is stuck.
type streamList struct {
	s      cuda.Stream
	mu     sync.Mutex
	open   []deferred
	marked []deferred
	ev     streamq.Event // the point, recorded after marked were freed; 0 for none
	gone   bool          // out of the lists: queue takes a new list
	idle   int           // reclaims in a row that found it empty
	// lostOpen is the number of open buffers when poll last found the list lost: the
	// synchronize that follows covers those, not the ones queued after them.
	lostOpen int
	n        int     // the buffers not shared in open and marked
	bytes    uintptr // and their bytes
}

// pollState is what poll found of a list.
type pollState int

const (
	pollBusy pollState = iota // buffers wait, or it was emptied just now
	pollIdle                  // empty at two reclaims in a row: retire it
	pollLost                  // the driver refuses its stream or its event
)

// check returns the list of stream s: the one check found last, one the lists have, or a new
// one for a stream the driver accepts now, with a record of an event of the pool's device: a
// stream of another device, or a handle the driver does not know, is refused (the pool could
// not order reuse after it), and so is the per-thread default stream.
func (o *streamOrder) check(s cuda.Stream) (*streamList, error) {
	if l := o.last.Load(); l != nil && l.s == s {
		return l, nil
	}
	return o.checkSlow(s)
}

func (o *streamOrder) checkSlow(s cuda.Stream) (*streamList, error) {
	if s == perThreadStream {
		return nil, fmt.Errorf("%w: the per-thread default stream (%#x) names the default stream of whichever OS thread the pool runs on; use a stream of your own", ErrInvalidStream, s)
	}
	o.listMu.Lock()
	l := o.lists[s]
	o.listMu.Unlock()
	if l == nil {
		if err := o.points.Check(uintptr(s)); err != nil {
			return nil, fmt.Errorf("%w: %#x (a stream of the pool's device, CUDA device %d): %w", ErrInvalidStream, s, o.points.Ordinal(), err)
		}
		l = o.list(s)
	}
	o.last.Store(l)
	return l, nil
}

// list returns the list of stream s, made (with no check) when there is none.
func (o *streamOrder) list(s cuda.Stream) *streamList {
	o.listMu.Lock()
	defer o.listMu.Unlock()
	if l := o.lists[s]; l != nil {
		return l
	}
	l := &streamList{s: s}
	o.lists[s] = l
	o.nlists.Store(int32(len(o.lists)))
	o.listsPeak = max(o.listsPeak, len(o.lists))
	return l
}

// queue adds d to the open list l, or to the list that took its place when l left the lists,
// and adds its weight when it is l's alone (a shared buffer's is added once, by deferFree).
func (o *streamOrder) queue(l *streamList, d deferred) {
	for {
		l.mu.Lock()
		if !l.gone {
			l.open = append(l.open, d)
			l.idle = 0
			if !d.shared {
				l.n++
				l.bytes += d.n
				o.weight.Add(weigh(d.n))
			}
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		next := o.list(l.s)
		o.last.CompareAndSwap(l, next)
		l = next
	}
}

// queueMany is queue of bufs, none shared, under one lock.
func (o *streamOrder) queueMany(l *streamList, bufs []deferred) {
	var w int64
	var bytes uintptr
	for _, d := range bufs {
		w += weigh(d.n)
		bytes += d.n
	}
	for {
		l.mu.Lock()
		if !l.gone {
			l.open = append(l.open, bufs...)
			l.idle = 0
			l.n += len(bufs)
			l.bytes += bytes
			o.weight.Add(w)
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		next := o.list(l.s)
		o.last.CompareAndSwap(l, next)
		l = next
	}
}

// poll appends to done the buffers of l whose point s has passed, and gives the open ones a
// point when there is none: none at all when the stream is idle (they are done), else an event.
// A list the driver refuses is left as it is (pollLost, with the driver's error), for reclaim.
func (l *streamList) poll(o *streamOrder, done []deferred) ([]deferred, pollState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ev != 0 {
		passed, err := o.points.Passed(l.ev)
		if err != nil {
			return done, l.lost(), fmt.Errorf("pinned: stream %#x: %w", l.s, err)
		}
		if !passed {
			return done, pollBusy, nil
		}
		done = l.take(done, l.marked)
		o.points.Put(l.ev)
		l.ev, l.marked = 0, l.marked[:0]
	}
	if len(l.open) > 0 {
		idle, err := o.points.Idle(uintptr(l.s))
		switch {
		case err != nil:
			return done, l.lost(), fmt.Errorf("pinned: stream %#x: %w", l.s, err)
		case idle: // everything queued on it has completed
			done = l.take(done, l.open)
			l.open = l.open[:0]
		default:
			ev, err := o.points.Mark(uintptr(l.s))
			if err != nil {
				return done, l.lost(), fmt.Errorf("pinned: stream %#x: event: %w", l.s, err)
			}
			l.ev = ev
			l.open, l.marked = l.marked, l.open
			return done, pollBusy, nil
		}
	}
	if len(l.marked) == 0 {
		if l.idle++; l.idle >= 2 {
			return done, pollIdle, nil
		}
	}
	return done, pollBusy, nil
}

// lost notes how many open buffers l has as poll finds it lost, and returns pollLost. l.mu is
// held.
func (l *streamList) lost() pollState {
	l.lostOpen = len(l.open)
	return pollLost
}

// take appends bufs, leaving l, to done. l.mu is held.
func (l *streamList) take(done, bufs []deferred) []deferred {
	for _, d := range bufs {
		if !d.shared {
			l.n--
			l.bytes -= d.n
		}
	}
	return append(done, bufs...)
}

// retire takes l out of the lists if it is still idle (empty at two reclaims in a row).
func (o *streamOrder) retire(l *streamList) {
	o.listMu.Lock()
	l.mu.Lock()
	if !l.gone && len(l.open) == 0 && len(l.marked) == 0 && l.idle >= 2 {
		o.unlist(l)
	}
	l.mu.Unlock()
	o.listMu.Unlock()
}

// release appends to done the buffers of l its stream has passed, by a synchronize of the
// stream or the context that followed their frees: with all every one (ForgetStream, where no
// other goroutine uses the stream), else the marked ones and the open ones poll saw as it found
// l lost, before the synchronize (a live stream's list whose event the driver refused gets more
// since, and their work may be queued after the synchronize). When none is left it takes l out
// of the lists, and the handle is checked with the driver again when it comes back.
func (o *streamOrder) release(l *streamList, all bool, done []deferred) []deferred {
	o.listMu.Lock()
	l.mu.Lock()
	open := len(l.open)
	if !all {
		open = min(open, l.lostOpen)
	}
	if l.ev != 0 {
		o.points.Put(l.ev)
	}
	done = l.take(l.take(done, l.marked), l.open[:open])
	l.open = append(l.open[:0], l.open[open:]...)
	l.marked, l.ev = l.marked[:0], 0
	gone := !l.gone && len(l.open) == 0
	if gone {
		o.unlist(l)
	}
	l.mu.Unlock()
	o.listMu.Unlock()
	if gone {
		o.last.CompareAndSwap(l, nil)
	}
	return done
}

// unlist takes l out of the lists: queue then takes a new list for its stream. listMu and l.mu
// are held.
func (o *streamOrder) unlist(l *streamList) {
	l.marked, l.open, l.gone = nil, nil, true
	if o.lists[l.s] != l {
		return
	}
	delete(o.lists, l.s)
	o.nlists.Store(int32(len(o.lists)))
	if n := len(o.lists); o.listsPeak > 64 && 8*n < o.listsPeak {
		// A Go map keeps its room when emptied, and a walk visits the room: make it again
		// (amortized O(1): it shrank by 8x since the last time).
		o.lists = maps.Clone(o.lists)
		o.listsPeak = n
	}
}
