package debugpage

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// countReads counts the calls through the seams of reads.go until the test ends.
func countReads(t *testing.T) (stats, usage *int) {
	stats, usage = new(int), new(int)
	ps, pu, hs, hu := poolStats, poolUsage, heapStats, heapUsage
	t.Cleanup(func() { poolStats, poolUsage, heapStats, heapUsage = ps, pu, hs, hu })
	poolStats = func(p *pinned.Pool) pinned.Stats { *stats++; return ps(p) }
	poolUsage = func(p *pinned.Pool) pinned.Usage { *usage++; return pu(p) }
	heapStats = func(h *device.Heap) device.Stats { *stats++; return hs(h) }
	heapUsage = func(h *device.Heap) device.Usage { *usage++; return hu(h) }
	return stats, usage
}

// TestOneReadPerView: a view of a pool reads its Stats once and its Usage once, so that the
// page's figures and its text are of the same instant (and a Stats is not paid twice).
func TestOneReadPerView(t *testing.T) {
	s := newScene(t)
	defer s.done(t)
	h := New()
	if err := h.AddPool("staging", s.pool); err != nil {
		t.Fatal(err)
	}
	stats, usage := countReads(t)
	h.snapshot()
	if *stats != 1 || *usage != 1 {
		t.Errorf("one view read the pool's Stats %d times and its Usage %d times, want once each", *stats, *usage)
	}
}

// TestOneReadPerViewDevice is TestOneReadPerView for a device heap on the fake driver.
func TestOneReadPerViewDevice(t *testing.T) {
	dev, _ := cudatest.Device(t)
	if dev == nil {
		return
	}
	d, err := device.New(dev, device.Options{Capacity: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	}()
	h := New()
	if err := h.AddDevice("gpu0", d); err != nil {
		t.Fatal(err)
	}
	stats, usage := countReads(t)
	h.snapshot()
	if *stats != 1 || *usage != 1 {
		t.Errorf("one view read the heap's Stats %d times and its Usage %d times, want once each", *stats, *usage)
	}
}
