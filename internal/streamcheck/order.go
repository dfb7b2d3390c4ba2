package streamcheck

import "sort"

// What each stream has run: the legacy default stream's implicit order.
//
// The model numbers every piece of work it queues (a copy, a memset) with a clock that grows
// with each call, as the fake's global sequence does, and keeps for each stream slot the work
// it knows has run: every piece of that slot's work numbered up to ran[slot]. An object is busy
// until the slot of its last work has run past that work's number.
//
// Non-blocking streams run their own work only. With a configuration's legacy mix, blocking
// streams and the legacy default stream (the slot after the user streams) order their work
// against each other (CUDA's stream-sync-behavior, which the fake models: see "Queued work" in
// internal/fakecuda/fakedriver.c.in): work on the legacy stream runs after the work queued
// before it on every blocking stream, and work on a blocking stream after the work queued
// before it on the legacy stream. So a synchronize of a blocking stream also runs the legacy
// stream's work queued before its last work, and, through that work, every blocking stream's
// work queued before the latest of it; a synchronize of the legacy stream runs every blocking
// stream's work queued before the legacy stream's last. Every dependency points at work queued
// earlier, so these two steps are the whole closure.
//
// The model counts only the work it queues itself (the libraries queue more: events, scrubs,
// waits); a synchronize may run more than it credits, never less, so the objects it calls
// idle are idle, and the bytes it compares are exact.

// mark is a point in one stream slot's work: slot has passed it once ran[slot] >= at.
type mark struct {
	slot int // -1: none
	at   uint64
}

var noMark = mark{slot: -1}

// legacySlot is the slot of the legacy default stream, or -1 when the configuration has none.
func (w *world) legacySlot() int {
	if w.cfg.Legacy {
		return w.cfg.Streams
	}
	return -1
}

// blocking reports whether slot k is a user stream created blocking (ordered with the legacy
// stream).
func (w *world) blocking(k int) bool {
	return w.cfg.Legacy && k >= 0 && k < w.cfg.Streams && w.cfg.Blocking&(1<<uint(k)) != 0
}

// legacyOrdered reports whether slot k's work is ordered with the legacy stream's: the legacy
// stream itself and the blocking streams.
func (w *world) legacyOrdered(k int) bool {
	return k >= 0 && (k == w.legacySlot() || w.blocking(k))
}

// ordered reports whether work queued on slot k now runs after the work queued on slot b
// before it: the same stream, or one of them the legacy stream and the other blocking.
func (w *world) ordered(b, k int) bool {
	if b == k {
		return true
	}
	l := w.legacySlot()
	return (b == l && w.blocking(k)) || (k == l && w.blocking(b))
}

// usable says whether an object busy on stream slot busy (-1: idle) may be touched by work on
// slot k without a synchronize first (the contract): its last work is ordered before k's.
func (w *world) usable(busy, k int) bool { return busy < 0 || w.ordered(busy, k) }

// queue notes a piece of work queued on slot k now and returns its mark.
func (w *world) queue(k int) mark {
	w.clock++
	w.last[k] = w.clock
	if k == w.legacySlot() {
		w.legacyWork = append(w.legacyWork, w.clock)
	}
	return mark{slot: k, at: w.clock}
}

// tick returns a mark that no work holds: a point between the work queued before and after
// it, which a slot passes when it runs everything queued on it before the point (a free,
// a fresh block).
func (w *world) tick() uint64 {
	w.clock++
	return w.clock
}

// passedMark reports whether m's slot has run past it.
func (w *world) passedMark(m mark) bool { return m.slot < 0 || w.ran[m.slot] >= m.at }

// raise notes that slot k has run its work up to at.
func (w *world) raise(k int, at uint64) { w.ran[k] = max(w.ran[k], at) }

// synced records that slot k has run all the work queued on it (a synchronize), with what the
// legacy order ran before it, and settles the objects.
func (w *world) synced(k int) {
	w.raise(k, w.clock)
	l := w.legacySlot()
	switch {
	case k == l:
		for b := range w.cfg.Streams {
			if w.blocking(b) {
				w.raise(b, w.last[l])
			}
		}
	case w.blocking(k):
		w.raise(l, w.last[k])
		// The latest legacy work before k's last, and the blocking streams' work before it.
		i := sort.Search(len(w.legacyWork), func(i int) bool { return w.legacyWork[i] > w.last[k] })
		if i > 0 {
			for b := range w.cfg.Streams {
				if w.blocking(b) {
					w.raise(b, w.legacyWork[i-1])
				}
			}
		}
	}
	w.settle()
}

// completed records that every slot has run all its work (the fake's Complete).
func (w *world) completed() {
	for k := range w.ran {
		w.ran[k] = w.clock
	}
	w.settle()
}

// settle makes idle the objects whose last work has run, and drops the frees pendingFreed no
// longer counts.
func (w *world) settle() {
	for _, fs := range []*[]freed{&w.poolFreed, &w.devFreed} {
		out := (*fs)[:0]
		for _, f := range *fs {
			if w.pending(f) {
				out = append(out, f)
			}
		}
		*fs = out
	}
	for _, d := range w.dev {
		if d.busy >= 0 && w.passedMark(mark{d.busy, d.busyAt}) {
			d.busy = -1
		}
	}
	for _, b := range w.bufs {
		if b.busy >= 0 && w.passedMark(mark{b.busy, b.busyAt}) {
			b.busy = -1
		}
	}
	for _, u := range w.tb {
		if u.busy >= 0 && u.pins == 0 && w.passedMark(mark{u.busy, u.busyAt}) {
			u.busy = -1
		}
	}
}

// pendingFreed is the bytes freed whose streams may not have passed them, as the heap or the
// pool can see it while Hold keeps every query answering "not ready". A free on a stream
// ordered with the legacy stream is passed, for them, only once the legacy stream (and, for
// a free on the legacy stream, every blocking stream) has nothing queued, whatever queued it:
// a query of the stream alone does not tell, and an event recorded after the free waits for
// that work. The model does not see all of the libraries' own work (their events), so it
// counts such a free as pending for as long as Hold is on.
func (w *world) pendingFreed(fs []freed) int {
	n := 0
	for _, f := range fs {
		if w.pending(f) {
			n += f.n
		}
	}
	return n
}

func (w *world) pending(f freed) bool {
	return !w.passedMark(f.marks[0]) || !w.passedMark(f.marks[1]) ||
		w.hold && (w.legacyOrdered(f.marks[0].slot) || w.legacyOrdered(f.marks[1].slot))
}
