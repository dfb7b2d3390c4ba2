package uvm

import (
	"fmt"
	"slices"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// Release events: how the tier's copies are ordered after the user's work on a block. A Release
// (or the Free of an acquired block) records an event on the user's stream, one per block and
// stream, re-recorded by later releases. Before a block's bytes are copied off the device or its
// memory is retired, the D2H stream waits on the newest release event of each stream that used it,
// and on the block's restore if it is still in flight, so the copy reads what the user's work wrote
// (PyTorch's record_stream). A block's release events are reused once the waits on them are queued
// (recording an event again does not affect a wait queued before).
//
// A stream's handle outlives the stream: the driver gives a destroyed stream's handle value to a
// stream created later, whose work is not ordered after the old one's. So ForgetStream makes the
// release events recorded on the stream it forgets stand for that stream alone
// (forgetReleases): no later use of the handle takes one for its own stream's, whose wait it
// skips, nor for the newest of its stream, the only one a batch waits for.

// releases are the tier's release events: one per block and stream a use of the block ended
// on, and idle ones to record next; and the waits of the batch being built.
type releases struct {
	seq     uint64       // release events recorded, to order them
	forgets uint64       // streams forgotten with release events in flight (relEvent.gone)
	idle    []cuda.Event // release events not recorded for a block now (see putReleases)
	waits   []relEvent   // what the batch being built waits for (addWaits, queueWaits)
}

// relEvent is an event recorded on stream s when a use of a block ended; seq orders the
// release events of all blocks, so that a batch waits only on the newest of each stream. gone,
// when not 0, says that s was forgotten after the record (forgetReleases), the gone'th stream
// forgotten so: the event is of a stream of its own, whatever stream has the handle s now.
type relEvent struct {
	s    cuda.Stream
	ev   cuda.Event
	seq  uint64
	gone uint64
}

// of reports whether r is a release on the stream that has handle s now.
func (r *relEvent) of(s cuda.Stream) bool { return r.s == s && r.gone == 0 }

// recordRelease records (or re-records) b's release event on s, unless a CUDA graph capture
// holds s: then it records nothing, changes nothing and returns an error matching
// pinmalloc.ErrCapturing (the event would be a node of the user's graph, standing for no point
// of the stream's work; streamq.RecordOutsideCapture asks and records in one cgo call). An
// event the driver cannot make records nothing: an error matching streamq.ErrNoEvent. t.mu is
// held.
func (t *Tier) recordRelease(b *block, s cuda.Stream) error {
	for i := range b.rel {
		if r := &b.rel[i]; r.of(s) {
			if err := streamq.RecordOutsideCapture(t.dev, uintptr(r.ev), uintptr(s)); err != nil {
				if icuda.EventTainted(icuda.Event(r.ev)) {
					// A capture begun meanwhile took the record: the event stands for no point
					// of s now. The pool lets it go, destroyed once the capture has ended.
					t.engine.events.Put(uintptr(r.ev))
					b.rel = slices.Delete(b.rel, i, i+1)
				}
				return err
			}
			t.rel.seq++
			r.seq = t.rel.seq
			return nil
		}
	}
	var ev cuda.Event
	if k := len(t.rel.idle); k > 0 {
		ev, t.rel.idle = t.rel.idle[k-1], t.rel.idle[:k-1]
	} else {
		e, err := t.engine.events.Get()
		if err != nil { // s not asked: the driver's want or refusal (pinmalloc.ErrRefused)
			return fmt.Errorf("%w: %w", streamq.ErrNoEvent, err)
		}
		ev = cuda.Event(e)
	}
	if err := streamq.RecordOutsideCapture(t.dev, uintptr(ev), uintptr(s)); err != nil {
		if icuda.EventTainted(icuda.Event(ev)) {
			t.engine.events.Put(uintptr(ev)) // a capture took it (above): never reused
		} else {
			t.rel.idle = append(t.rel.idle, ev)
		}
		return err
	}
	t.rel.seq++
	b.rel = append(b.rel, relEvent{s: s, ev: ev, seq: t.rel.seq})
	return nil
}

// mustWait reports whether waitReleases would queue a wait on s. t.mu is held.
func (t *Tier) mustWait(b *block, s cuda.Stream) bool {
	for i := range b.rel {
		if r := &b.rel[i]; !r.of(s) && (b.waitS != s || r.seq > b.waitSeq) {
			return true
		}
	}
	return false
}

// waitReleases makes s wait for the newest release event of every other stream the block was
// used on since its last migration, so that work queued on s after an Acquire sees what the
// work released on those streams wrote: a block handed from one stream to another while it
// stays on the device is ordered as one evicted and brought back is, through the tier's copies.
// A block acquired again on the stream that waited last, with no release on another stream
// since, costs a compare per release event and no driver call. t.mu is held.
func (t *Tier) waitReleases(b *block, s cuda.Stream) error {
	for i := range b.rel {
		r := &b.rel[i]
		if r.of(s) || (b.waitS == s && r.seq <= b.waitSeq) {
			continue
		}
		if err := t.dev.StreamWaitEvent(uintptr(s), uintptr(r.ev)); err != nil {
			return fmt.Errorf("the release on stream %#x: %w", r.s, err)
		}
	}
	b.waitS, b.waitSeq = s, t.rel.seq
	return nil
}

// putReleases keeps b's release events for the next releases (t.rel.idle: a stack under t.mu,
// which costs an eviction no lock per block, as the event pool's would), once waits on them
// are queued: recording an event again does not affect a wait queued before.
func (t *Tier) putReleases(b *block) {
	for _, r := range b.rel {
		t.rel.idle = append(t.rel.idle, r.ev)
	}
	b.rel = b.rel[:0]
}

// addWaits adds to t.rel.waits what a copy out of (or a free of) b must wait for: the newest
// release event of each stream, and b's restore if it may be in flight (as a wait on the H2D
// stream's event, stream 0 marking it).
func (t *Tier) addWaits(b *block) {
	for _, r := range b.rel {
		t.addWait(r)
	}
	if b.readySeq != 0 && t.pending(dirH2D, b.readySeq) {
		t.addWait(relEvent{s: t.engine.h2d, ev: b.readyEv, seq: b.readySeq})
	}
}

// addWait keeps the newest event per stream in t.rel.waits.
func (t *Tier) addWait(r relEvent) {
	for i := range t.rel.waits {
		if w := &t.rel.waits[i]; w.s == r.s && w.gone == r.gone {
			if r.seq > w.seq {
				*w = r
			}
			return
		}
	}
	t.rel.waits = append(t.rel.waits, r)
}

// forgetReleases makes the release events recorded on s, which ForgetStream forgets, stand for s
// alone (see the file comment). When s has run all its own work (streamq's Points.Quiet: a
// query, unless a capture holds s, asked once a block has such an event), its events have all
// passed: they go back to t.rel.idle. Else each is marked gone, with a number no other forgotten
// stream's events have, and stays until the block next moves, as any release event does. A
// block whose releases s waited for last makes the next stream to acquire it wait for them again
// (s's own release, recorded after its waits, orders them too; the stream that waited is no
// longer s). The default streams' handles name the same stream for good: nothing changes. t.mu
// is held.
func (t *Tier) forgetReleases(s cuda.Stream) {
	if streamq.DefaultStream(uintptr(s)) {
		return
	}
	t.rel.forgets++
	asked, passed := false, false
	for i := range t.blocks {
		b := &t.blocks[i]
		if b.waitS == s {
			b.waitS, b.waitSeq = 0, 0 // waited for nothing: seq starts at 1
		}
		k := 0
		for _, r := range b.rel {
			if r.of(s) {
				if !asked {
					quiet, err := t.streams.Points().Quiet(uintptr(s))
					asked, passed = true, err == nil && quiet
				}
				if passed {
					t.rel.idle = append(t.rel.idle, r.ev)
					continue
				}
				r.gone = t.rel.forgets
			}
			b.rel[k] = r
			k++
		}
		clear(b.rel[k:])
		b.rel = b.rel[:k]
	}
}

// waitFault, set by tests only, makes queueWaits fail with its error.
var waitFault error

// queueWaits makes stream s wait on every event of t.rel.waits.
func (t *Tier) queueWaits(s cuda.Stream) error {
	if waitFault != nil {
		return waitFault
	}
	for _, w := range t.rel.waits {
		if err := t.dev.StreamWaitEvent(uintptr(s), uintptr(w.ev)); err != nil {
			return fmt.Errorf("uvm: wait on stream %#x for stream %#x: %w", s, w.s, err)
		}
	}
	return nil
}
