package uvm

import "testing"

func TestStatsString(t *testing.T) {
	s := Stats{Policy: "lru", Mover: "kernel", Budget: 64 << 20, Blocks: 3, LiveBytes: 3 << 20,
		DeviceBytes: 2 << 20, HostBytes: 1 << 20, PinnedBlocks: 1, HostHeldBytes: 1 << 20, Hits: 3, Misses: 1,
		CleanEvictions: 1, CleanBytes: 1 << 20, Allocs: 3, Pending: 1}
	s.In[CauseAcquire] = Traffic{Blocks: 1, Bytes: 1 << 20}
	s.Out[CausePressure] = Traffic{Blocks: 2, Bytes: 2 << 20}
	want := `uvm tier: policy lru, mover kernel, budget 64 MiB
  blocks:   3 live blocks, 3 MiB: 2 MiB on the device (1 block acquired), 1 MiB on the host, 0 B fresh
  memory:   1 MiB of host buffers held, 0 B of spare VRAM; 3 allocs, 0 frees
  acquire:  3 hits, 1 miss (hit rate 75.0%)
  moved:    1 block (1 MiB) in, 2 blocks (2 MiB) out; 1 clean eviction (1 MiB not copied)
    acquire:      1 block in, 0 blocks out
    pressure:     0 blocks in, 2 blocks out
  pressure: 0 thrash events, 0 overrides, 0 heap refusals answered, 0 host copies dropped
  batches:  0 failed, 1 in flight
`
	if got := s.String(); got != want {
		t.Errorf("Stats.String() =\n%s\nwant\n%s", got, want)
	}
}
