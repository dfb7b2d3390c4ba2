//go:build cgo && linux

package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/copyengine"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestBaselinesAsUsersRunThem runs the GPU suite's competitors on the fake driver and checks
// each is set up as its users run it: CUDA's host pools pair without a synchronize per
// allocation (stream-ordered: one at the end of the timed loop) and synchronize each allocation
// only where the CPU fills the buffer; both locations are tried (HOST_NUMA, HOST), by the device
// attribute, not the driver version; cuMemAllocAsync's default pool has its release threshold
// at UINT64_MAX while measured and back after; the PyTorch-style cache reuses its events.
func TestBaselinesAsUsersRunThem(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	c := &cudaSuite{}
	if err := c.open(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.close(); err != nil {
			t.Error(err)
		}
	}()
	syncs := func(run func()) int64 {
		before := f.Stat(fakecuda.StreamSyncs)
		run()
		return f.Stat(fakecuda.StreamSyncs) - before
	}
	pools := c.pairPools()
	if len(pools) != 2 || pools[0].name != hostPoolName || pools[1].name != hostPoolHostName {
		t.Fatalf("pair pools %v", pools)
	}
	for _, im := range pools {
		w, err := im.pair(64 << 10)
		if err != nil {
			t.Fatal(err)
		}
		if n := syncs(func() {
			if _, err := w.run(1000); err != nil {
				t.Fatal(err)
			}
		}); n != 1 {
			t.Errorf("%s: 1000 pairs made %d stream synchronizes, want 1 (the loop's end)", im.name, n)
		}
		if err := w.close(); err != nil {
			t.Fatal(err)
		}
	}
	filled, _ := c.anchorSources()
	a, err := filled[0].open(0)
	if err != nil {
		t.Fatal(err)
	}
	if n := syncs(func() {
		for range 10 {
			b, err := a.alloc(4096)
			if err != nil {
				t.Fatal(err)
			}
			a.touch(b)
			if err := a.free(b); err != nil {
				t.Fatal(err)
			}
		}
	}); n != 10 {
		t.Errorf("a host pool whose buffers the CPU fills: %d synchronizes for 10 allocations, want 10", n)
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}

	// The default pool, as PyTorch's cudaMallocAsync backend sets it.
	ma, err := openMallocAsync(c.dev, c.s)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.dev.DefaultMemPool()
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.dev.MemPoolGetAttribute(p, cuda.PoolAttrReleaseThreshold); err != nil || v != math.MaxUint64 {
		t.Errorf("the default pool's release threshold while measured: %d, %v; want UINT64_MAX", v, err)
	}
	if err := ma.close(); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.dev.MemPoolGetAttribute(p, cuda.PoolAttrReleaseThreshold); v != 0 {
		t.Errorf("the default pool's threshold after: %d, want it put back (0)", v)
	}

	// Host pools by the attribute: a 12.9 driver has HOST_NUMA pools and no HOST ones; 12.4
	// neither; the rows say why.
	for v, want := range map[int][2]bool{12040: {false, false}, 12090: {true, false}, 13000: {true, true}} {
		f.SetDriverVersion(v)
		for i, loc := range []int32{cuda.LocationHostNUMA, cuda.LocationHost} {
			why := hostPoolSupport(c.dev, loc)
			if (why == "") != want[i] || (why != "" && !strings.HasPrefix(why, noHostPools)) {
				t.Errorf("driver %d, location %d: %q, want support %v", v, loc, why, want[i])
			}
		}
	}
	f.SetDriverVersion(13000)

	// The PyTorch-style cache over cuMemHostAlloc: a hundred staged buffers, one event.
	th := newTorchHost(hostAllocBacking{c.dev}, deviceEvents{c.dev})
	for range 100 {
		b, err := th.alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		if err := th.freeAfter(b, c.s); err != nil {
			t.Fatal(err)
		}
		if err := c.dev.StreamSynchronize(c.s); err != nil {
			t.Fatal(err)
		}
	}
	if th.created != 1 {
		t.Errorf("the cache created %d events for 100 frees on one stream, want 1 (pooled)", th.created)
	}
	if err := th.close(); err != nil {
		t.Fatal(err)
	}
}

// TestBatchAPILackedIsNA: on a driver before CUDA 13.0 (the fake at 12.4) the batch API's rows
// say the driver lacks it, which the check counts as N/A, not as a failure of the suite; the
// other methods are measured.
func TestBatchAPILackedIsNA(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDriverVersion(12040)
	defer f.SetDriverVersion(13000)
	c := &batchSuite{}
	if err := c.open(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.close(); err != nil {
			t.Error(err)
		}
	}()
	cfg := &config{quick: true, reps: 1, target: time.Millisecond}
	for _, m := range batchMethods {
		rs := resultSet{c: "batch-h2d/64KiB", impl: m.name}
		c.measureBatch(cfg, &rs, m.m, false, 64<<10)
		e, failed := failure(rs.out, rs.c, m.name)
		chk := &check{}
		switch {
		case m.m == copyengine.MethodBatchAPI && (!failed || !chk.naError(result{Metric: "error", Note: e}) || !strings.Contains(e, cuda.CapBatchAPI)):
			t.Errorf("%s on a 12.4 driver: %q, want N/A naming %s", m.name, e, cuda.CapBatchAPI)
		case m.m != copyengine.MethodBatchAPI && failed:
			t.Errorf("%s on a 12.4 driver: %s", m.name, e)
		}
	}
}
