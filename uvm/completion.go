package uvm

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// Completions: every batch the tier queues on one of its two streams (restores on the H2D stream,
// evictions and retired memory on the D2H stream) ends with an event and a completion, which says
// what the batch's memory becomes once the event has completed: its VRAM spare (spare.go), its
// host buffers free in the pool. Completions are found by polling (cuEventQuery, internal/streamq),
// oldest first per stream, on every migration and in Stats; Sync and Close wait for them.
//
// Invariants: memory that a queued copy, or the user's work a batch waited for, may still touch
// is reused only by complete, after the event of the batch that lists it. Batches are numbered per
// direction; a block's readySeq (evictSeq) names the batch that last wrote its device (host) bytes,
// still in flight while pending says so, and its event is then valid to wait on.

// Directions of a batch.
const (
	dirH2D = iota
	dirD2H
)

// batches are the batches queued on the tier's streams, numbered per direction, and finished
// in order by their completions.
type batches struct {
	queue    *streamq.Queue[completion]
	issued   [2]uint64    // the number of the newest batch queued, per direction (dirH2D, dirD2H)
	done     [2]uint64    // the number of the newest batch completed, per direction
	devLists [][]devBlock // completions' VRAM lists, for reuse
}

// completion is a batch queued on one of the tier's streams: when its event completes, the
// batch's copies are done and the memory it lists can be reused.
type completion struct {
	dir int
	seq uint64
	dev []devBlock // VRAM no longer used once the event completes: spare (spare.go)
	// devBytes is the bytes of dev, when the batch added them up (0: not counted)
	devBytes uintptr
	host     [][]byte // host buffers to give back to the pool
}

// devBlock is a block of VRAM and its size.
type devBlock struct {
	p    cuda.DevicePtr
	size uintptr
}

// pending reports whether batch seq of direction dir has not completed yet.
func (t *Tier) pending(dir int, seq uint64) bool { return seq > t.batches.done[dir] }

// pushEvent records an event on the stream of dir and queues c behind it, as batch number
// t.batches.issued[dir]+1. It returns the event, owned by the queue until the batch completes
// (a stream may be made to wait on it while the batch is pending).
func (t *Tier) pushEvent(dir int, c completion) (cuda.Event, error) {
	s := t.engine.h2d
	if dir == dirD2H {
		s = t.engine.d2h
	}
	ev, err := t.engine.events.Get()
	if err != nil {
		return 0, err
	}
	if err := t.dev.EventRecord(ev, uintptr(s)); err != nil {
		t.engine.events.Put(ev)
		return 0, err
	}
	t.batches.issued[dir]++
	c.dir, c.seq = dir, t.batches.issued[dir]
	t.batches.queue.PushEvent(uintptr(s), ev, c)
	return cuda.Event(ev), nil
}

// push is pushEvent for a batch whose event no block needs.
func (t *Tier) push(dir int, c completion) error {
	_, err := t.pushEvent(dir, c)
	return err
}

// retire queues c on the D2H stream behind t.rel.waits: its memory is given back once every use
// and copy before it is done. t.mu is held.
//
// When the waits or the batch's event cannot be queued, it waits on the CPU for all that the
// queued completion would have come after: the events of t.rel.waits, and the D2H stream's
// earlier work, where an eviction's copy may still write the block's host buffer (or read its
// VRAM). Finishing the completion after the events alone handed such a buffer to the pool
// under the copy.
func (t *Tier) retire(c completion) error {
	err := t.queueWaits(t.engine.d2h)
	if err == nil {
		if err = t.push(dirD2H, c); err == nil {
			return nil
		}
	}
	for _, w := range t.rel.waits {
		if serr := t.dev.EventSynchronize(uintptr(w.ev)); serr != nil {
			return errors.Join(err, serr)
		}
	}
	if serr := t.dev.StreamSynchronize(uintptr(t.engine.d2h)); serr != nil {
		return errors.Join(err, serr)
	}
	return t.complete(completion{dir: c.dir, dev: c.dev, host: c.host})
}

// poll finishes the batches that have completed. t.mu is held.
func (t *Tier) poll() error {
	if t.batches.queue.Len() == 0 {
		return nil
	}
	if err := t.batches.queue.Poll(); err != nil {
		return fmt.Errorf("uvm: transfers: %w", err)
	}
	return nil
}

// complete finishes a batch whose event has completed (the queue's done function).
func (t *Tier) complete(c completion) error {
	if c.seq > t.batches.done[c.dir] {
		t.batches.done[c.dir] = c.seq
	}
	err := t.putSpares(c.dev, c.devBytes)
	for _, b := range c.host {
		if ferr := t.mem.pool.Free(b); ferr != nil {
			err = errors.Join(err, ferr)
		}
	}
	if len(c.dev)+len(c.host) > 0 {
		t.signal()
	}
	return err
}

// devList returns an empty list for a completion's VRAM: a recycled one with room for n blocks
// if there is one, else any recycled one, else a new one of launchJobs; appends grow it, so
// that no large allocation delays a batch's first copy.
func (t *Tier) devList(n int) []devBlock {
	lists := t.batches.devLists
	k := len(lists) - 1
	for i := k; i >= 0; i-- {
		if cap(lists[i]) >= n {
			k = i
			break
		}
	}
	if k < 0 {
		return make([]devBlock, 0, launchJobs)
	}
	l, last := lists[k], len(lists)-1
	lists[k], lists[last] = lists[last], nil
	t.batches.devLists = lists[:last]
	return l
}

// putDevList keeps l, emptied, for devList.
func (t *Tier) putDevList(l []devBlock) { t.batches.devLists = append(t.batches.devLists, l[:0]) }

// Sync waits until every transfer the tier has queued has completed, and finishes them (their
// VRAM and host buffers become reusable).
func (t *Tier) Sync() error {
	t.mu.Lock()
	defer t.unlock("Sync")
	if t.closed {
		return ErrClosed
	}
	return t.drain()
}

// drain waits for every completion. t.mu is held.
func (t *Tier) drain() error {
	if err := t.batches.queue.Drain(); err != nil {
		return fmt.Errorf("uvm: wait for transfers: %w", err)
	}
	return nil
}
