package main

import (
	"errors"
	"time"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	wl "github.com/pinmalloc/pinmalloc/internal/workload"
)

// memAttachGlobal is CU_MEM_ATTACH_GLOBAL: managed memory any stream may use.
const memAttachGlobal = 1

// managed measures the driver's own tiering on the bytes of one batch of the block-size cases:
// managed memory populated on the device, moved to the host with cuMemPrefetchAsync the first
// time (cold: the host pages do not exist yet) and then, after each move back to the device,
// again (warm), each timed to the stream's completion. The fake driver's prefetch moves no
// bytes, so there the case records why it was not measured.
func (u *uvmSuite) managed(cfg *config) []result {
	rs := resultSet{c: "uvm-managed", impl: "managed"}
	if u.fake {
		rs.fail(errors.New("not measured on the fake driver: its cuMemPrefetchAsync moves no bytes"))
		return rs.out
	}
	if err := u.runManaged(cfg, &rs); err != nil {
		rs.fail(err)
	}
	return rs.out
}

func (u *uvmSuite) runManaged(cfg *config, rs *resultSet) (err error) {
	n := uintptr(u.geo.batch)
	p, err := u.dev.MemAllocManaged(n, memAttachGlobal)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, u.dev.MemFreeManaged(p)) }()
	dev, host := memLocation(u.pub.Location()), memLocation(pcuda.HostLocation())
	move := func(to cuda.MemLocation) (time.Duration, error) {
		t0 := time.Now()
		err := errors.Join(u.dev.MemPrefetchAsync(p, n, to, uintptr(u.s)), u.dev.StreamSynchronize(uintptr(u.s)))
		return time.Since(t0), err
	}
	if _, err := move(dev); err != nil {
		return err
	}
	if err := errors.Join(u.dev.MemsetD8Async(p, 1, n, uintptr(u.s)), u.dev.StreamSynchronize(uintptr(u.s))); err != nil {
		return err
	}
	cold, err := move(host)
	if err != nil {
		return err
	}
	var warm, back time.Duration
	for range cfg.reps {
		d, err := move(dev)
		if err != nil {
			return err
		}
		back += d
		if d, err = move(host); err != nil {
			return err
		}
		warm += d
	}
	gb := float64(n) / 1e9
	rs.add("evict_cold_gbps", gb/cold.Seconds(), "GB/s")
	rs.add("evict_warm_gbps", gb*float64(cfg.reps)/warm.Seconds(), "GB/s")
	rs.add("restore_gbps", gb*float64(cfg.reps)/back.Seconds(), "GB/s")
	return nil
}

// managedPolicy names the competitor's rows in the oversubscription cases: managed memory
// (cuMemAllocManaged) with the same VRAM budget kept by an LRU of blocks that moves them with
// cuMemPrefetchAsync, the driver's own migration path, the way a program that uses managed
// memory and knows what it will touch keeps it resident.
const managedPolicy = "managed"

// uvmRow is one row of the oversubscription results: a tier policy, or the managed memory
// competitor, with the impl its results are recorded under.
type uvmRow struct{ name, impl string }

// uvmRows lists the rows in report order.
func uvmRows() []uvmRow {
	var rows []uvmRow
	for _, p := range uvmPolicies {
		rows = append(rows, uvmRow{p.name, "uvm"})
	}
	return append(rows, uvmRow{managedPolicy, "managed"})
}

// managedLRU is the competitor's residency: which blocks its budget holds, least recently
// used first, as an intrusive list over block indices.
type managedLRU struct {
	prev, next []int32 // -1 ends the list
	resident   []bool
	head, tail int32 // head is the least recently used
	n, cap     int
}

func newManagedLRU(blocks, cap int) *managedLRU {
	l := &managedLRU{prev: make([]int32, blocks), next: make([]int32, blocks), resident: make([]bool, blocks), head: -1, tail: -1, cap: cap}
	return l
}

func (l *managedLRU) unlink(k int32) {
	if p := l.prev[k]; p >= 0 {
		l.next[p] = l.next[k]
	} else {
		l.head = l.next[k]
	}
	if x := l.next[k]; x >= 0 {
		l.prev[x] = l.prev[k]
	} else {
		l.tail = l.prev[k]
	}
}

func (l *managedLRU) pushBack(k int32) {
	l.prev[k], l.next[k] = l.tail, -1
	if l.tail >= 0 {
		l.next[l.tail] = k
	} else {
		l.head = k
	}
	l.tail = k
}

