package main

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	wl "github.com/pinmalloc/pinmalloc/internal/workload"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// uvmPolicy is an eviction policy of the tier under the name the results use.
type uvmPolicy struct {
	name string
	make func() uvm.Policy
}

// uvmPolicies are the two policies every oversubscription case runs with.
var uvmPolicies = []uvmPolicy{{"lru", uvm.LRU}, {"2q", uvm.TwoQ}}

// uvmCounters reads the counters the suite reports from the tier's stats: bytesOut counts the
// bytes copied to the host, not the clean evictions, which copy nothing.
func uvmCounters(st uvm.Stats) (hits, misses, bytesIn, bytesOut uint64) {
	return st.Hits, st.Misses, st.Moved(true).Bytes, st.Moved(false).Bytes - st.CleanBytes
}

// stampBytes is what each write access sets on its block, with a device memset.
const stampBytes = 256

// oversub runs one oversubscription case: a working set of f times the budget in blocks of
// geo.block, filled from the host; an untimed warm-up (every block read once, in order, then one
// pass' worth of the pattern's accesses), so that at 1x every block is resident and the timed part
// sees the steady state; then geo.passes passes' worth of accesses from the pattern's generator,
// timed up to the tier's Sync and the stream's completion. Every writeEach-th access is in write
// mode and memsets the block's first bytes on the device (the block then goes back dirty); the
// others are reads.
func (u *uvmSuite) oversub(cfg *config, name string, p wl.Pattern, pol uvmPolicy, f float64) []result {
	rs := resultSet{c: name, impl: "uvm"}
	if err := u.runOversub(cfg, &rs, p, pol, f); err != nil {
		rs.fail(err)
	}
	return rs.out
}

// uvmWarmHook, when not nil, is called before each access of an oversubscription case's
// warm-up pass, with its index (tests pause there as a loaded machine would).
var uvmWarmHook func(i int)

func (u *uvmSuite) runOversub(cfg *config, rs *resultSet, p wl.Pattern, pol uvmPolicy, f float64) (err error) {
	g := u.geo
	n := int(f * float64(g.budget) / float64(g.block))
	t, err := uvm.New(u.pub, uvm.Options{DeviceBudget: int(g.budget), HostCapacity: (n + 1) * int(g.block), Policy: pol.make(),
		ThrashLapse: g.thrashLapse})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	hs, err := uvmAllocFilled(t, n, g.block)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, uvmFree(t, hs)) }()
	gen, err := wl.New(p, n, uvmSeed)
	if err != nil {
		return err
	}
	var hist wl.Histogram
	stamps := make([]int, n) // the byte block k's first stampBytes were last set to, or -1
	for k := range stamps {
		stamps[k] = -1
	}
	access := func(i int) error {
		k := gen.Next()
		h, m := hs[k], uvm.Read
		if i%g.writeEach == 0 {
			m = uvm.Write
			stamps[k] = int(byte(i))
		}
		a0 := time.Now()
		ptr, err := t.Acquire(h, u.s, m)
		hist.Record(time.Since(a0))
		if err != nil {
			return err
		}
		if m == uvm.Write {
			err = u.dev.MemsetD8Async(uintptr(ptr), byte(i), stampBytes, uintptr(u.s))
		}
		return errors.Join(err, t.Release(h, u.s))
	}
	for _, h := range hs { // warm-up: every block once, then one pass' worth of the pattern
		if _, err := t.Acquire(h, u.s, uvm.Read); err != nil {
			return err
		}
		if err := t.Release(h, u.s); err != nil {
			return err
		}
	}
	for i := range n {
		if uvmWarmHook != nil {
			uvmWarmHook(i)
		}
		if err := access(i); err != nil {
			return err
		}
	}
	if err := errors.Join(t.Sync(), u.dev.StreamSynchronize(uintptr(u.s))); err != nil {
		return err
	}
	hist.Reset()
	accesses := g.passes * n
	if cfg.quick {
		accesses = max(n, accesses/2)
	}
	h0, m0, in0, out0 := uvmCounters(t.Stats())
	t0 := time.Now()
	for i := range accesses {
		if err := access(i); err != nil {
			return err
		}
	}
	if err := errors.Join(t.Sync(), u.dev.StreamSynchronize(uintptr(u.s))); err != nil {
		return err
	}
	el := time.Since(t0).Seconds()
	h1, m1, in1, out1 := uvmCounters(t.Stats())
	if err := uvmVerify(t, hs, g.block, stamps); err != nil {
		return err
	}
	rs.add("gbps", float64(accesses)*float64(g.block)/el/1e9, "GB/s")
	rs.add("accesses_per_sec", float64(accesses)/el, "1/s")
	rs.add("hit_rate", float64(h1-h0)/float64(max(1, h1-h0+m1-m0)), "ratio")
	rs.add("migrated_gbps", float64(in1-in0+out1-out0)/el/1e9, "GB/s")
	rs.add("bytes_in_per_access", float64(in1-in0)/float64(accesses), "B")
	rs.add("bytes_out_per_access", float64(out1-out0)/float64(accesses), "B")
	rs.add("acquire_p50_ns", float64(hist.Quantile(0.5)), "ns")
	rs.add("acquire_p99_ns", float64(hist.Quantile(0.99)), "ns")
	rs.add("blocks", float64(n), "")
	rs.add("block_bytes", float64(g.block), "B")
	return nil
}

