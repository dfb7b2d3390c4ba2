package pinned

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// verify checks the pool's stream state after a mutating stream operation, in builds with
// invariants.Enabled (-tags invariants, -race), and panics if it is inconsistent; elsewhere it
// compiles to nothing.
func (o *streamOrder) verify() {
	if !invariants.Enabled {
		return
	}
	o.reclMu.Lock()
	defer o.reclMu.Unlock()
	o.mustVerify()
}

// mustVerify panics with consistent's error. reclMu is held.
func (o *streamOrder) mustVerify() {
	if err := o.consistent(); err != nil {
		panic(err)
	}
}

// consistent checks, with every lock of the stream state held (reclMu by the caller), that:
// the lists are sound (streamq.Lists.Verify: each list is the map's entry for its stream, it
// has an event exactly when it has marked buffers, the counts are those of the buffers); a
// deferred buffer's tag says no stream
// is recorded on it (streamtag.go); a buffer deferred on one stream is on one
// list once and has no use; a shared one is on as many lists as its use has streams left to
// pass it, and its use is freed; the weight and shared counts are those of the buffers.
func (o *streamOrder) consistent() error {
	for i := range o.uses {
		o.uses[i].mu.Lock()
		defer o.uses[i].mu.Unlock()
	}
	if len(o.done) != 0 {
		return fmt.Errorf("pinned: invariant: %d buffers in reclaim's scratch between reclaims", len(o.done))
	}
	var weight int64
	var tagErr error
	own := map[uintptr]int{}
	shared := map[uintptr]int{}
	sharedN := map[uintptr]uintptr{}
	err := o.lists.Verify(func(_ uintptr, marked, open []deferred) {
		for _, bufs := range [][]deferred{open, marked} {
			for _, d := range bufs {
				if t := o.tagAt(d.addr); t != tagNone && t != tagLocked && tagErr == nil {
					tagErr = fmt.Errorf("pinned: invariant: deferred buffer %#x has tag %#x, of a live one", d.addr, t)
				}
				if d.shared {
					shared[d.addr]++
					sharedN[d.addr] = d.n
					continue
				}
				own[d.addr]++
			}
		}
	})
	if err = errors.Join(err, tagErr); err != nil {
		return fmt.Errorf("pinned: %w", err)
	}
	for addr, c := range own {
		if c != 1 {
			return fmt.Errorf("pinned: invariant: buffer %#x deferred %d times", addr, c)
		}
		if _, ok := o.shard(addr).m[addr]; ok {
			return fmt.Errorf("pinned: invariant: buffer %#x deferred on one stream has a use", addr)
		}
	}
	var nShared, bytesShared int64
	for i := range o.uses {
		for addr, u := range o.uses[i].m {
			if !u.freed {
				if shared[addr] != 0 {
					return fmt.Errorf("pinned: invariant: live buffer %#x is on %d lists", addr, shared[addr])
				}
				continue
			}
			if shared[addr] != u.left || u.left < 1 {
				return fmt.Errorf("pinned: invariant: buffer %#x waits for %d streams, is on %d lists", addr, u.left, shared[addr])
			}
			nShared++
			bytesShared += int64(sharedN[addr])
			weight += weigh(sharedN[addr])
			delete(shared, addr)
		}
	}
	for addr := range shared {
		return fmt.Errorf("pinned: invariant: shared buffer %#x on a list has no use", addr)
	}
	if nShared != o.shared.Load() || bytesShared != o.sharedBytes.Load() {
		return fmt.Errorf("pinned: invariant: %d shared buffers (%d bytes) counted, %d (%d bytes) found", o.shared.Load(), o.sharedBytes.Load(), nShared, bytesShared)
	}
	if weight != o.sharedWeight.Load() {
		return fmt.Errorf("pinned: invariant: shared weight %d, shared buffers weigh %d", o.sharedWeight.Load(), weight)
	}
	return nil
}

// tagAt returns the tag of the buffer at addr; tagNone where it has none, or o has no group
// (a state built by a test).
func (o *streamOrder) tagAt(addr uintptr) uintptr {
	if o.g == nil {
		return tagNone
	}
	if t := o.g.Tag(addr); t != nil {
		return t.Load()
	}
	return tagNone
}
