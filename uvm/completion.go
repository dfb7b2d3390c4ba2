package uvm

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// Completions: every batch the tier queues on one of its two streams (restores on the H2D stream,
// evictions and retired memory on the D2H stream) ends with an event and a completion, which says
// what the batch's memory becomes once the event has completed: its VRAM spare (spare.go), its
// host buffers free in the pool. The completions wait on internal/streamq's Lists, one list per
// stream, the same stream-order mechanism as pinned.Pool's deferred buffers, with the batches'
// events as their own points (OwnPoints): a push costs no driver call beyond the batch's event,
// a poll one cuEventQuery per stream with batches in flight (of the newest batch's event, or of
// the one a poll before found pending), and no event of the lists' own; completions come back
// oldest first per stream, once their stream has passed their event. They are polled on every
// migration and in Stats; Sync and Close wait for them (Lists.Drain synchronizes the streams).
//
// Invariants: memory that a queued copy, or the user's work a batch waited for, may still touch is
// reused only by complete, after the stream of the batch that lists it has passed the batch's event
// (or a synchronize after it). Batches are numbered per direction, each direction one stream, so
// that completions come back in the order of their numbers; a block's readySeq (evictSeq) names the
// batch that last wrote its device (host) bytes, or, for readySeq, the failed restore whose copies
// may still read its host bytes (undoRestore), still in flight while pending says so, and its
// event (readyEv, evictEv) is then valid to wait on. A batch's event is the completion's (c.ev):
// the lists query it, never record nor give it back; complete gives it back to the event pool after
// done says the batch is no longer pending, so that no block is told to wait on an event that went
// back.

// Directions of a batch.
const (
	dirH2D = iota
	dirD2H
)

// batches are the batches queued on the tier's streams, numbered per direction, and finished
// in order by their completions.
type batches struct {
	lists    *streamq.Lists[completion] // the completions in flight, per stream
	back     []completion               // the completions a poll or drain handed back (reused)
	issued   [2]uint64                  // the number of the newest batch queued, per direction (dirH2D, dirD2H)
	done     [2]uint64                  // the number of the newest batch completed, per direction
	devLists [][]devBlock               // completions' VRAM lists, for reuse
}

// batchLinger is the polls in a row that find one of the tier's two lists empty before it leaves
// the lists: the tier's streams live as long as it does, and a list that left costs the next
// batch a new one (an allocation), so they stay while the tier migrates blocks at all.
const batchLinger = 64

// newBatches returns the batches of a tier whose events come from events, on dev. A batch's
// own event is its point on the lists (streamq's OwnPoints): every copy and wait of a batch, and
// of the batches before it on its stream, is queued before its event, and the event stays the
// completion's until complete, after the lists handed it back.
func newBatches(dev *icuda.Device, events *icuda.EventPool) batches {
	ls := streamq.NewLists(streamq.NewPoints(dev, events), countBatch, batchLinger)
	ls.OwnPoints(batchPoint)
	return batches{lists: ls}
}

// batchPoint is a completion's own point on the lists: its batch's event.
func batchPoint(c completion) streamq.Event { return streamq.Event(c.ev) }

// countBatch is what a completion counts for on the lists: one batch in flight (Stats.Pending,
// read without a lock as the lists' weight).
func countBatch(completion) streamq.Tally { return streamq.Tally{Items: 1, Weight: 1} }