// uvmAllocFilled allocates n blocks of size bytes and fills each from the host: byte j of
// block i is byte(i+j).
func uvmAllocFilled(t *uvm.Tier, n, size int) ([]uvm.Handle, error) {
	hs := make([]uvm.Handle, 0, n)
	ramp := uvmRamp(size)
	for i := range n {
		h, err := t.Alloc(size)
		if err != nil {
			return hs, errors.Join(err, uvmFree(t, hs))
		}
		hs = append(hs, h)
		b, err := t.AcquireHost(h, uvm.Write)
		if err != nil {
			return hs, errors.Join(err, uvmFree(t, hs))
		}
		copy(b, ramp[i%256:])
		if err := t.ReleaseHost(h); err != nil {
			return hs, errors.Join(err, uvmFree(t, hs))
		}
	}
	return hs, nil
}

// uvmVerify reads every block on the host and checks its bytes: the ramp uvmAllocFilled wrote,
// except the first stampBytes of a block written on the device, which hold its last stamp.
func uvmVerify(t *uvm.Tier, hs []uvm.Handle, size int, stamps []int) error {
	ramp := uvmRamp(size)
	for i, h := range hs {
		b, err := t.AcquireHost(h, uvm.Read)
		if err != nil {
			return err
		}
		want := ramp[i%256:][:size]
		from := 0
		if stamps[i] >= 0 {
			for j, v := range b[:stampBytes] {
				if v != byte(stamps[i]) {
					return errors.Join(fmt.Errorf("block %d byte %d is %d, want its last stamp %d: the tier lost data", i, j, v, stamps[i]), t.ReleaseHost(h))
				}
			}
			from = stampBytes
		}
		if !bytes.Equal(b[from:size], want[from:]) {
			return errors.Join(fmt.Errorf("block %d: bytes %d to %d are not what was written: the tier lost data", i, from, size), t.ReleaseHost(h))
		}
		if err := t.ReleaseHost(h); err != nil {
			return err
		}
	}
	return nil
}

// uvmRamp returns size+256 bytes with ramp[k] = byte(k): block i's bytes are ramp[i%256:].
func uvmRamp(size int) []byte {
	ramp := make([]byte, size+256)
	for k := range ramp {
		ramp[k] = byte(k)
	}
	return ramp
}

