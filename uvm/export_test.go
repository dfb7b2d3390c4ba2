package uvm

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// MaxKnownStreams is the bound of the streams the tier knows (streams.go).
const MaxKnownStreams = maxKnownStreams

// The largest DeviceBudget and HostCapacity of a tier with its own device heap and host pool
// (options.go).
const (
	MaxOwnBudget       = maxOwnBudget
	MaxOwnHostCapacity = maxOwnHostCapacity
)

// Verify checks the tier's accounting against its blocks (verify.go).
func (t *Tier) Verify() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	return t.verify()
}

// SkewAccounts adds d to the tier's count of device bytes, so that a test can see Verify
// catch the accounts disagreeing with the blocks.
func (t *Tier) SkewAccounts(d uintptr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.acct.device += d
}

// SkewBatches adds d to the number of the newest batch completed in the D2H direction, so that
// a test can see Verify catch a batch in flight that the tier counts as completed (a block
// would no longer wait for it), or a completed one it counts as in flight.
func (t *Tier) SkewBatches(d uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.batches.done[dirD2H] += d
}

// D2HStream returns the tier's own D2H stream (evictions and retired memory), so that a test
// can make the driver refuse it without a fault: destroyed under the tier, its queued work
// still runs and its synchronize is refused (a stream the lists find lost, which Recover
// answers with a synchronize of the device).
func (t *Tier) D2HStream() cuda.Stream {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.engine.d2h
}

// FailWaits makes every queueing of a batch's waits fail with err (nil: none fail).
func FailWaits(err error) { waitFault = err }

// TimeEveryHit makes the tier time every Acquire from the call, not one in hitEvery, so that a
// test can check the histograms' counts against Stats' hits and misses.
func (t *Tier) TimeEveryHit() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lat.every, t.lat.n = 1, 0
	t.lat.sample.Store(true)
}

// StreamChecks returns how many times the tier asked the driver about a stream of the user's.
func (t *Tier) StreamChecks() int64 { return t.streams.Checks() }

// VerifyPolicy checks the tier's policy's own queues when it is a TwoQ: every block on one of
// its lists carries that list's tag, and every block tagged as a ghost (A1out) is on the ghost
// list. A block's eviction reported twice (Evicted of a ghost) leaves it on the ghost list
// untagged, and the next Used panics in the list's push.
func (t *Tier) VerifyPolicy() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	q, ok := t.policy.(*twoQ)
	if !ok {
		return nil
	}
	lists := []struct {
		tag uint8
		l   *list
	}{{tagA1in, &q.a1in}, {tagAm, &q.am}, {tagA1out, &q.a1out}}
	for _, c := range q.ns.chunks {
		for i := range c {
			n := &c[i]
			on := false
			for _, l := range lists {
				if l.l.has(n) {
					on = true
					if n.home != l.tag {
						return fmt.Errorf("2q: block %d is on list %d, tagged %d", n.id, l.tag, n.home)
					}
				}
			}
			if n.home == tagA1out && !on {
				return fmt.Errorf("2q: block %d is tagged a ghost and on no list", n.id)
			}
		}
	}
	return nil
}

// ReleaseEvents returns the number of release events block h keeps (one per stream its uses
// ended on since it last moved, and per stream forgotten with its release in flight).
func (t *Tier) ReleaseEvents(h Handle) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, b, err := t.lookup(h)
	if err != nil {
		return 0, err
	}
	return len(b.rel), nil
}

// FailPoolClose makes the next close of a tier's own host pool fail with err, the pool left
// open, as a pool whose deferred buffers' streams have not passed them does.
func FailPoolClose(err error) {
	poolCloseFault = func(*pinned.Pool) error {
		poolCloseFault = nil
		return err
	}
}

// FailNew makes the next New fail with err once it has made all it makes (streams, device heap,
// host pool, mover), after prepare ran with the device heap and host pool it made (nil where
// Options gave them), so that a test can fill them and keep them for itself.
func FailNew(err error, prepare func(*device.Heap, *pinned.Pool)) {
	openFault = func(t *Tier) error {
		openFault = nil
		var h *device.Heap
		var p *pinned.Pool
		if t.mem.ownHeap {
			h = t.mem.heap
		}
		if t.mem.ownPool {
			p = t.mem.pool
		}
		if prepare != nil {
			prepare(h, p)
		}
		return err
	}
}

// HeapStats returns the figures of the tier's device heap.
func (t *Tier) HeapStats() device.Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mem.heap.Stats()
}
