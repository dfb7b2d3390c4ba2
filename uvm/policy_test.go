package uvm_test

import (
	"slices"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// use acquires h on s for reading and releases it, and reports whether it was a hit.
func use(t *testing.T, tr *uvm.Tier, h uvm.Handle, s cuda.Stream) bool {
	t.Helper()
	before := tr.Stats().Hits
	_, err := tr.Acquire(h, s, uvm.Read)
	must(t, err)
	must(t, tr.Release(h, s))
	return tr.Stats().Hits > before
}

// TestScanResistance uses a hot set twice (so that 2Q has seen it come back), then scans many
// blocks used once, then uses the hot set again: LRU has evicted it, 2Q has kept it.
func TestScanResistance(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, tc := range []struct {
		pol        uvm.Policy
		wantMisses int
	}{{uvm.LRU(), 4}, {uvm.TwoQ(), 0}} {
		const size = 16 * kib
		tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: 8 * size, Policy: tc.pol})
		must(t, err)
		s := stream(t, dev)
		alloc := func(n int) []uvm.Handle { return allocN(t, tr, n, size) }
		hot, filler, scan := alloc(4), alloc(8), alloc(24)
		for _, set := range [][]uvm.Handle{hot, filler, hot, scan} {
			for _, h := range set {
				use(t, tr, h, s)
			}
		}
		misses := 0
		for _, h := range hot {
			if !use(t, tr, h, s) {
				misses++
			}
		}
		if misses != tc.wantMisses {
			t.Errorf("%s: %d misses of the hot set after a scan, want %d", tc.pol.Name(), misses, tc.wantMisses)
		}
		if got := tr.Stats().Policy; got != tc.pol.Name() {
			t.Errorf("Stats.Policy %q, want %q", got, tc.pol.Name())
		}
		for _, set := range [][]uvm.Handle{hot, filler, scan} {
			for _, h := range set {
				must(t, tr.Free(h))
			}
		}
		must(t, tr.Close())
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

// TestThrashing makes a block migrate three times within lapses: it is then kept on the
// device for ThrashPin (an eviction takes another block), then evictable again; migrations
// further apart than the lapse, or after a quiet second, are not thrashing.
func TestThrashing(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 16 * kib
	clk := &fakeClock{now: time.Unix(1000, 0)}
	var evicted []uvm.Handle
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 2 * size, Clock: clk.Now, OnMigrate: func(m uvm.Migration) {
		if !m.ToDevice {
			evicted = append(evicted, m.Handle)
		}
	}})
	s := stream(t, dev)
	a, err := tr.Alloc(size)
	must(t, err)
	b, err := tr.Alloc(size)
	must(t, err)
	x, err := tr.Alloc(size)
	must(t, err)
	use(t, tr, a, s)
	// Out, in, out: three migrations 100 µs apart.
	for i, step := range []func(){
		func() { must(t, tr.Evict([]uvm.Handle{a})) },
		func() { use(t, tr, a, s) },
		func() { must(t, tr.Evict([]uvm.Handle{a})) },
	} {
		clk.Advance(100 * time.Microsecond)
		step()
		if want := uint64(i / 2); tr.Stats().ThrashEvents != want {
			t.Fatalf("after migration %d: %d thrash events, want %d", i+1, tr.Stats().ThrashEvents, want)
		}
	}
	clk.Advance(100 * time.Microsecond)
	use(t, tr, a, s) // back, and protected
	use(t, tr, b, s)
	evicted = nil
	use(t, tr, x, s) // needs room: a is the coldest, but protected
	if len(evicted) != 1 || evicted[0] != b {
		t.Fatalf("evicted %x while a (%x) is protected, want b (%x)", evicted, a, b)
	}
	clk.Advance(uvm.DefaultThrashPin + time.Millisecond)
	evicted = nil
	use(t, tr, b, s) // a is no longer protected, and the coldest
	if len(evicted) != 1 || evicted[0] != a {
		t.Fatalf("evicted %x after the protection ended, want a (%x)", evicted, a)
	}
	// Migrations a millisecond apart (beyond the lapse) are not thrashing.
	events := tr.Stats().ThrashEvents
	for i := 0; i < 6; i++ {
		clk.Advance(time.Millisecond)
		use(t, tr, []uvm.Handle{a, b, x}[i%3], s)
	}
	if got := tr.Stats().ThrashEvents; got != events {
		t.Errorf("migrations beyond the lapse made %d thrash events", got-events)
	}
	if st := tr.Stats(); st.ThrashOverrides != 0 {
		t.Errorf("%d protected blocks evicted", st.ThrashOverrides)
	}
	for _, h := range []uvm.Handle{a, b, x} {
		must(t, tr.Free(h))
	}
}

// TestPolicyNoAllocation checks that a policy makes no allocation once it has seen the highest
// block id: its queues are intrusive lists over nodes that never move.
func TestPolicyNoAllocation(t *testing.T) {
	const blocks = 200
	for _, p := range []uvm.Policy{uvm.LRU(), uvm.TwoQ()} {
		for id := range uvm.BlockID(blocks) {
			p.Used(id)
		}
		n := testing.AllocsPerRun(20, func() {
			for id := range uvm.BlockID(blocks) {
				p.Pinned(id)
				p.Used(id)
				if id%3 == 0 {
					p.Evicted(id)
					p.Used(id)
				}
				if id%7 == 0 {
					p.Freed(id)
					p.Used(id)
				}
			}
			p.Walk(func(uvm.BlockID) bool { return true })
		})
		if n != 0 {
			t.Errorf("%s: %v allocations per run", p.Name(), n)
		}
	}
}

