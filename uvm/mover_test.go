package uvm_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/copyengine"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestMovers runs blocks through tiers whose copies go each way the tier can move them: the
// default Batcher with the kernel, the default Batcher when the driver refuses the kernel's
// PTX (it falls back to cuMemcpyBatchAsync), and PerJobMover (one cuMemcpyAsync per block),
// counting the fake's launches, batch calls and copies.
func TestMovers(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	type counts struct{ launches, batches, memcpys int64 }
	count := func() counts { return counts{f.Launches(), f.Batches(), f.Memcpys()} }
	for _, c := range []struct {
		name, mover string
		setup       func(o *uvm.Options)
		used        func(before, after counts) bool
	}{
		{"kernel", "kernel", func(*uvm.Options) {},
			func(b, a counts) bool {
				return a.launches > b.launches && a.batches == b.batches && a.memcpys == b.memcpys
			}},
		{"no-ptx", "batch-api", func(*uvm.Options) { f.FailModuleLoad(1, fakecuda.ResultInvalidPTX) },
			func(b, a counts) bool { return a.launches == b.launches && a.batches > b.batches }},
		{"kernel-precommitted", "kernel", func(o *uvm.Options) { o.HostPrecommit = 1 << 20 },
			func(b, a counts) bool { return a.launches > b.launches }},
		{"per-job", "custom", func(o *uvm.Options) {
			m, err := uvm.PerJobMover(public(dev))
			must(t, err)
			o.Mover = m
		}, func(b, a counts) bool {
			return a.launches == b.launches && a.batches == b.batches && a.memcpys > b.memcpys
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := uvm.Options{DeviceBudget: 256 * kib}
			c.setup(&o)
			tr := newTier(t, dev, o)
			before := count()
			roundTrip(t, dev, tr, 8, 64*kib)
			if st := tr.Stats(); st.Mover != c.mover || !c.used(before, count()) {
				t.Errorf("mover %q (want %q): launches, batches, copies %+v -> %+v", st.Mover, c.mover, before, count())
			}
		})
	}
}

// roundTrip writes n blocks from the host, rewrites each on the device through a budget that
// holds a quarter of them, and checks every byte on the host.
func roundTrip(t *testing.T, dev *icuda.Device, tr *uvm.Tier, n, size int) {
	t.Helper()
	s := stream(t, dev)
	hs := filled(t, tr, n, size)
	for i, h := range hs {
		p, err := tr.Acquire(h, s, uvm.Write)
		must(t, err)
		if !bytes.Equal(readDev(t, dev, s, p, size), pattern(byte(i), size)) {
			t.Fatalf("block %d: device bytes differ", i)
		}
		writeDev(t, dev, s, p, pattern(byte(i+1), size))
		must(t, tr.Release(h, s))
	}
	for i, h := range hs {
		b, err := tr.AcquireHost(h, uvm.Read)
		must(t, err)
		if !bytes.Equal(b, pattern(byte(i+1), size)) {
			t.Fatalf("block %d: host bytes differ", i)
		}
		must(t, tr.ReleaseHost(h))
		must(t, tr.Free(h))
	}
}

// TestMoverCalibrated gives the fake timings under which the gather kernel wins small blocks
// and one cuMemcpyBatchAsync call wins big ones (the kernel needs 64 blocks to fill the link):
// the tier's own Batcher, calibrated when the tier is made, moves 4 KiB blocks with the kernel
// and 256 KiB blocks with the batch call, bytes checked.
func TestMoverCalibrated(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	if !f.SetCost(fakecuda.CostKernel, fakecuda.Cost{CallNs: 4000, MBps: 52000}) ||
		!f.SetCost(fakecuda.CostBatch, fakecuda.Cost{CallNs: 2000, JobNs: 750, MBps: 50000}) || !f.SetKernelSaturation(64) {
		t.Fatal("the fake refused the costs")
	}
	type counts struct{ launches, batches, memcpys int64 }
	count := func() counts { return counts{f.Launches(), f.Batches(), f.Memcpys()} }
	for _, c := range []struct {
		size          int
		kernel, batch bool
	}{{4 * kib, true, false}, {256 * kib, false, true}} {
		tr := newTier(t, dev, uvm.Options{DeviceBudget: int(2 * c.size)})
		before := count()
		roundTrip(t, dev, tr, 8, c.size)
		after := count()
		if st := tr.Stats(); st.Mover != "auto" || (after.launches > before.launches) != c.kernel ||
			(after.batches > before.batches) != c.batch || after.memcpys != before.memcpys {
			t.Errorf("%d-byte blocks: mover %q; launches, batches, copies %+v -> %+v", c.size, st.Mover, before, after)
		}
	}
}

// TestPerJobMover checks that PerJobMover is the device package's per-copy path (a Batcher
// forced to MethodPerCopy), so that a failing copy is numbered as the Batcher numbers it (from
// 0) with the copies before it queued, and that it refuses a device that is not open.
func TestPerJobMover(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	if _, err := uvm.PerJobMover(nil); !errors.Is(err, uvm.ErrInvalidOptions) {
		t.Errorf("PerJobMover(nil): %v", err)
	}
	m, err := uvm.PerJobMover(public(dev))
	must(t, err)
	if b, ok := m.(*copyengine.Batcher); !ok || b.Method() != copyengine.MethodPerCopy {
		t.Fatalf("PerJobMover is %T, want a per-copy *copyengine.Batcher", m)
	}
	const n = 4 * kib
	d, err := dev.MemAlloc(n)
	must(t, err)
	defer func() { must(t, dev.MemFree(d)) }()
	src := pattern(3, n)
	host, err := dev.MemHostAlloc(n, icuda.HostAllocDeviceMap|icuda.HostAllocPortable)
	must(t, err)
	defer func() { must(t, dev.MemFreeHost(host)) }()
	copy(mem.Bytes(host, n), src)
	jobs := []uvm.CopyJob{{Dst: cuda.DevicePtr(d), Src: cuda.DevicePtr(host), Len: int(n)}, {Dst: cuda.DevicePtr(d), Src: cuda.DevicePtr(host + n/2), Len: int(n)}} // the second runs past the end
	err = m.Copy(jobs, 0)
	if !errors.Is(err, cuda.ErrInvalidValue) || !strings.Contains(err.Error(), "job 1 of 2") {
		t.Fatalf("a copy whose second job runs past its buffer: %v", err)
	}
	if !bytes.Equal(readDev(t, dev, 0, cuda.DevicePtr(d), n), src) {
		t.Error("the job before the failing one did not move its bytes")
	}
}
