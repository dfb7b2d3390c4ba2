package pinned

import (
	"fmt"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/heap"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// ForgetStream waits until CUDA stream s has passed the work queued on it, takes back the
// buffers whose frees waited for it, and forgets s, as device.Heap.ForgetStream does: call it
// before destroying a stream the pool has seen (FreeAsync, RecordStream, device.Heap's async
// copies of the pool's buffers), once no other goroutine uses s. The driver may give a
// destroyed stream's handle to a new stream, of another device even, which the pool would
// otherwise take for the one it knew. A stream the pool holds nothing for costs no driver call;
// one destroyed already is waited for with a synchronize of the pool's context. Buffers still
// live that s was recorded on forget it too: s has passed what it did with them.
//
// A pool whose memory the driver copies synchronously knows no streams: ForgetStream does
// nothing there. After the pool's memory is released it returns ErrClosed.
func (p *Pool) ForgetStream(s cuda.Stream) error {
	if p.order == nil {
		return nil
	}
	if p.released.Load() {
		return ErrClosed
	}
	p.flushAll()
	err := p.order.forget(s, p.taggedWith(s))
	if err == nil && p.closed.Load() {
		p.finishClose(0)
	}
	return err
}

// taggedWith returns the tags of the live buffers recorded on s alone (streamtag.go), reading
// a batch of buffers at a time under every shard's lock, as Blocks does. It costs a walk of the
// live buffers, once per ForgetStream, where a record costs none.
func (p *Pool) taggedWith(s cuda.Stream) []*atomic.Uintptr {
	if !tagFits(s) {
		return nil
	}
	var tags []*atomic.Uintptr
	var c heap.BlockCursor
	batch := make([]uintptr, 0, 2*blockBatch)
	for done := false; !done; {
		batch = batch[:0]
		ss := p.lockAll()
		done = p.g.BlocksFrom(&c, blockBatch, func(b heap.Block) { batch = append(batch, b.Addr) })
		p.unlockAll(ss)
		for _, addr := range batch {
			if t := p.g.Tag(addr); t != nil && t.Load() == tagOf(s) {
				tags = append(tags, t)
			}
		}
	}
	return tags
}

// forget is ForgetStream; tags are those of the live buffers recorded on s alone.
func (o *streamOrder) forget(s cuda.Stream, tags []*atomic.Uintptr) error {
	o.reclMu.Lock()
	defer o.reclMu.Unlock()
	l := o.lists.Forget(uintptr(s))
	if l == nil && len(tags) == 0 && !o.recorded(s) {
		return nil
	}
	if err := o.points().WaitStream(uintptr(s)); err != nil {
		// Destroyed already, most likely: the context's synchronize waits for its work.
		if err2 := o.points().WaitAll(); err2 != nil {
			return fmt.Errorf("pinned: forget stream %#x: %w; synchronize: %w; the buffers deferred on it stay held", s, err, err2)
		}
	}
	o.dropUses(s)
	for _, t := range tags {
		t.CompareAndSwap(tagOf(s), tagForgot) // or changed since: freed, or a stream added
	}
	if l != nil {
		o.done = o.lists.Release(l, o.done)
	}
	err := o.freeDone(nil)
	if invariants.Enabled {
		o.mustVerify()
	}
	return err
}

// recorded reports whether s is recorded on a live buffer with several streams. reclMu is
// held.
func (o *streamOrder) recorded(s cuda.Stream) bool {
	for i := range o.uses {
		sh := &o.uses[i]
		sh.mu.Lock()
		for _, u := range sh.m {
			if !u.freed && (u.one == s || containsStream(u.more, s)) {
				sh.mu.Unlock()
				return true
			}
		}
		sh.mu.Unlock()
	}
	return false
}

// dropUses takes s, which has passed every use recorded, off the live buffers with several
// streams it is recorded on. The deferred ones (freed) are counted down by the buffers of s's
// list instead.
func (o *streamOrder) dropUses(s cuda.Stream) {
	for i := range o.uses {
		sh := &o.uses[i]
		sh.mu.Lock()
		for addr, u := range sh.m {
			if !u.freed && u.drop(s) {
				sh.m[addr] = u
			}
		}
		sh.mu.Unlock()
	}
}

func containsStream(ss []cuda.Stream, s cuda.Stream) bool {
	for _, t := range ss {
		if t == s {
			return true
		}
	}
	return false
}
