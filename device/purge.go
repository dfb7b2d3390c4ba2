package device

import (
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// The idle purge: what a quiet stream heap gives back.
//
// A stream heap keeps every segment it used (heap.RetainSegments): a block freed on its own
// stream is free in the heap at once, while work queued on the stream may still use it, so
// its memory may go to the arena (where another stream's heap, or the arena's purge, takes it)
// only once the stream has passed every such free. Trim does that by synchronizing each
// stream; the purger does it without a wait, off the allocating goroutines, for the heaps
// that have gone quiet:
//
//   - A timer ticks every purge delay while the heap has streams (it starts with the first
//     stream heap, so neither Alloc nor FreeAsync arms anything). A tick that finds the heap's
//     mutex held does nothing (the heap is busy: the purger never makes an allocation wait
//     for it to get the mutex); else, under the mutex, a stream heap that made an allocation
//     or a free since the previous tick is busy (heap.Heap.OpsHint) and left alone.
//   - A stream heap quiet for a whole tick is asked for: a request naming its count of
//     operations goes on its stream's list in streamq's Lists (trims), the module's one
//     stream-order mechanism: the list's next poll (the same tick's) hands it back at once if
//     the stream is idle, or records one event on the stream and hands it back at a poll that
//     finds the event complete; a stream the driver refuses (destroyed without ForgetStream)
//     is answered by one synchronize of the context (Lists.Reclaim), as the deferred frees are.
//     Close waits for such events as for the deferred frees' (the trims are a peer of the
//     deferred frees' lists in streamq's Settle): they are the heap's, not the user's work.
//   - A busy stream heap that keeps empty segments (heap.Heap.SpareMark) is asked for those it
//     kept at the previous tick: a request naming that mark goes on the same list, and when it
//     comes back the segments still empty since then go to the arena (heap.Heap.ReleaseSpares:
//     their frees were before the mark, so before the point the stream has passed; one reused
//     since is a new spare, past the mark). Its empty pages in segments that hold blocks wait
//     for a quiet tick.
//   - A request handed back whose heap has made no operation since it was pushed is done:
//     every free the heap took came before the push, so before the point the stream has
//     passed. The heap is trimmed (heap.Heap.Trim): its empty pages and segments go to the
//     arena, which decommits them a purge delay later (the driver's cuMemUnmap and
//     cuMemRelease, which do not wait for the device: hence the wait for the stream). A heap
//     busy again since is left; its next quiet tick asks again.
//   - While no stream heap is busy or asked for, the period doubles up to purgeMaxPeriod; the
//     timer stops when the heap has no stream heap it watches (ForgetStream of every one; the
//     default streams' are not watched, below) and at Close.
//
// The heap of a default stream (the legacy one, 0 or its handle 1) is left alone: no query
// finds such a stream idle (its work waits for every blocking stream's earlier work, which a
// query of it does not see), and its same-stream frees record no point, so every ask would
// record an event there, and an operation on the legacy stream is a barrier between all the
// blocking streams: each look of the purger would tie the user's blocking streams together,
// and leave the legacy stream with a point in flight that Close takes for the user's work
// unless it was recorded with the legacy stream's own work all run (ErrBusy on a heap freed
// and synchronized). Such a heap gives its memory back at Trim, at ForgetStream and when an
// Alloc runs out of memory, which synchronize.
//
// What stays is what a stream heap's live blocks need: with 2 MiB VMM granules (the device's
// default provider), every chunk (segment) that holds a live block stays committed whole.
type purger struct {
	delay  time.Duration // the purge delay; 0: no purger
	timer  *time.Timer
	period time.Duration
	armed  bool                    // the timer will tick
	trims  *streamq.Lists[trimReq] // quiet heaps waiting for their stream
	looks  map[*heap.Heap]*look    // each stream heap's state
	done   []trimReq               // requests handed back, to do
	early  bool                    // tests: trim without waiting for the stream (a mutant)
	manual bool                    // tests: no timer, the test calls purgeTick
}

// look is what the purger knows of one stream heap.
type look struct {
	ops    uint64    // the heap's operations at the last tick
	state  lookState // what is left to do
	mark   uint64    // the heap's spares at the last tick (heap.Heap.SpareMark)
	spares bool      // a request for its spares waits for its stream
}

// lookState says where a stream heap is in the purge.
type lookState uint8

const (
	lookBusy  lookState = iota // operations since the last tick (or not looked at yet)
	lookAsked                  // quiet: a request waits for its stream
	lookGiven                  // trimmed at ops: nothing to give until it is busy again
)

// trimReq asks for heap sh to be trimmed once its stream has passed the point, if it has made
// no operation since ops; or, with spares, for its spares kept since mark to be given back.
// frees is the heap's free mark as it was pushed: handed back, the stream has passed it.
type trimReq struct {
	sh     *heap.Heap
	ops    uint64
	mark   uint64
	frees  uint64
	spares bool
}

// purgeMaxPeriod bounds the time between two ticks of a quiet heap's purger.
const purgeMaxPeriod = time.Second

// trimLinger is the polls in a row that find a stream's list of requests empty before it
// leaves the lists: a stream heap asked for again after each busy spell keeps its list.
const trimLinger = 8

// newPurger sets up h's purger over the heap's points, for a heap with PurgeDelay d over
// provider prov: the arena's delay (DefaultPurgeDelay for 0), or none for a negative one or a
// provider that never gives memory back (cuMemAlloc regions: a trim would only move memory
// between streams).
func (h *Heap) newPurger(d time.Duration, prov arena.Provider) {
	if d == 0 {
		d = arena.DefaultPurgeDelay
	}
	if d < 0 || !prov.Caps().Decommits {
		d = 0
	}
	h.purge = purger{
		delay: d, looks: map[*heap.Heap]*look{},
		trims: streamq.NewLists[trimReq](h.lists.Points(), nil, trimLinger),
	}
	// A tick's Recover asks every stream the heap knows too (capturedElsewhere).
	h.purge.trims.SetOthers(h.capturedElsewhere)
	if d > 0 { // made stopped, before any tick can read it
		h.purge.timer = time.AfterFunc(time.Hour, h.purgeTick)
		h.purge.timer.Stop()
	}
}

// capturedElsewhere yields a stream that a CUDA graph capture holds among those the deferred
// frees' lists answer for (their Captured: the heap's streams, the streams they have seen, a
// stream seen only through a copy included, and the legacy stream), if any: the capture check
// of the purge's lists, whose own streams are the heap's alone, before a synchronize of the
// context (Recover), which would end that capture. h.mu is held.
func (h *Heap) capturedElsewhere(yield func(streamq.Stream) bool) {
	if c, held := h.lists.Captured(); held {
		yield(c)
	}
}

// watch starts the purge of new stream heap sh of stream s, and the timer if it is stopped; a
// default stream's heap is not watched (see purger). h.mu is held.
func (h *Heap) watch(s cuda.Stream, sh *heap.Heap) {
	pg := &h.purge
	if pg.delay == 0 || streamq.DefaultStream(streamq.Stream(s)) {
		return
	}
	pg.looks[sh] = &look{ops: sh.OpsHint()}
	if !pg.armed {
		pg.armed = true
		pg.schedule(pg.delay)
	}
}

// schedule starts the timer to tick after d. h.mu is held.
func (pg *purger) schedule(d time.Duration) {
	pg.period = d
	if !pg.manual {
		pg.timer.Reset(d)
	}
}

// purgeTick is a tick of the purger (see purger), on the timer's goroutine. It never waits
// for the heap's mutex: a heap whose mutex is held is busy, and is looked at a delay later.
func (h *Heap) purgeTick() {
	pg := &h.purge
	if !h.mu.TryLock() {
		pg.timer.Reset(pg.delay) // timer and delay are set in New, and not again
		return
	}
	defer h.mu.Unlock()
	if h.closed || !pg.armed {
		return
	}
	h.st.PurgeTicks++
	busy, asked := h.purgeLook()
	switch {
	case len(pg.looks) == 0: // no stream heap watched
		pg.armed = false
		return
	case busy || asked:
		pg.period = pg.delay
	default:
		pg.period = min(2*pg.period, max(purgeMaxPeriod, pg.delay))
	}
	pg.schedule(pg.period)
}

// look is a tick's work: each stream heap's operations compared, the quiet ones asked for, the
// requests whose streams have passed them done. It reports whether a heap was busy, and
// whether one is still asked for. h.mu is held.
func (h *Heap) purgeLook() (busy, asked bool) {
	pg := &h.purge
	for s, sh := range h.streams {
		lk := pg.looks[sh]
		if lk == nil {
			continue // a default stream's: no point recorded there in the background (see purger)
		}
		prev := lk.mark
		mark, spares := sh.SpareMark()
		lk.mark = mark
		switch ops := sh.OpsHint(); {
		case ops != lk.ops:
			lk.ops, lk.state = ops, lookBusy
			busy = true
			if !lk.spares && spares > 0 && prev > 0 {
				// Busy, with empty segments: those kept since the previous tick go back.
				h.purgeAsk(s, trimReq{sh: sh, mark: prev, spares: true})
				lk.spares = true
			}
		case lk.state == lookBusy:
			h.purgeAsk(s, trimReq{sh: sh, ops: ops})
			lk.state = lookAsked
		}
		asked = asked || lk.spares
	}
	// An error leaves the requests the driver refused waiting (their heaps stay asked for),
	// for a later tick; the next Alloc's poll of the deferred frees meets the same refusal.
	// A stream the driver refuses whose refusal no synchronize of the context could answer yet
	// is parked (parkRefused), its heap with it.
	var err error
	if pg.done, err = pg.trims.Reclaim(pg.done, nil); err != nil {
		h.parkRefused()
	}
	h.purgeDone()
	// Those a synchronize of the context has passed (Recover's, say), unless one is a free to
	// clear first (parkFree, ZeroOnFree): its memset on the legacy stream, and the wait for it,
	// are no purger's (it waits for nothing, and queues nothing there): Stats, Sync, Trim or
	// Close settle them all then.
	if len(h.parked) > 0 && !h.parkedClears() {
		_ = h.settleParked(false, noneMine) // kept ones say why at Sync, Trim or Close
	}
	for _, lk := range pg.looks {
		asked = asked || lk.state == lookAsked || lk.spares
	}
	return busy, asked
}

// purgeAsk puts request r for the heap of stream s on s's list (early, the mutant: done at
// once, with no wait for the stream). h.mu is held.
func (h *Heap) purgeAsk(s cuda.Stream, r trimReq) {
	pg := &h.purge
	r.frees = r.sh.FreeMark()
	if pg.early {
		pg.done = append(pg.done, r)
		return
	}
	pg.trims.Push(pg.trims.Get(streamq.Stream(s)), r)
}

// purgeDone does the requests handed back (purger.done): each heap quiet since its request
// is trimmed. h.mu is held.
func (h *Heap) purgeDone() {
	pg := &h.purge
	for _, r := range pg.done {
		lk := pg.looks[r.sh]
		if lk == nil {
			continue // forgotten
		}
		h.passed[r.sh] = max(h.passed[r.sh], r.frees) // (freesPassed)
		switch {
		case r.spares:
			lk.spares = false
			if r.sh.ReleaseSpares(r.mark) > 0 {
				h.st.Purges++
			}
			continue
		case r.sh.OpsHint() != r.ops:
			continue // busy since: a later quiet tick asks again
		}
		r.sh.Trim()
		lk.state = lookGiven
		h.st.Purges++
	}
	clear(pg.done)
	pg.done = pg.done[:0]
}

// purgeForget does the requests waiting on stream s, which the caller has synchronized
// (ForgetStream), before s's heap closes. h.mu is held.
func (h *Heap) purgeForget(s cuda.Stream) {
	pg := &h.purge
	if pg.delay == 0 {
		return
	}
	if l := pg.trims.Forget(streamq.Stream(s)); l != nil {
		pg.done = pg.trims.Release(l, pg.done)
		h.purgeDone()
	}
}

// stop stops the purger for good and gives back the events of its requests, whose streams
// the caller has found idle (Close). h.mu is held.
func (pg *purger) stop() error {
	pg.armed = false
	if pg.delay == 0 {
		return nil
	}
	pg.timer.Stop()
	var err error
	pg.done, err = pg.trims.Reclaim(pg.done, nil)
	clear(pg.done)
	pg.done = pg.done[:0]
	return err
}
