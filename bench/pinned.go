package main

import "github.com/pinmalloc/pinmalloc/pinned"

// pinPool is the goroutine-safe front, pinned.Pool.
type pinPool struct{ p *pinned.Pool }

func newPinmallocPool() impl { return goImpl("pinmalloc-pool", openPool) }

// openPool opens a pool of locked memory of the given capacity (pageable where the memlock
// limit is too low: memlock.go).
func openPool(capacity int64) (allocator[[]byte], error) { return openPoolWith(capacity, 0, 0) }

// openPoolWith is openPool with Options.Align align and Options.Shards shards (0: the pool's
// defaults).
func openPoolWith(capacity int64, align, shards int) (allocator[[]byte], error) {
	backend := pinned.Locked
	if hostMemory.pageable {
		backend = pinned.Pageable
	}
	p, err := pinned.New(pinned.Options{Capacity: int(capacity), Backend: backend, Align: align, Shards: shards})
	if err != nil {
		return nil, err
	}
	return pinPool{p}, nil
}

func (a pinPool) alloc(n int) ([]byte, error) { return a.p.Alloc(n) }
func (a pinPool) free(b []byte) error         { return a.p.Free(b) }
func (pinPool) touch(b []byte)                { b[0] = 1 }
func (a pinPool) close() error                { return a.p.Close() }

// traceStats says how the pool held its memory over a trace: its provider (1 for VMM host
// granules, 0 otherwise) and its commit unit, its shards, what it committed and gave back, and
// what it kept.
func (a pinPool) traceStats() []traceStat {
	st := a.p.Stats()
	vmm := 0.0
	if st.Provider == "cuda-host-vmm" {
		vmm = 1
	}
	return []traceStat{
		{"provider_vmm", "bool", vmm},
		{"granule_bytes", "B", float64(st.Granule)},
		{"shards", "heaps", float64(st.Shards)},
		{"commit_bytes", "B", float64(st.CommitBytes)},
		{"commit_ms_per_gib", "ms", float64(st.CommitPerGiB) / 1e6},
		{"purged_bytes", "B", float64(st.Purged)},
		{"decommits", "calls", float64(st.Decommits)},
		{"kept_end_bytes", "B", float64(st.Kept)},
		{"forced_purges", "purges", float64(st.ForcedPurges)},
	}
}

func (a pinPool) footprint() (held, resident uint64) {
	c := a.p.Usage().Committed // no allocation while sampling
	return c, c
}
