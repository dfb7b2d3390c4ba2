package pinned

import (
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// The per-stream lists of deferred buffers are internal/streamq's Lists (lists.go there has
// their rule, their lazy points and their life; lists_seen.go the check of a stream new to the
// pool, and the streams forgotten): this file is what the pool adds, what a buffer counts for.
//
// A list exists while its stream has buffers deferred on it, and a little longer: a reclaim
// polls the lists, and one that finds a list empty for the second time in a row takes it out
// (listLinger), so a stream freed on between every two reclaims keeps its list (and is not
// checked with the driver again), and a stream no longer used costs nothing after two reclaims.

// streamList is the buffers deferred on one stream.
type streamList = streamq.List[deferred]

// listLinger is the reclaims in a row that find a list empty before it leaves the lists.
const listLinger = 2

// newLists returns the lists of a pool whose points are points.
func newLists(points *streamq.Points) *streamq.Lists[deferred] {
	return streamq.NewLists(points, measure, listLinger)
}

// measure is what a deferred buffer counts for on the lists: one buffer, its bytes and its
// weight when it is its list's alone; a shared buffer is counted once, by deferShared (shared,
// sharedBytes, weight).
func measure(d deferred) streamq.Tally {
	if d.shared {
		return streamq.Tally{}
	}
	return streamq.Tally{Items: 1, Bytes: int64(d.n), Weight: weigh(d.n)}
}

// streamOf is the stream of list l.
func streamOf(l *streamList) cuda.Stream { return cuda.Stream(l.Stream()) }

// check returns the list of stream s: the one check found last (written out here, for
// FreeAsync's fast path), or streamq's Lists.Check: one the lists have, or a new one for a
// stream the driver accepts now as a stream of the pool's device (the pool could not order
// reuse after another device's stream, nor after a handle the driver does not know); the
// per-thread default stream is refused, as everywhere in the module.
func (o *streamOrder) check(s cuda.Stream) (*streamList, error) {
	if l := o.lists.Last(); l != nil && streamOf(l) == s {
		return l, nil
	}
	l, err := o.lists.Check(uintptr(s))
	if err != nil {
		return nil, streamError("", err) // ErrDeviceFault when the context faulted
	}
	return l, nil
}

// list returns the list of stream s, made (with no check) when there is none.
func (o *streamOrder) list(s cuda.Stream) *streamList { return o.lists.Get(uintptr(s)) }

// queue adds d to the open list l, or to the list that took its place when l left the lists;
// the lists count it when it is l's alone (a shared buffer's weight is added once, by
// deferShared). false says that l left the lists and its stream was forgotten (ForgetStream)
// since the caller found l, with no list made for it again: nothing was pushed, and the stream
// has passed d, which the caller frees (streamq's Lists.PushKnown). A push that followed l
// there made a list for the forgotten handle, which the driver may have given to a new stream:
// see streamq's Lists.
func (o *streamOrder) queue(l *streamList, d deferred) bool { return o.lists.PushKnown(l, d) }

// queueMany is queue of bufs, none shared, under one lock: all pushed, or none.
func (o *streamOrder) queueMany(l *streamList, bufs []deferred) bool {
	return o.lists.PushManyKnown(l, bufs)
}

// points are the pool's device's points, the lists'.
func (o *streamOrder) points() *streamq.Points { return o.lists.Points() }

// weight is the weight of the deferred buffers: zero when there are none, and what tells the
// allocation's slow path to reclaim (reclaimSoon).
func (o *streamOrder) weight() int64 { return o.lists.Weight() + o.sharedWeight.Load() }