// uvmFree frees every handle.
func uvmFree(t *uvm.Tier, hs []uvm.Handle) error {
	var errs []error
	for _, h := range hs {
		if err := t.Free(h); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// move runs the block-size case of size bytes: two sets A and B of geo.batch bytes each in a
// tier whose budget holds both. Per repetition: A is made dirty on the device (a memset of
// every byte), evicted (timed to Sync: D2H), restored with Prefetch (timed: H2D); then made
// dirty again with B on the host, and evicted while B is prefetched (timed: both directions at
// once). The bytes of a block of each set are checked on the host at the end.
func (u *uvmSuite) move(cfg *config, size int) []result {
	rs := resultSet{c: "uvm-move/" + sizeName(int64(size)), impl: "uvm"}
	if err := u.runMove(cfg, &rs, size); err != nil {
		rs.fail(err)
	}
	return rs.out
}

func (u *uvmSuite) runMove(cfg *config, rs *resultSet, size int) (err error) {
	g := u.geo
	nb := g.batch / size
	if g.maxBlocks > 0 {
		nb = min(nb, g.maxBlocks)
	}
	budget := uintptr(2*g.batch + 2<<20)
	t, err := uvm.New(u.pub, uvm.Options{DeviceBudget: int(budget), HostCapacity: int(budget + uintptr(g.batch))})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	a, err := uvmAllocFilled(t, nb, size)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, uvmFree(t, a)) }()
	b, err := uvmAllocFilled(t, nb, size)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, uvmFree(t, b)) }()
	stamp := func(hs []uvm.Handle, v byte) error { // dirty on the device, every byte v
		for _, h := range hs {
			p, err := t.Acquire(h, u.s, uvm.Write)
			if err != nil {
				return err
			}
			if err := errors.Join(u.dev.MemsetD8Async(uintptr(p), v, uintptr(size), uintptr(u.s)), t.Release(h, u.s)); err != nil {
				return err
			}
		}
		return errors.Join(t.Sync(), u.dev.StreamSynchronize(uintptr(u.s)))
	}
	timed := func(f func() error) (time.Duration, error) {
		t0 := time.Now()
		err := errors.Join(f(), t.Sync())
		return time.Since(t0), err
	}
	var evictT, restoreT, bothT time.Duration
	var v byte
	for rep := range cfg.reps {
		v = byte(2*rep + 1)
		if err := errors.Join(stamp(a, v), stamp(b, v+1), t.Evict(b), t.Sync()); err != nil {
			return err
		}
		d, err := timed(func() error { return t.Evict(a) })
		if err != nil {
			return err
		}
		evictT += d
		if d, err = timed(func() error { return t.Prefetch(a, u.s) }); err != nil {
			return err
		}
		restoreT += d
		if err := stamp(a, v); err != nil { // dirty again: Evict must copy
			return err
		}
		if d, err = timed(func() error { return errors.Join(t.Evict(a), t.Prefetch(b, u.s)) }); err != nil {
			return err
		}
		bothT += d
	}
	if err := u.dev.StreamSynchronize(uintptr(u.s)); err != nil {
		return err
	}
	for _, c := range []struct {
		h    uvm.Handle
		want byte
	}{{a[0], v}, {a[nb-1], v}, {b[0], v + 1}, {b[nb-1], v + 1}} {
		buf, err := t.AcquireHost(c.h, uvm.Read)
		if err != nil {
			return err
		}
		for i, x := range buf {
			if x != c.want {
				return errors.Join(fmt.Errorf("block moved by the tier: byte %d is %d, want %d", i, x, c.want), t.ReleaseHost(c.h))
			}
		}
		if err := t.ReleaseHost(c.h); err != nil {
			return err
		}
	}
	bytes := float64(cfg.reps) * float64(nb*size)
	rs.add("evict_gbps", bytes/evictT.Seconds()/1e9, "GB/s")
	rs.add("restore_gbps", bytes/restoreT.Seconds()/1e9, "GB/s")
	rs.add("bidir_gbps", 2*bytes/bothT.Seconds()/1e9, "GB/s")
	rs.add("batch_bytes", float64(nb*size), "B")
	return nil
}

// acquireResident measures the CPU cost of Acquire of blocks already in VRAM: 4096 blocks of
// 4 KiB that the budget holds, each acquired in turn (timed as one loop) and then released
// (untimed), repeated until about cfg.target has passed.
func (u *uvmSuite) acquireResident(cfg *config) []result {
	rs := resultSet{c: "uvm-acquire/resident", impl: "uvm"}
	if err := u.runAcquireResident(cfg, &rs); err != nil {
		rs.fail(err)
	}
	return rs.out
}

func (u *uvmSuite) runAcquireResident(cfg *config, rs *resultSet) (err error) {
	const n, size = 4096, 4 << 10
	t, err := uvm.New(u.pub, uvm.Options{DeviceBudget: 2 * n * size, HostCapacity: 2 * n * size})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, t.Close()) }()
	hs, err := uvmAllocFilled(t, n, size)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, uvmFree(t, hs)) }()
	if err := t.Prefetch(hs, u.s); err != nil {
		return err
	}
	if err := errors.Join(t.Sync(), u.dev.StreamSynchronize(uintptr(u.s))); err != nil {
		return err
	}
	_, m0, _, _ := uvmCounters(t.Stats())
	var el time.Duration
	loops := 0
	for start := time.Now(); loops < 3 || time.Since(start) < cfg.target; loops++ {
		t0 := time.Now()
		for _, h := range hs {
			if _, err := t.Acquire(h, u.s, uvm.Read); err != nil {
				return err
			}
		}
		el += time.Since(t0)
		for _, h := range hs {
			if err := t.Release(h, u.s); err != nil {
				return err
			}
		}
	}
	if _, m1, _, _ := uvmCounters(t.Stats()); m1 != m0 {
		return fmt.Errorf("%d of the acquisitions missed: the blocks were not all resident", m1-m0)
	}
	rs.add("ns_per_acquire", float64(el.Nanoseconds())/float64(loops*n), "ns")
	return nil
}
