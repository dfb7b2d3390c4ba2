// Package streamq defers work until the device has passed a point in a CUDA stream: "run this
// once the event recorded on stream s has completed", without a CPU wait.
//
// # Design
//
// A Queue keeps, per stream, a FIFO of items, each behind an event recorded on that stream
// when the item was pushed (a point: points.go, which has the rule every user of this package
// keeps; events come from a cuda.EventPool and go back to it when their item is done). Work on one stream completes in order, so an event of a stream completes
// after every earlier event of the same stream: Poll walks each stream's FIFO from the oldest
// item and stops at the first event not complete, so that a poll costs one cuEventQuery per
// stream with nothing ready. Drain waits (cuEventSynchronize) for the newest event of every
// stream, which covers all the older ones, then finishes everything.
//
// Each finished item is handed to the done function given to New, oldest first per stream.
// An item leaves the queue before done runs, so a done that fails does not see it again; the
// error stops that stream's walk and is returned.
//
// # Concurrency
//
// A Queue is not safe for concurrent use: its owner serializes calls (device.Heap and
// uvm.Tier hold their mutex). The done function runs on the caller's goroutine.
package streamq

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Queue holds items of type T, each waiting for an event recorded on a stream.
type Queue[T any] struct {
	points *Points
	done   func(T) error
	fifos  map[cuda.Stream][]entry[T]
	n      int
}

type entry[T any] struct {
	v  T
	ev cuda.Event
}

// New returns an empty queue whose events come from events (on dev) and whose finished items
// are handed to done.
func New[T any](dev *cuda.Device, events *cuda.EventPool, done func(T) error) *Queue[T] {
	return &Queue[T]{points: NewPoints(dev, events), done: done, fifos: map[cuda.Stream][]entry[T]{}}
}

// Push records an event on s and queues v behind it: v is done once the device has passed
// every operation queued on s before the call.
func (q *Queue[T]) Push(s cuda.Stream, v T) error {
	ev, err := q.points.Mark(s)
	if err != nil {
		return err
	}
	q.PushEvent(s, ev, v)
	return nil
}

// PushEvent queues v behind ev, an event of the queue's pool the caller recorded on s last
// (after anything it recorded on s for earlier items). The queue owns ev from now on.
func (q *Queue[T]) PushEvent(s cuda.Stream, ev cuda.Event, v T) {
	q.fifos[s] = append(q.fifos[s], entry[T]{v: v, ev: ev})
	q.n++
}

// Len returns the number of items waiting.
func (q *Queue[T]) Len() int { return q.n }

// Streams returns the number of streams with items waiting.
func (q *Queue[T]) Streams() int { return len(q.fifos) }

// Range calls f for every item waiting, with its stream, oldest first per stream, the streams
// in no set order. f must not change the queue. It costs no driver call: it says what waits,
// not what has completed since the last Poll.
func (q *Queue[T]) Range(f func(s cuda.Stream, v T)) {
	for s, fifo := range q.fifos {
		for _, e := range fifo {
			f(s, e.v)
		}
	}
}

// Poll finishes the items whose event has completed, on every stream, oldest first per stream.
func (q *Queue[T]) Poll() error {
	if q.n == 0 {
		return nil
	}
	var errs []error
	for s := range q.fifos {
		if err := q.PollStream(s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PollStream finishes the items of stream s whose event has completed, oldest first: the first
// event not complete stops it, since later ones on the same stream complete after it.
func (q *Queue[T]) PollStream(s cuda.Stream) error {
	f := q.fifos[s]
	var err error
	for len(f) > 0 {
		if passed, qerr := q.points.Passed(f[0].ev); qerr != nil {
			err = fmt.Errorf("streamq: event on stream %#x: %w", s, qerr)
			break
		} else if !passed {
			break
		}
		e := f[0]
		f[0] = entry[T]{}
		f = f[1:]
		q.n--
		q.points.Put(e.ev)
		if err = q.done(e.v); err != nil {
			break
		}
	}
	if len(f) == 0 {
		delete(q.fifos, s)
	} else {
		q.fifos[s] = f
	}
	return err
}

// Drain waits for every item's event and finishes them all.
func (q *Queue[T]) Drain() error {
	var errs []error
	for s := range q.fifos {
		errs = append(errs, q.DrainStream(s))
	}
	return errors.Join(errs...)
}

// DrainStream waits for the newest event of stream s, then finishes its items.
func (q *Queue[T]) DrainStream(s cuda.Stream) error {
	f := q.fifos[s]
	if len(f) == 0 {
		return nil
	}
	if err := q.points.Wait(f[len(f)-1].ev); err != nil {
		return fmt.Errorf("streamq: wait for stream %#x: %w", s, err)
	}
	return q.PollStream(s)
}