// use records an access to block k. It reports whether k was resident and, when making room
// for it took a block out, which one (else -1).
func (l *managedLRU) use(k int) (hit bool, victim int) {
	b := int32(k)
	if l.resident[k] {
		l.unlink(b)
		l.pushBack(b)
		return true, -1
	}
	victim = -1
	if l.n == l.cap {
		v := l.head
		l.unlink(v)
		l.resident[v] = false
		l.n--
		victim = int(v)
	}
	l.resident[k] = true
	l.n++
	l.pushBack(b)
	return false, victim
}

// managedOversub runs the oversubscription case of pattern p at factor f on managed memory:
// the same blocks, accesses and writes as the tier's case, each miss a cuMemPrefetchAsync of
// the block to the device after one of the least recently used block to the host when the
// budget is full, all on the user's stream, timed to its completion.
func (u *uvmSuite) managedOversub(cfg *config, name string, p wl.Pattern, f float64) []result {
	rs := resultSet{c: name, impl: "managed"}
	if err := u.runManagedOversub(cfg, &rs, p, f); err != nil {
		rs.fail(err)
	}
	return rs.out
}

func (u *uvmSuite) runManagedOversub(cfg *config, rs *resultSet, p wl.Pattern, f float64) (err error) {
	g := u.geo
	n := int(f * float64(g.budget) / float64(g.block))
	size := uintptr(g.block)
	base, err := u.dev.MemAllocManaged(uintptr(n)*size, memAttachGlobal)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, u.dev.MemFreeManaged(base)) }()
	dev, host := memLocation(u.pub.Location()), memLocation(pcuda.HostLocation())
	// Filled on the device, then all on the host: where the tier's blocks start.
	if err := errors.Join(u.dev.MemsetD8Async(base, 1, uintptr(n)*size, uintptr(u.s)),
		u.dev.MemPrefetchAsync(base, uintptr(n)*size, host, uintptr(u.s)), u.dev.StreamSynchronize(uintptr(u.s))); err != nil {
		return err
	}
	gen, err := wl.New(p, n, uvmSeed)
	if err != nil {
		return err
	}
	lru := newManagedLRU(n, int(g.budget/size))
	var hist wl.Histogram
	var hits, misses, in, out uint64
	touch := func(k int, write bool, v byte) error {
		a0 := time.Now()
		hit, victim := lru.use(k)
		var err error
		if hit {
			hits++
		} else {
			misses++
			in += uint64(size)
			if victim >= 0 {
				out += uint64(size)
				err = u.dev.MemPrefetchAsync(base+uintptr(victim)*size, size, host, uintptr(u.s))
			}
			err = errors.Join(err, u.dev.MemPrefetchAsync(base+uintptr(k)*size, size, dev, uintptr(u.s)))
		}
		hist.Record(time.Since(a0))
		if err == nil && write {
			err = u.dev.MemsetD8Async(base+uintptr(k)*size, v, stampBytes, uintptr(u.s))
		}
		return err
	}
	for k := range n { // warm-up as in the tier's case
		if err := touch(k, false, 0); err != nil {
			return err
		}
	}
	for i := range n {
		if err := touch(gen.Next(), i%g.writeEach == 0, byte(i)); err != nil {
			return err
		}
	}
	if err := u.dev.StreamSynchronize(uintptr(u.s)); err != nil {
		return err
	}
	hist.Reset()
	hits, misses, in, out = 0, 0, 0, 0
	accesses := g.passes * n
	if cfg.quick {
		accesses = max(n, accesses/2)
	}
	t0 := time.Now()
	for i := range accesses {
		if err := touch(gen.Next(), i%g.writeEach == 0, byte(i)); err != nil {
			return err
		}
	}
	if err := u.dev.StreamSynchronize(uintptr(u.s)); err != nil {
		return err
	}
	el := time.Since(t0).Seconds()
	rs.add("gbps", float64(accesses)*float64(g.block)/el/1e9, "GB/s")
	rs.add("accesses_per_sec", float64(accesses)/el, "1/s")
	rs.add("hit_rate", float64(hits)/float64(max(1, hits+misses)), "ratio")
	rs.add("migrated_gbps", float64(in+out)/el/1e9, "GB/s")
	rs.add("bytes_in_per_access", float64(in)/float64(accesses), "B")
	rs.add("bytes_out_per_access", float64(out)/float64(accesses), "B")
	rs.add("acquire_p50_ns", float64(hist.Quantile(0.5)), "ns")
	rs.add("acquire_p99_ns", float64(hist.Quantile(0.99)), "ns")
	rs.add("blocks", float64(n), "")
	rs.add("block_bytes", float64(g.block), "B")
	return nil
}

// memLocation is loc as the driver binding takes it.
func memLocation(loc pcuda.Location) cuda.MemLocation {
	return cuda.MemLocation{Type: int32(loc.Type), ID: int32(loc.ID)}
}
