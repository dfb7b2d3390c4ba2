package uvm

import (
	"strings"
	"testing"
)

func TestStatsString(t *testing.T) {
	s := Stats{Policy: "lru", Mover: "kernel", Budget: 64 << 20, Blocks: 3, LiveBytes: 3 << 20,
		DeviceBytes: 2 << 20, HostBytes: 1 << 20, AcquiredBlocks: 1, HostHeldBytes: 1 << 20, Hits: 3, Misses: 1,
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
	s.HeldBackDeviceBytes, s.HeldBackHostBytes = 64<<10, 32<<10
	want += "  held:     64 KiB of VRAM and 32 KiB of host buffers kept out of use after a failed wait\n"
	if got := s.String(); got != want {
		t.Errorf("Stats.String() with memory held back =\n%s\nwant\n%s", got, want)
	}
	s.HeldBackDeviceBytes, s.HeldBackHostBytes, s.Released = 0, 0, true
	want = strings.TrimSuffix(want, "  held:     64 KiB of VRAM and 32 KiB of host buffers kept out of use after a failed wait\n")
	want += "  released: closed, all it held given back\n"
	if got := s.String(); got != want {
		t.Errorf("Stats.String() of a released tier =\n%s\nwant\n%s", got, want)
	}
}

// TestStatsIterators checks Stats.Traffic and AcquireLatency.Outcomes: every cause in order with
// its direction's traffic, and the three outcomes in order, each stopping when asked.
func TestStatsIterators(t *testing.T) {
	var s Stats
	s.In[CauseAcquire] = Traffic{Blocks: 1, Bytes: 10}
	s.Out[CausePressure] = Traffic{Blocks: 2, Bytes: 20}
	for _, toDevice := range []bool{true, false} {
		want := s.Out
		if toDevice {
			want = s.In
		}
		n := 0
		for c, tr := range s.Traffic(toDevice) {
			if c != Cause(n) || tr != want[n] {
				t.Fatalf("Traffic(%v) yields %v %v at %d, want %v %v", toDevice, c, tr, n, Cause(n), want[n])
			}
			n++
		}
		if n != int(numCauses) {
			t.Fatalf("Traffic(%v) yields %d causes, want %d", toDevice, n, numCauses)
		}
		for range s.Traffic(toDevice) {
			n--
			break
		}
		if n != int(numCauses)-1 {
			t.Fatal("Traffic went on after break")
		}
	}
	a := AcquireLatency{Hit: Latency{Count: 1}, Miss: Latency{Count: 2}, Host: Latency{Count: 3}}
	var got []string
	for o, l := range a.Outcomes() {
		got = append(got, o)
		if l.Count != uint64(len(got)) {
			t.Fatalf("outcome %s has count %d", o, l.Count)
		}
		if o == "miss" {
			break
		}
	}
	if len(got) != 2 || got[0] != "hit" || got[1] != "miss" {
		t.Fatalf("Outcomes yields %v, want hit, miss (then a break)", got)
	}
}
