package uvm_test

// CPU benchmarks of the tier against the fake driver (go test ./uvm -run '^$' -bench . -benchmem).
// They measure the tier's bookkeeping and its driver calls (cgo into the fake), not data
// movement: the fake moves no byte here (SkipData). Targets (issue 9): Acquire+Release of a
// resident block <= 200 ns with no allocation; <= 1 µs of CPU per block migrated. The GPU
// figures are in gpu_test.go.

import (
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// BenchmarkAcquireRelease acquires and releases a block that is on the device: a hit, the hot
// path of every use of a block. "tier" is the pair; "event-record" is the one driver call the
// pair makes (Release records the use's event on the stream, as cudaEventRecord, through the
// binding's context push and pop), measured in the same run, so that the tier's own share is
// the difference.
func BenchmarkAcquireRelease(b *testing.B) {
	f := fakecuda.RunBenchmark(b)
	if f == nil {
		return
	}
	dev := f.Open(b, 0)
	tr := newTier(b, dev, uvm.Options{DeviceBudget: 1 << 20})
	s := stream(b, dev)
	h, err := tr.Alloc(64 * kib)
	must(b, err)
	for _, m := range []uvm.Mode{uvm.Write, uvm.Read} { // resident, and its restore's event seen
		_, err := tr.Acquire(h, s, m)
		must(b, err)
		must(b, tr.Release(h, s))
	}
	must(b, tr.Sync())
	ev, err := dev.EventCreate(true)
	must(b, err)
	b.Cleanup(func() { must(b, dev.EventDestroy(ev)) })
	for round := 0; round < 2; round++ { // interleaved: the machine's noise hits both
		b.Run(fmt.Sprintf("tier/%d", round), func(b *testing.B) {
			hits := tr.Stats().Hits
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := tr.Acquire(h, s, uvm.Read); err != nil {
					b.Fatal(err)
				}
				if err := tr.Release(h, s); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if st := tr.Stats(); st.Misses != 1 || st.Hits != hits+uint64(b.N) {
				b.Fatalf("hits %d misses %d after %d acquisitions of a resident block", st.Hits-hits, st.Misses, b.N)
			}
		})
		b.Run(fmt.Sprintf("event-record/%d", round), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := dev.EventRecord(ev, uintptr(s)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// cpuTime returns the CPU time (user and system) this process has used, in nanoseconds: unlike
// the wall clock it does not count what other processes of a busy machine take.
func cpuTime(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// processCPU returns the CPU time of every thread of the process so far (CLOCK_PROCESS_CPUTIME_ID:
// precise, where getrusage's figures may be scaled from ticks).
func processCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// nopMover queues nothing: with it a migration benchmark measures the tier alone.
type nopMover struct{}

func (nopMover) Copy([]uvm.CopyJob, cuda.Stream) error { return nil }

// BenchmarkMigration moves batches of blocks off the device and back (Evict of every block,
// then Prefetch of every block: two batches of 16 MiB) and reports the time and heap
// allocations per block migrated. The movers: "kernel", the tier's default (a copyengine.Batcher
// launching the gather kernel, which the fake emulates in C, checking each job's ranges
// against its tables: a cost a real driver does not have), and "none", a Mover that queues
// nothing, which leaves the tier's own bookkeeping: the device heap, the host pool, events,
// the policy and the accounts. "dirty" first acquires each block for writing (one
// Acquire+Release per block, included in the figure), so that every eviction copies; "clean"
// evicts blocks whose host copy is valid (dropped without a copy; only the restore copies).
func BenchmarkMigration(b *testing.B) {
	f := fakecuda.RunBenchmark(b)
	if f == nil {
		return
	}
	f.SkipData(true)
	dev := f.Open(b, 0)
	for _, mover := range []string{"kernel", "none"} {
		for _, size := range []int{4 * kib, 64 * kib} {
			for _, dirty := range []bool{true, false} {
				state := "clean"
				if dirty {
					state = "dirty"
				}
				b.Run(fmt.Sprintf("%s/%dKiB/%s", mover, size/kib, state), func(b *testing.B) {
					o := uvm.Options{DeviceBudget: 16 << 20}
					if mover == "none" {
						o.Mover = nopMover{}
					}
					benchMigration(b, newTier(b, dev, o), stream(b, dev), size, dirty)
				})
			}
		}
	}
}

func benchMigration(b *testing.B, tr *uvm.Tier, s cuda.Stream, size int, dirty bool) {
	n := int(tr.Stats().Budget) / size
	hs := allocN(b, tr, n, size)
	round := func() {
		if dirty {
			for _, h := range hs {
				if _, err := tr.Acquire(h, s, uvm.Write); err != nil {
					b.Fatal(err)
				}
				if err := tr.Release(h, s); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := tr.Evict(hs); err != nil {
			b.Fatal(err)
		}
		if err := tr.Prefetch(hs, s); err != nil {
			b.Fatal(err)
		}
	}
	round() // host buffers taken, memory committed, events made
	round()
	must(b, tr.Sync())
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		round()
	}
	must(b, tr.Sync())
	b.StopTimer()
	cpu1 := cpuTime(b)
	runtime.ReadMemStats(&m1)
	migrations := float64(2 * n * b.N)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/migrations, "ns/migration")
	b.ReportMetric(float64(cpu1-cpu0)/migrations, "cpu-ns/migration")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/migrations, "allocs/migration")
	st := tr.Stats()
	if st.Moved(false).Blocks < uint64(n*b.N) || (dirty && st.CleanEvictions > uint64(n)) || (!dirty && st.CleanEvictions < uint64(n*b.N)) {
		b.Fatalf("%d evictions, %d clean, after %d rounds of %d blocks", st.Moved(false).Blocks, st.CleanEvictions, b.N, n)
	}
}

// BenchmarkBlockCost is the tier's cost per block moved, phase by phase, as
// TestGPUTierBandwidth moves blocks on a GPU (issue 9: <= 85 ns per block evicted and per block
// restored, what 48 GB/s of 4 KiB blocks leaves): sets A and B of a 16 MiB budget each;
// a round writes A (Acquire for Write and Release of each block, not timed), then times
// "evict", Evict(A) (every block dirty: copied); "restore", Prefetch(B) (from the host, into
// the room A left); and, once B is written (not timed), "both", Prefetch(A), which evicts B
// while it restores A. Each phase is timed to the end of its Sync, so the completions' frees
// count. The figures are ns per block of the phase (both: per block moved, either way), wall
// clock and the process's CPU time (which a busy machine distorts less), the wall clock of the
// Sync alone (on a GPU it comes after the last copy, so nothing overlaps it), the µs from the
// call to its first copy (mover "none": nothing overlaps that either), and heap allocations
// per block over the whole round. Mover "none" queues nothing and the fake
// moves no byte: what is left is the tier's bookkeeping (the device heap, the host pool,
// events, the policy, the accounts); "kernel" adds the default copyengine.Batcher (the fake
// checks each job's ranges in C: a cost a real driver does not have).
func BenchmarkBlockCost(b *testing.B) {
	f := fakecuda.RunBenchmark(b)
	if f == nil {
		return
	}
	f.SkipData(true)
	dev := f.Open(b, 0)
	for _, mover := range []string{"none", "kernel"} {
		for _, size := range []int{4 * kib, 64 * kib} {
			b.Run(fmt.Sprintf("%s/%dKiB", mover, size/kib), func(b *testing.B) {
				o := uvm.Options{DeviceBudget: 16 << 20}
				var first *firstMover
				if mover == "none" {
					first = &firstMover{}
					o.Mover = first
				}
				benchBlockCost(b, newTier(b, dev, o), stream(b, dev), size, first)
			})
		}
	}
}

// firstMover queues nothing and notes when a batch's first copy was asked for.
type firstMover struct{ first time.Time }

func (m *firstMover) Copy([]uvm.CopyJob, cuda.Stream) error {
	if m.first.IsZero() {
		m.first = time.Now()
	}
	return nil
}

func benchBlockCost(b *testing.B, tr *uvm.Tier, s cuda.Stream, size int, first *firstMover) {
	n := int(tr.Stats().Budget) / size
	a, c := allocN(b, tr, n, size), allocN(b, tr, n, size)
	write := func(hs []uvm.Handle) {
		for _, h := range hs {
			if _, err := tr.Acquire(h, s, uvm.Write); err != nil {
				b.Fatal(err)
			}
			if err := tr.Release(h, s); err != nil {
				b.Fatal(err)
			}
		}
	}
	// phase is the wall and CPU time of one phase, summed over the rounds.
	type phase struct {
		name                  string
		wall, cpu, sync, head time.Duration
	}
	// timed runs a phase, labelled for a CPU profile (pprof -tagfocus phase=evict).
	timed := func(ph *phase, f func() error) {
		pprof.Do(context.Background(), pprof.Labels("phase", ph.name), func(context.Context) {
			if first != nil {
				first.first = time.Time{}
			}
			start, cpu := time.Now(), processCPU(b)
			if err := f(); err != nil {
				b.Fatal(err)
			}
			if first != nil {
				ph.head += first.first.Sub(start)
			}
			synced := time.Now()
			if err := tr.Sync(); err != nil {
				b.Fatal(err)
			}
			ph.cpu += processCPU(b) - cpu
			ph.sync += time.Since(synced)
			ph.wall += time.Since(start)
		})
	}
	evict, restore, both := &phase{name: "evict"}, &phase{name: "restore"}, &phase{name: "both"}
	round := func() {
		write(a)
		timed(evict, func() error { return tr.Evict(a) })
		timed(restore, func() error { return tr.Prefetch(c, s) })
		write(c)
		timed(both, func() error { return tr.Prefetch(a, s) })
	}
	round() // host buffers taken, memory committed, events made
	round()
	*evict, *restore, *both = phase{name: "evict"}, phase{name: "restore"}, phase{name: "both"}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		round()
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	blocks := float64(n * b.N)
	for _, ph := range []*phase{evict, restore, both} {
		per := blocks
		if ph == both {
			per *= 2
		}
		b.ReportMetric(float64(ph.wall.Nanoseconds())/per, "ns/"+ph.name)
		b.ReportMetric(float64(ph.cpu.Nanoseconds())/per, "cpu-ns/"+ph.name)
		b.ReportMetric(float64(ph.sync.Nanoseconds())/per, "sync-ns/"+ph.name)
		if first != nil {
			b.ReportMetric(float64(ph.head.Nanoseconds())/1e3/float64(b.N), "first-copy-us/"+ph.name)
		}
	}
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/(4*blocks), "allocs/block")
	st := tr.Stats()
	if st.Failures != 0 || st.CleanEvictions != 0 || st.Out[uvm.CausePressure].Blocks < uint64(n*b.N) {
		b.Fatalf("stats after %d rounds of %d blocks: %+v", b.N, n, st)
	}
}
