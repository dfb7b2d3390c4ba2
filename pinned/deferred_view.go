package pinned

import (
	"slices"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// The per-stream view of the deferred buffers, for observers (the debug page): not on any hot
// path.

// StreamDeferred is what waits for one stream: the buffers freed while it may still use them,
// and their bytes.
type StreamDeferred struct {
	Stream  cuda.Stream
	Buffers int
	Bytes   int
}

// DeferredByStream returns, per stream, the buffers deferred on it (FreeAsync, or Free of a
// buffer a stream was recorded on) that wait for it still, ordered by stream handle; nil for a
// pool that orders no reuse after streams or has none waiting. It first puts the shards'
// FreeAsync caches on their streams' lists (as Stats does), so every deferred buffer is
// counted; a buffer that waits for several streams is counted under each. Unlike Stats it
// takes nothing back: a buffer whose stream has passed it but no reclaim has run yet still
// shows. It costs a lock of every shard and of every stream's list: call it from an observer,
// not from a loop of allocations.
func (p *Pool) DeferredByStream() []StreamDeferred {
	o := p.order
	if o == nil {
		return nil
	}
	if !p.released.Load() {
		p.flushAll()
	}
	var out []StreamDeferred
	o.lists.Range(func(s uintptr, marked, open []deferred) {
		sd := StreamDeferred{Stream: cuda.Stream(s), Buffers: len(open) + len(marked)}
		for _, d := range open {
			sd.Bytes += int(d.n)
		}
		for _, d := range marked {
			sd.Bytes += int(d.n)
		}
		if sd.Buffers > 0 {
			out = append(out, sd)
		}
	})
	slices.SortFunc(out, func(a, b StreamDeferred) int {
		switch {
		case a.Stream < b.Stream:
			return -1
		case a.Stream > b.Stream:
			return 1
		}
		return 0
	})
	return out
}
