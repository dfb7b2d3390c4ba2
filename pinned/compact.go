package pinned

import "github.com/pinmalloc/pinmalloc/heap"

// Compact gives every empty page and segment of the pool's heaps back to the arena, as Trim
// does, but leaves to the purge delay what becomes of their memory: it is decommitted (and
// unlocked) once it has stayed unused for the delay, and a region of a source that lends its
// regions (Options.Source whose arena.Caps has Releases) goes back to the source once it has
// stayed empty for the delay. So a program that calls Compact now and then (package ipcpool's
// processes do, on a timer) returns the memory it stopped using within about a purge delay,
// without Trim's decommit of everything at once. After Close it does nothing.
func (p *Pool) Compact() {
	if p.released.Load() || p.closed.Load() {
		return
	}
	// Compact says no error: a refusal leaves its buffers deferred, for the next Trim or Close.
	_ = p.reclaim(true)
	p.collectAll()
}

// collectAll makes every shard take in the frees other goroutines made and give back what is
// empty.
func (p *Pool) collectAll() { p.each((*heap.Heap).Trim) }

// Trim gives every empty page and segment, and the memory of free buffers that no live one
// shares, back to the arena and decommits (and unlocks) it at once, without waiting for the
// purge delay: what stays committed is what the live buffers touch. After Close it releases
// the pool's memory if no buffer is live and none waits for a stream any more (see Close), and
// what the driver refused to give back at the release.
//
// Its error, as device.Heap.Trim's, is the driver's when it could not say whether a stream has
// passed the buffers freed on it (a context with a sticky error, matching ErrDeviceFault; a CUDA
// graph capture that puts off the synchronize of the context a destroyed stream's buffers wait
// for, matching cuda.ErrCapturing only; other refusals match ErrInvalidStream): those buffers
// stay deferred, and the rest is trimmed all the same. It is nil for a pool without streams,
// and after Close but where the driver refuses again to give back what it refused at the
// release. Memory whose decommit the driver refuses stays committed and the pool's, for the
// next Trim or purge.
func (p *Pool) Trim() error {
	if p.released.Load() {
		return wrapError(p.releaseRefused(), ErrClosed)
	}
	if p.closed.Load() {
		p.finishClose(0)
		return nil
	}
	err := p.reclaim(true)
	p.collectAll()
	p.a.Trim()
	return err
}
