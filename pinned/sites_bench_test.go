package pinned

import (
	"io"
	"runtime"
	"testing"
)

// BenchmarkPoolPairSites is BenchmarkPoolPair with Options.RecordSites: what recording
// allocation sites costs per Alloc+Free (compare with BenchmarkPoolPair in the same run).
func BenchmarkPoolPairSites(b *testing.B) {
	poolPairs(b, Options{RecordSites: true})
}

// BenchmarkCallers is the runtime.Callers of RecordSites alone (8 frames).
func BenchmarkCallers(b *testing.B) {
	var pcs [siteDepth]uintptr
	for i := 0; i < b.N; i++ {
		runtime.Callers(5, pcs[:])
	}
}

// BenchmarkUsage is one Pool.Usage with one shard, for samplers.
func BenchmarkUsage(b *testing.B) {
	p := newTestPool(b, Options{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = p.Usage()
	}
}

// BenchmarkPoolPairTrace is BenchmarkPoolPair with Options.Trace writing to io.Discard: what
// recording a trace costs per Alloc+Free.
func BenchmarkPoolPairTrace(b *testing.B) {
	poolPairs(b, Options{Trace: io.Discard})
}
