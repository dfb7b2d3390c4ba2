package uvm_test

import (
	"context"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestAcquireLatency checks, with every hit timed (TimeEveryHit), that every successful
// acquisition is timed in the right histogram:
// a restore made slow (OnMigrate sleeps 3 ms, under the tier's lock) lands in Miss above
// 2.5 ms, hits in Hit with a median well below that, AcquireHost in Host, and the counts match
// the tier's Hits and Misses.
func TestAcquireLatency(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const slow = 3 * time.Millisecond
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, OnMigrate: func(m uvm.Migration) {
		if m.ToDevice {
			time.Sleep(slow)
		}
	}})
	tr.TimeEveryHit() // not a sample: the counts below are exact
	s := stream(t, dev)
	h, err := tr.Alloc(64 * kib)
	must(t, err)
	_, err = tr.AcquireHost(h, uvm.Write) // a host copy, so that the Acquire restores it
	must(t, err)
	must(t, tr.ReleaseHost(h))
	_, err = tr.Acquire(h, s, uvm.Read) // the miss
	must(t, err)
	must(t, tr.Release(h, s))
	const hits = 100
	for i := 0; i < hits; i++ {
		acquire := tr.Acquire
		if i == 0 {
			acquire = func(h uvm.Handle, s cuda.Stream, m uvm.Mode) (cuda.DevicePtr, error) {
				return tr.AcquireContext(context.Background(), h, s, m)
			}
		}
		_, err := acquire(h, s, uvm.Read)
		must(t, err)
		must(t, tr.Release(h, s))
	}
	if _, err := tr.Acquire(h, 0xdead, uvm.Read); err == nil { // a failure is not timed
		t.Fatal("Acquire on an unknown stream succeeded")
	}

	st := tr.Stats()
	lat := st.AcquireLatency
	if lat.Hit.Count != hits || lat.Miss.Count != 1 || lat.Host.Count != 1 {
		t.Fatalf("counts: hit %d, miss %d, host %d; want %d, 1, 1", lat.Hit.Count, lat.Miss.Count, lat.Host.Count, hits)
	}
	if lat.Hit.Count+lat.Miss.Count != st.Hits+st.Misses {
		t.Errorf("timed %d acquisitions; Stats counts %d hits and %d misses", lat.Hit.Count+lat.Miss.Count, st.Hits, st.Misses)
	}
	for name, l := range map[string]uvm.Latency{"hit": lat.Hit, "miss": lat.Miss, "host": lat.Host} {
		if len(l.Bounds) != uvm.LatencyBuckets-1 {
			t.Fatalf("%s: %d bounds, want %d", name, len(l.Bounds), uvm.LatencyBuckets-1)
		}
		var n uint64
		for _, c := range l.Counts {
			n += c
		}
		if n != l.Count {
			t.Errorf("%s: buckets add up to %d, Count is %d", name, n, l.Count)
		}
	}
	for i, b := range lat.Miss.Bounds {
		if b < slow && lat.Miss.Counts[i] != 0 {
			t.Errorf("the slow miss is counted in the bucket up to %v: %v", b, lat.Miss.Counts)
		}
	}
	if lat.Miss.Sum < slow {
		t.Errorf("miss latency sum %v, below the %v the restore slept", lat.Miss.Sum, slow)
	}
	if p50 := lat.Hit.Quantile(0.5); p50 <= 0 || p50 > time.Millisecond {
		t.Errorf("hit median %v, want in (0, 1ms]; buckets %v", p50, lat.Hit.Counts)
	}
	if all := lat.Device(); all.Count != hits+1 || all.Sum != lat.Hit.Sum+lat.Miss.Sum {
		t.Errorf("Device(): count %d, sum %v", all.Count, all.Sum)
	}
}

// TestAcquireLatencySamplesHits checks that a tier times one hit in 16, and every miss, the
// unsampled ones included (timed from the moment the miss is found).
func TestAcquireLatencySamplesHits(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20})
	s := stream(t, dev)
	h, err := tr.Alloc(64 * kib)
	must(t, err)
	const hits = 16 * 10
	for i := 0; i < 1+hits; i++ { // a miss (the block's first restore), then hits
		_, err := tr.Acquire(h, s, uvm.Read)
		must(t, err)
		must(t, tr.Release(h, s))
	}
	st := tr.Stats()
	lat := st.AcquireLatency
	if st.Misses != 1 || st.Hits != hits {
		t.Fatalf("hits %d, misses %d; want %d, 1", st.Hits, st.Misses, hits)
	}
	if lat.Miss.Count != 1 || lat.Miss.Sum <= 0 {
		t.Errorf("miss: count %d, sum %v; want 1 miss timed", lat.Miss.Count, lat.Miss.Sum)
	}
	if lat.Hit.Count != hits/16 {
		t.Errorf("hit: %d timed of %d, want %d", lat.Hit.Count, hits, hits/16)
	}
}
