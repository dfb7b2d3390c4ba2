package debugpage

import (
	"fmt"
	"io"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/units"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// The per-stream view of deferred frees: what each CUDA stream holds back, from
// pinned.Pool.DeferredByStream and device.Heap.DeferredByStream.

// StreamDeferred is what waits for one CUDA stream to pass its frees, as the page and
// stats.json show it.
type StreamDeferred struct {
	// Stream is the stream's handle; Buffers the buffers (a pool's) or blocks (a heap's)
	// waiting for it, and Bytes their bytes. Parked frees (a device heap's) wait for a
	// synchronize of the context instead: Stream is then the handle of a stream destroyed
	// before its ForgetStream, or 0 for the frees of held blocks (device.StreamDeferred).
	Stream  cuda.Stream `json:"stream"`
	Buffers int         `json:"buffers"`
	Bytes   int         `json:"bytes"`
	Parked  bool        `json:"parked,omitempty"`
}

// poolStreams is a pool's deferred buffers by stream.
func poolStreams(p *pinned.Pool) []StreamDeferred {
	var out []StreamDeferred
	for _, sd := range p.DeferredByStream() {
		out = append(out, StreamDeferred{Stream: sd.Stream, Buffers: sd.Buffers, Bytes: sd.Bytes})
	}
	return out
}

// heapStreams is a device heap's deferred frees by stream.
func heapStreams(h *device.Heap) []StreamDeferred {
	var out []StreamDeferred
	for _, sd := range h.DeferredByStream() {
		out = append(out, StreamDeferred{Stream: sd.Stream, Buffers: sd.Blocks, Bytes: sd.Bytes, Parked: sd.Parked})
	}
	return out
}

// writeStreams draws a table of the streams holding frees back, when any does.
func writeStreams(w io.Writer, streams []StreamDeferred) {
	if len(streams) == 0 {
		return
	}
	io.WriteString(w, "<table class=\"streams\"><tr><th>stream</th><th>waiting</th><th>bytes</th></tr>\n")
	for _, s := range streams {
		parked := ""
		if s.Parked {
			parked = " (parked: waits for a synchronize of the context)"
		}
		fmt.Fprintf(w, "<tr><td>%#x%s</td><td>%d</td><td>%s</td></tr>\n", s.Stream, parked, s.Buffers, units.Bytes(uint64(s.Bytes)))
	}
	io.WriteString(w, "</table>\n")
}
