package pinned

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
)

// The idle purge: what an idle pool gives back.
//
// The arena gives back the memory the heaps give it (freed pages, segments, kept large
// buffers) a purge delay after they do. The heaps' own free memory (free buffers in pages that
// hold live ones, the part of a page its bump index has reached) is theirs to give: each
// shard's heap.Heap.PurgeIdle gives what it has left untouched since its previous call, and
// the pool's purger has it called on every shard about once a purge delay, off the allocating
// goroutines, as the precommit commits. Memory untouched between two looks goes, and the
// arena decommits it at its next tick.
//
// The purger is a timer. The pool's slow paths (an allocation that needed the heap's blocking
// path: a new page, a purged page's memory again) arm it. At each tick, a shard that has run a
// slow path since the previous tick is busy: its next holder looks (on its slow path, which
// holds the shard already: no barrier, and no allocating goroutine of the P waits for the
// purger); a shard whose heap counts operations since the previous tick (heap.Heap.OpsHint,
// read without stopping it) is busy on its fast paths and left alone; the purger holds each
// quiet shard in turn (fast sections revoked, one barrier) and looks there. The timer ticks a
// purge delay apart while slow paths go on; while the pool is quiet the delay doubles, up to
// purgeMaxPeriod: frees and allocations that never leave the fast path arm nothing, so the
// purger keeps looking, less and less often, while buffers are live (any may be freed). It
// stops when a tick finds nothing to give and no buffer live; the next slow path arms it
// again.
//
// Arming costs a slow path a few loads: busy is set, then armed loaded, and a tick that stops
// clears armed, then loads busy, so that either the slow path sees the purger stopped and
// starts it or the tick sees the slow path and goes on (Go's atomics are sequentially
// consistent).
type purger struct {
	delay time.Duration // the pool's purge delay; 0: no purger (a negative PurgeDelay)
	tick  func()        // the pool's purgeTick, made once: a method value made at each arming allocates
	armed atomic.Bool   // the timer will tick
	busy  atomic.Bool   // a slow path ran since the last tick

	mu     sync.Mutex // the timer and its period
	timer  *time.Timer
	period time.Duration
	stop   bool // the pool closed
}

// purgeDelay is the purger's delay for a pool with PurgeDelay d over provider prov: the
// arena's (DefaultPurgeDelay for 0), or 0, no purger, for a negative one or a provider that
// never gives memory back.
func purgeDelay(d time.Duration, prov arena.Provider) time.Duration {
	if d < 0 || !prov.Caps().Decommits {
		return 0
	}
	if d == 0 {
		return arena.DefaultPurgeDelay
	}
	return d
}

// purgeMaxPeriod bounds the time between two ticks of a quiet pool's purger.
const purgeMaxPeriod = time.Second

// purgeSoon runs on a slow path of shard s, which the caller holds: it looks at the shard if
// the purger asked, marks the shard and the pool busy, and starts the purger when it is
// stopped.
func (p *Pool) purgeSoon(s *shard) {
	pg := &p.purge
	if pg.delay == 0 {
		return
	}
	if s.look.Load() {
		s.look.Store(false)
		s.h.PurgeIdle()
	}
	if !s.slow.Load() {
		s.slow.Store(true)
	}
	if !pg.busy.Load() {
		pg.busy.Store(true)
	}
	if !pg.armed.Load() && pg.armed.CompareAndSwap(false, true) {
		pg.schedule(pg.delay)
	}
}

// schedule starts the timer to tick after d, unless the pool closed.
func (pg *purger) schedule(d time.Duration) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.stop {
		return
	}
	pg.period = d
	if pg.timer == nil {
		pg.timer = time.AfterFunc(d, pg.tick)
	} else {
		pg.timer.Reset(d)
	}
}

// purgeTick runs PurgeIdle on every shard and arms the timer again while there may be more.
func (p *Pool) purgeTick() {
	pg := &p.purge
	pending, live := false, false
	var quiet []*shard
	for _, s := range *p.shards.Load() {
		ops, known := p.opsOf(s)
		switch {
		case s.slow.Swap(false):
			s.look.Store(true) // busy with slow paths: the next one looks
			pending = true
		case !known || ops != s.seenOps:
			pending = true // busy on its fast paths: holding it would make their slow paths wait
		default:
			quiet = append(quiet, s)
		}
		s.seenOps = ops
	}
	if !p.closed.Load() && len(quiet) > 0 {
		p.revoke(quiet)
		for _, s := range quiet {
			s.take()
			// Close may have closed the heap: it sets closed first.
			if !p.closed.Load() {
				s.look.Store(false)
				pending = s.h.PurgeIdle() || pending
				live = live || s.h.Usage().Live > 0
			}
			letGo(s)
		}
	}
	busy := pg.busy.Swap(false)
	pg.mu.Lock()
	period := pg.period
	pg.mu.Unlock()
	switch {
	case p.closed.Load():
		pg.armed.Store(false)
		return
	case busy:
		period = pg.delay
	case pending || live:
		period = min(2*period, max(purgeMaxPeriod, pg.delay))
	default:
		pg.armed.Store(false)
		if !pg.busy.Load() || !pg.armed.CompareAndSwap(false, true) {
			return // stopped; or a slow path ran meanwhile, and started it again itself
		}
		period = pg.delay
	}
	pg.schedule(period)
}

// opsOf returns the operations shard s's heap has made so far (heap.Heap.OpsHint), read
// without stopping its fast sections; in a pool without them, where every operation holds the
// shard's mutex, under the mutex if it is free (known is false when it is not: the shard is
// busy).
func (p *Pool) opsOf(s *shard) (ops uint64, known bool) {
	if p.fast {
		return s.h.OpsHint(), true
	}
	if !s.tryLock() {
		return s.seenOps, false
	}
	ops = s.h.OpsHint()
	letGo(s)
	return ops, true
}

// stopPurge stops the purger for good (Close).
func (p *Pool) stopPurge() {
	pg := &p.purge
	pg.mu.Lock()
	defer pg.mu.Unlock()
	pg.stop = true
	if pg.timer != nil {
		pg.timer.Stop()
	}
}

// outOfMemory reports whether an allocation failed for want of memory: room in the heap, or
// memory to commit (the memlock limit, host or device memory). The free memory the shards keep,
// or the deferred buffers, may be what is missing.
func outOfMemory(err error) bool {
	return errors.Is(err, heap.ErrOutOfMemory) || errors.Is(err, arena.ErrMemlock) || errors.Is(err, arena.ErrExhausted)
}

// allocRetries bounds the retries of an allocation refused for want of memory, each after
// every shard has given its free memory back (Pool.allocRest), and from the second on after
// yielding the processor: other goroutines allocating meanwhile may take what one gave back
// first, and free theirs only once they run (three retries without a yield failed 4 runs in
// 150 of TestLarsonUnderMemlock's long form at load 4; eight with it, none in 300).
const allocRetries = 8