// completion is a batch queued on one of the tier's streams: when its event completes, the
// batch's copies are done and the memory it lists can be reused.
type completion struct {
	dir int
	seq uint64
	ev  cuda.Event // the batch's event, recorded by pushEvent; 0 for a batch not queued
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

// pushEvent records an event on the stream of dir and pushes c behind it on the stream's list,
// as batch number t.batches.issued[dir]+1. It returns the event, c's until complete gives it
// back (a stream may be made to wait on it while the batch is pending). An event the driver
// cannot make is streamq.ErrNoEvent (pinmalloc.ErrRefused, and the driver's error).
func (t *Tier) pushEvent(dir int, c completion) (cuda.Event, error) {
	s := t.engine.stream(dir)
	ev, err := t.engine.events.Get()
	if err != nil { // nothing queued for the batch's completion: the driver's want or refusal
		return 0, fmt.Errorf("%w to mark the batch with: %w", streamq.ErrNoEvent, err)
	}
	if err := t.dev.EventRecord(ev, uintptr(s)); err != nil {
		t.engine.events.Put(ev)
		return 0, err
	}
	t.batches.issued[dir]++
	c.dir, c.seq, c.ev = dir, t.batches.issued[dir], cuda.Event(ev)
	ls := t.batches.lists
	ls.Push(ls.Get(uintptr(s)), c) // after the record: every batch before it is before its event
	return c.ev, nil
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
//
// gone reports whether c's memory has left the caller: queued, or given on by the fallback,
// even when giving it on failed (complete's error: the heap or the pool refused it, and no
// block may point to it any more). It is false only when a CPU wait failed: c's memory is
// then still the caller's, and may still be in use.
func (t *Tier) retire(c completion) (gone bool, err error) {
	err = t.queueWaits(t.engine.d2h)
	if err == nil {
		if err = t.push(dirD2H, c); err == nil {
			return true, nil
		}
	}
	for _, w := range t.rel.waits {
		if serr := t.dev.EventSynchronize(uintptr(w.ev)); serr != nil {
			return false, errkind.Once(err, serr)
		}
	}
	if serr := t.dev.StreamSynchronize(uintptr(t.engine.d2h)); serr != nil {
		return false, errkind.Once(err, serr)
	}
	return true, t.complete(completion{dir: c.dir, dev: c.dev, host: c.host})
}

// poll finishes the batches whose streams have passed them. A stream the driver refuses
// (which only a broken context does to the tier's own) is answered by a synchronize of the
// context, which finishes its batches; the refusal is returned. t.mu is held.
func (t *Tier) poll() error {
	ls := t.batches.lists
	if ls.Weight() == 0 {
		return nil
	}
	back, err := ls.Poll(t.batches.back[:0])
	if err != nil {
		err = fmt.Errorf("uvm: transfers: %w", err)
	}
	if ls.Lost() > 0 {
		var rerr error
		if back, rerr = ls.Recover(back, nil); rerr != nil {
			err = errkind.Once(err, fmt.Errorf("uvm: transfers: %w", rerr)) // a fault said once
		}
	}
	return errkind.Once(err, t.finish(back))
}

// finish completes the batches back, every one (their errors joined: none is lost), and keeps
// the slice for the next poll. t.mu is held.
func (t *Tier) finish(back []completion) error {
	var err error
	for i := range back {
		if cerr := t.complete(back[i]); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}
	clear(back)
	t.batches.back = back[:0]
	return err
}

// complete finishes a batch whose event has completed (handed back by the lists, or queued
// nowhere: retire's and undoRestore's fallbacks, after their CPU waits), then gives the event
// back to the pool: done says first that the batch is no longer pending, so that no block
// waits on the event from then on.
func (t *Tier) complete(c completion) error {
	if c.seq > t.batches.done[c.dir] { // the lists hand a stream's batches back in order
		t.batches.done[c.dir] = c.seq
	}
	if c.ev != 0 {
		t.engine.events.Put(uintptr(c.ev))
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

// oneDevList returns an empty list for the VRAM of one freed block (Free): the last recycled
// one if it is no batch's (a spare run of one block, given back as a restore took its block),
// else a new one of one block. A batch's list stays for a batch, and a loop that frees blocks
// one by one makes no batch's list for each.
func (t *Tier) oneDevList() []devBlock {
	lists := t.batches.devLists
	k := len(lists) - 1
	if k < 0 || cap(lists[k]) >= launchJobs {
		return make([]devBlock, 0, 1)
	}
	l := lists[k]
	lists[k] = nil
	t.batches.devLists = lists[:k]
	return l
}

// putDevList keeps l, emptied, for devList.
func (t *Tier) putDevList(l []devBlock) { t.batches.devLists = append(t.batches.devLists, l[:0]) }

// Sync waits until every transfer the tier has queued has completed, and finishes them (their
// VRAM and host buffers become reusable). Memory held back by a Free that returned ErrHeldBack
// becomes reusable too once a synchronize of the device succeeds; else Sync returns ErrHeldBack.
func (t *Tier) Sync() error {
	t.mu.Lock()
	defer t.unlock("Sync")
	if t.closed {
		return ErrClosed
	}
	return faulted(t.drain())
}

// drain waits for every stream with batches in flight and finishes them; a stream the driver
// refuses to synchronize is answered by a synchronize of the device (Lists.Recover), as poll
// answers it, and so is memory held back (retryHeld), neither while a capture holds a stream
// the tier knows (streams.go): the refusal is then returned with ErrCapturing. t.mu is held.
func (t *Tier) drain() error {
	ls := t.batches.lists
	back, err := ls.Drain(t.batches.back[:0])
	if err != nil {
		err = fmt.Errorf("uvm: wait for transfers: %w", err)
	}
	if ls.Lost() > 0 {
		var rerr error
		// A capture that holds Recover off its synchronize is its error (ErrCapturing).
		if back, rerr = ls.Recover(back, nil); rerr != nil {
			err = errkind.Once(err, fmt.Errorf("uvm: transfers: %w", rerr)) // a fault said once
		} else {
			err = nil // the synchronize covers what the refused waits did not
		}
	}
	return errkind.Once(err, t.finish(back), t.retryHeld())
}
