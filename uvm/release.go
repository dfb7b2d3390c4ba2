package uvm

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// Release events: what orders the tier's copies after the user's work on a block.

// relEvent is an event recorded on stream s when a use of a block ended; seq orders the
// release events of all blocks, so that a batch waits only on the newest of each stream.
type relEvent struct {
	s   cuda.Stream
	ev  cuda.Event
	seq uint64
}

// recordRelease records (or re-records) b's release event on s. t.mu is held.
func (t *Tier) recordRelease(b *block, s cuda.Stream) error {
	t.relSeq++
	for i := range b.rel {
		if r := &b.rel[i]; r.s == s {
			r.seq = t.relSeq
			return t.dev.EventRecord(r.ev, s)
		}
	}
	var ev cuda.Event
	if k := len(t.relIdle); k > 0 {
		ev, t.relIdle = t.relIdle[k-1], t.relIdle[:k-1]
	} else {
		var err error
		if ev, err = t.events.Get(); err != nil {
			return err
		}
	}
	if err := t.dev.EventRecord(ev, s); err != nil {
		t.relIdle = append(t.relIdle, ev)
		return err
	}
	b.rel = append(b.rel, relEvent{s: s, ev: ev, seq: t.relSeq})
	return nil
}

// putReleases keeps b's release events for the next releases (t.relIdle: a stack under t.mu,
// which costs an eviction no lock per block, as the event pool's would), once waits on them
// are queued: recording an event again does not affect a wait queued before.
func (t *Tier) putReleases(b *block) {
	for _, r := range b.rel {
		t.relIdle = append(t.relIdle, r.ev)
	}
	b.rel = b.rel[:0]
}

// addWaits adds to t.waits what a copy out of (or a free of) b must wait for: the newest
// release event of each stream, and b's restore if it may be in flight (as a wait on the H2D
// stream's event, stream 0 marking it).
func (t *Tier) addWaits(b *block) {
	for _, r := range b.rel {
		t.addWait(r)
	}
	if b.readySeq != 0 && t.pending(dirH2D, b.readySeq) {
		t.addWait(relEvent{s: t.h2d, ev: b.readyEv, seq: b.readySeq})
	}
}

// addWait keeps the newest event per stream in t.waits.
func (t *Tier) addWait(r relEvent) {
	for i := range t.waits {
		if w := &t.waits[i]; w.s == r.s {
			if r.seq > w.seq {
				*w = r
			}
			return
		}
	}
	t.waits = append(t.waits, r)
}

// queueWaits makes stream s wait on every event of t.waits.
func (t *Tier) queueWaits(s cuda.Stream) error {
	for _, w := range t.waits {
		if err := t.dev.StreamWaitEvent(s, w.ev); err != nil {
			return fmt.Errorf("uvm: wait on stream %#x for stream %#x: %w", s, w.s, err)
		}
	}
	return nil
}