// BenchmarkPolicy is a policy's work for one Acquire and Release of a hit (Pinned, then Used)
// over 4096 blocks, and an eviction (Evicted, then Used again) every 16th.
func BenchmarkPolicy(b *testing.B) {
	const blocks = 4096
	for _, p := range []uvm.Policy{uvm.LRU(), uvm.TwoQ()} {
		b.Run(p.Name(), func(b *testing.B) {
			for id := range uvm.BlockID(blocks) {
				p.Used(id)
			}
			id := uvm.BlockID(0)
			for i := 0; b.Loop(); i++ {
				id = (id + 2731) % blocks // a stride prime to blocks: every id in turn
				p.Pinned(id)
				p.Used(id)
				if i%16 == 0 {
					p.Evicted(id)
					p.Used(id)
				}
			}
		})
	}
}

// TestTwoQEvictsOnce checks a note of an earlier session, "2Q double Evicted": that under 2Q a
// block's eviction might be counted twice in Stats or reported twice to OnMigrate, or reported
// twice to the policy (whose Evicted of a ghost would leave it on the ghost list untagged, and
// the next Used would panic). Every way a block leaves the device is taken, from each of 2Q's
// queues: an eviction for room, Evict, AcquireHost for writing (which drops the device copy),
// a clean eviction after a copy for AcquireHost, the heap's pressure hook, a prefetch, ghosts
// used again, and ghosts the A1out bound forgets while their block is acquired. After each
// step the accounts and 2Q's queues are checked, no block is reported evicted twice without a
// restore between, and the evictions reported are those Stats counts. It passes: the note is
// not borne out.
func TestTwoQEvictsOnce(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 16 * kib
	out := map[uvm.Handle]bool{} // reported evicted, not restored since
	var evictions uint64
	var twice []uvm.Handle
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 4 * size, HostCapacity: 100 * size, Policy: uvm.TwoQ(), ThrashLapse: -1,
		OnMigrate: func(m uvm.Migration) {
			if m.ToDevice {
				out[m.Handle] = false
				return
			}
			if out[m.Handle] {
				twice = append(twice, m.Handle)
			}
			out[m.Handle] = true
			evictions++
		}})
	s, s2 := stream(t, dev), stream(t, dev)
	check := func(step string) {
		t.Helper()
		must(t, tr.Verify())
		if err := tr.VerifyPolicy(); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if len(twice) > 0 {
			t.Fatalf("%s: blocks %v reported evicted twice with no restore between", step, twice)
		}
		st := tr.Stats()
		checkAccounts(t, st)
		if counted := st.Moved(false).Blocks - st.Out[uvm.CauseHost].Blocks; counted != evictions {
			t.Fatalf("%s: Stats counts %d evictions, OnMigrate reported %d", step, counted, evictions)
		}
	}
	write := func(h uvm.Handle) {
		t.Helper()
		_, err := tr.Acquire(h, s, uvm.Write)
		must(t, err)
		must(t, tr.Release(h, s))
	}
	hs := allocN(t, tr, 8, size)
	for _, h := range hs[:5] { // A1in holds 0..3; 4 evicts 0 for room
		write(h)
	}
	check("an eviction for room from A1in")
	must(t, tr.Evict(hs[1:2]))
	check("Evict from A1in")
	_, err := tr.AcquireHost(hs[2], uvm.Write) // copied to the host, the device copy dropped
	must(t, err)
	must(t, tr.ReleaseHost(hs[2]))
	check("AcquireHost for writing")
	for _, h := range hs[:3] { // ghosts used again: into Am, evicting from A1in for room
		write(h)
	}
	check("ghosts used again")
	write(hs[0])
	_, err = tr.AcquireHost(hs[0], uvm.Read) // a copy to the host: clean
	must(t, err)
	must(t, tr.ReleaseHost(hs[0]))
	must(t, tr.Evict(hs[:1])) // a clean eviction from Am
	must(t, tr.Evict(hs[:1])) // not on the device: skipped
	check("a clean eviction from Am")
	if !tr.Relieve(size, s2) { // the heap's pressure hook: spares, then every evictable block
		t.Fatal("the pressure hook gave nothing back")
	}
	check("the pressure hook")
	must(t, tr.Prefetch(hs[5:8], s))
	must(t, tr.Prefetch(hs[:3], s))
	check("prefetches")
	// A ghost acquired again stays on A1out while acquired; a scan of more blocks than A1out
	// remembers pushes it out; released, it enters A1in.
	scan := allocN(t, tr, 80, size)
	must(t, tr.Evict(hs))
	x := hs[6]
	_, err = tr.Acquire(x, s, uvm.Read)
	must(t, err)
	for _, h := range scan {
		write(h)
	}
	check("a scan while a ghost is acquired")
	must(t, tr.Release(x, s))
	must(t, tr.Evict([]uvm.Handle{x}))
	for _, h := range slices.Concat(scan[:10], scan[70:]) { // forgotten ghosts, and remembered ones
		write(h)
	}
	check("the scan used again")
	for _, h := range slices.Concat(hs, scan) {
		must(t, tr.Free(h))
	}
	check("frees")
	if evictions < 80 {
		t.Fatalf("%d evictions: the test did not evict as it meant to", evictions)
	}
}
