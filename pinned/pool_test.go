package pinned

import (
	"errors"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/gcwatch"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/probe"
)

func newTestPool(t testing.TB, o Options) *Pool {
	t.Helper()
	probe.Pause()
	if o.Capacity == 0 {
		o.Capacity = 1 << 30
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func sizes1k(seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 7))
	s := make([]int, 1024)
	for i := range s {
		s[i] = 16 + r.IntN(8192-16+1)
	}
	return s
}

func TestAllocFree(t *testing.T) {
	// No purge: the memory figures checked below must not depend on how fast the test runs.
	p := newTestPool(t, Options{PurgeDelay: -1})
	huge := 16 << 20
	if ok, _ := lockable(24 << 20); !ok {
		huge = 4 << 20 // still a huge object, under Debian's default 8 MiB memlock limit
	}
	for _, n := range []int{1, 64, 1000, 8192, 100 << 10, 1 << 20, huge} {
		b, err := p.Alloc(n)
		if err != nil {
			t.Fatalf("Alloc(%d): %v", n, err)
		}
		if len(b) != n || cap(b) != n || mem.Addr(b)%64 != 0 {
			t.Fatalf("Alloc(%d): len %d cap %d addr %#x", n, len(b), cap(b), mem.Addr(b))
		}
		for i := range b {
			b[i] = byte(i)
		}
		if err := p.Free(b); err != nil {
			t.Fatalf("Free(%d): %v", n, err)
		}
	}
	st := p.Stats()
	if st.Backend != Locked || st.Kind != "host-locked" || st.Allocs != 7 || st.Frees != 7 || st.Live != 0 {
		t.Fatalf("stats %+v", st)
	}
	if st.Locked != st.Committed || st.Committed == 0 || st.AlignWaste != 0 || st.Granule != uint64(os.Getpagesize()) {
		t.Fatalf("memory stats %+v", st)
	}
}

func TestBadInput(t *testing.T) {
	p := newTestPool(t, Options{Capacity: 64 << 20})
	for _, n := range []int{0, -1, -1 << 62} {
		if _, err := p.Alloc(n); !errors.Is(err, ErrInvalidSize) {
			t.Errorf("Alloc(%d): %v", n, err)
		}
	}
	for _, n := range []int{65 << 20, 1 << 62} {
		if _, err := p.Alloc(n); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Alloc(%d): %v", n, err)
		}
	}
	if _, err := p.AllocAligned(64, 3); !errors.Is(err, ErrInvalidAlign) {
		t.Errorf("AllocAligned(align 3): %v", err)
	}
	b, err := p.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string][]byte{
		"offset":    b[64:],
		"truncated": b[:100:100],
		"cap cut":   b[:4000:4095],
	} {
		if err := p.Free(s); !errors.Is(err, ErrSubSlice) {
			t.Errorf("Free(%s sub-slice): %v", name, err)
		}
	}
	if err := p.Free(make([]byte, 64)); !errors.Is(err, ErrNotOwned) {
		t.Errorf("Free(Go slice): %v", err)
	}
	if err := p.Free(nil); !errors.Is(err, ErrNotOwned) {
		t.Errorf("Free(nil): %v", err)
	}
	if err := p.Free(b); err != nil {
		t.Fatalf("Free after refused sub-slices: %v", err)
	}
	if err := p.Free(b); !errors.Is(err, ErrDoubleFree) {
		t.Errorf("double Free: %v", err)
	}
	if _, err := New(Options{Align: 48}); !errors.Is(err, ErrInvalidAlign) {
		t.Errorf("New(align 48): %v", err)
	}
	if _, err := New(Options{Capacity: -5}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New(capacity -5): %v", err)
	}
	if _, err := New(Options{Backend: External}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New(External, no region): %v", err)
	}
	if _, err := New(Options{Backend: 99}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New(backend 99): %v", err)
	}
}

// TestCloseDrains closes a pool with live buffers: the error says how many, allocation stops,
// the live buffers stay usable, and the memory goes when the last is freed.
func TestCloseDrains(t *testing.T) {
	p, err := New(Options{Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.Alloc(1000)
	b, _ := p.Alloc(3 << 20)
	err = p.Close()
	if !errors.Is(err, ErrLiveBlocks) {
		t.Fatalf("Close with live buffers: %v", err)
	}
	t.Log(err)
	if _, err := p.Alloc(10); !errors.Is(err, ErrClosed) {
		t.Fatalf("Alloc after Close: %v", err)
	}
	a[999], b[len(b)-1] = 1, 1 // still mapped
	if err := p.Free(a); err != nil {
		t.Fatal(err)
	}
	if p.Stats().Reserved == 0 {
		t.Fatal("released while a buffer is live")
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Reserved != 0 || st.Committed != 0 {
		t.Fatalf("not released after the last free: %+v", st)
	}
	if err := p.Free(b); !errors.Is(err, ErrClosed) {
		t.Fatalf("Free after release: %v", err)
	}
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

func TestAlignedAndOptions(t *testing.T) {
	for _, o := range []Options{
		{Align: 4096},
		{Backend: Pageable, Align: 256},
		{HugePages: arena.HugeTransparent},
		{HugePages: arena.HugeTLB, Capacity: 64 << 20},
		// Populate locks the whole 16 MiB region at once.
		{Populate: true, Capacity: 16 << 20, Backend: lockedIfRoom(20 << 20)},
	} {
		p := newTestPool(t, o)
		for _, al := range []int{64, 4096, 1 << 20, 8 << 20} {
			b, err := p.AllocAligned(5000, al)
			if err != nil {
				t.Fatalf("%+v: AllocAligned(5000, %d): %v", o, al, err)
			}
			if mem.Addr(b)%uintptr(max(al, o.Align)) != 0 {
				t.Fatalf("%+v: misaligned %#x", o, mem.Addr(b))
			}
			if err := p.Free(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExternalBackend runs a pool over a region of Go memory. The pool knows the region by its
// address only, so the test keeps the slice alive until the pool is closed, and checks that it
// did: the region must not have been collected while the pool still held it.
func TestExternalBackend(t *testing.T) {
	region := make([]byte, 24<<20) // any host memory the caller owns
	collected := gcwatch.Watch(region)
	p := newTestPool(t, Options{Backend: External, Capacity: 0,
		External: &arena.ExternalRegion{Base: mem.Addr(region) + 8, Size: 20 << 20, Kind: arena.HostPageable, Committed: true}})
	b, err := p.Alloc(10 << 20)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := mem.Addr(region), mem.Addr(region)+uintptr(len(region))
	if a := mem.Addr(b); a < lo || a+uintptr(len(b)) > hi {
		t.Fatal("buffer outside the external region")
	}
	if _, err := p.Alloc(12 << 20); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("over the region: %v", err)
	}
	st := p.Stats()
	if st.Backend != External || st.Capacity != 20<<20 || st.AlignWaste != 56 {
		t.Fatalf("stats %+v", st)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	if collected() {
		t.Fatal("the External region's Go memory was collected while the pool still held it")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(region) // the pool held it as an address only, until Close
}

func TestTrim(t *testing.T) {
	p := newTestPool(t, Options{Capacity: 256 << 20, PurgeDelay: -1})
	n := 64
	if ok, _ := lockable(72 << 20); !ok {
		n = 4 // under Debian's default 8 MiB memlock limit
	}
	var bufs [][]byte
	for range n {
		b, err := p.Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	for _, b := range bufs {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if st := p.Stats(); st.Committed == 0 {
		t.Fatal("nothing committed before Trim: the test proves nothing") // kept pages and spares
	}
	p.Trim()
	if st := p.Stats(); st.Committed != 0 || st.Locked != 0 {
		t.Fatalf("after Trim: committed %d locked %d", st.Committed, st.Locked)
	}
}

// TestConcurrent has goroutines allocate, stamp, and pass buffers to other goroutines, which
// check the stamp and free them; at the end the pool closes with nothing live.
func TestConcurrent(t *testing.T) {
	// Up to 128 MiB in flight: what is tested is the concurrency, not the locking.
	p, err := New(Options{Capacity: 1 << 30, Backend: lockedIfRoom(256 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	const workers = 8
	per := 3_000
	if longRun() {
		per = 20_000
	}
	chans := make([]chan []byte, workers)
	for i := range chans {
		chans[i] = make(chan []byte, 128)
	}
	var prod, cons sync.WaitGroup
	for w := range workers {
		cons.Add(1)
		go func() {
			defer cons.Done()
			for b := range chans[w] {
				if b[0] != byte(len(b)) || b[len(b)-1] != byte(len(b)) {
					t.Errorf("buffer of %d corrupted", len(b))
				}
				if err := p.Free(b); err != nil {
					t.Error(err)
				}
			}
		}()
		prod.Add(1)
		go func() {
			defer prod.Done()
			r := rand.New(rand.NewPCG(uint64(w), 3))
			for i := range per {
				n := 1 + r.IntN(8<<10)
				if i%300 == 0 {
					n = 256<<10 + r.IntN(4<<20)
				}
				b, err := p.Alloc(n)
				if err != nil {
					t.Error(err)
					return
				}
				b[0], b[n-1] = byte(n), byte(n)
				if r.IntN(2) == 0 {
					if err := p.Free(b); err != nil {
						t.Error(err)
					}
					continue
				}
				chans[r.IntN(workers)] <- b
			}
		}()
	}
	prod.Wait()
	for _, c := range chans {
		close(c)
	}
	cons.Wait()
	if err := p.Close(); err != nil {
		t.Fatalf("Close after all frees: %v", err)
	}
}

// TestSteadyStateNoSyscalls warms a pool up and then runs a million operations: the host
// provider must make no system call at all.
//
// It runs on one P. On several, the goroutine moves between Ps now and then, each P with its
// shard, so how its live buffers split between the shards keeps changing, and the highest
// total the shards ever held creeps up: a slice committed or two per million operations after
// any warm-up (measured with 2 Ps). That is the cost of per-P heaps for a lone goroutine; the
// steady state of each heap is what this test holds.
//
// Its purge delay is long: a pause between two rounds (the collection, which takes tens of
// milliseconds under the race detector, or the process descheduled on a loaded machine) is
// idle time to the purger, which gives the free blocks back, and the next round commits them
// again, as it should.
//
// Under the race detector it skips: one goroutine on one P, no purge, nothing for the detector
// to find; the default and long non-race runs hold it.
func TestSteadyStateNoSyscalls(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine's counts of system calls: the race detector finds nothing here; the non-race runs (default and PINMALLOC_LONG) hold it")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p := newTestPool(t, Options{Backend: lockedIfRoom(64 << 20), PurgeDelay: time.Hour}) // what is counted is system calls
	sz := sizes1k(9)
	live := make([][]byte, 512)
	run := func(ops int) {
		r := rand.New(rand.NewPCG(1, 1))
		for i := range ops {
			k := r.IntN(len(live))
			if live[k] != nil {
				if err := p.Free(live[k]); err != nil {
					t.Fatal(err)
				}
			}
			b, err := p.Alloc(sz[i&1023])
			if err != nil {
				t.Fatal(err)
			}
			live[k] = b
		}
	}
	ops := 1_000_000
	// Warm up every shard the pool will use with the very operations measured: the goroutine
	// moves between Ps (a GC makes it likely), each with its shard, whose pages fill up. Warm
	// until a round makes no system call, within a bound: memory must stop growing.
	for round := 0; ; round++ {
		before := p.Stats().Syscalls
		run(ops)
		runtime.GC()
		if p.Stats().Syscalls == before && round >= 1 {
			break
		}
		if round == 10 {
			t.Fatalf("still making system calls after %d warm-up rounds: %+v", round, p.host.Counters())
		}
	}
	t.Logf("warm: %d shards", p.Stats().Shards)
	before := p.Stats().Syscalls
	run(ops)
	after := p.Stats().Syscalls
	t.Logf("%d system calls in %d steady-state alloc+free pairs (%d before them, warming up)", after-before, ops, before)
	if after != before {
		t.Fatalf("%d system calls in steady state: %+v", after-before, p.host.Counters())
	}
	if before == 0 {
		t.Fatal("no system call counted at all: the counter is broken")
	}
	for _, b := range live {
		_ = p.Free(b)
	}
}

// TestKeptLargeBuffersPurged: freed large buffers (an object page and a huge object) stay
// committed and locked for reuse, reported as Kept, and are decommitted and unlocked once they
// stay unused for the purge delay, while the pool is idle: nothing but the arena's timer runs.
func TestKeptLargeBuffersPurged(t *testing.T) {
	const delay = 30 * time.Millisecond
	p := newTestPool(t, Options{Backend: lockedIfRoom(64 << 20), Capacity: 64 << 20, PurgeDelay: delay})
	var bufs [][]byte
	for _, n := range []int{1 << 20, 4 << 20} {
		b, err := p.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		clear(b)
		bufs = append(bufs, b)
	}
	before := p.Stats()
	for _, b := range bufs {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if st := p.Stats(); st.Kept != 5<<20 || st.Committed != before.Committed || st.Locked != before.Locked {
		t.Fatalf("right after the frees: Kept %d, Committed %d (was %d), Locked %d (was %d)",
			st.Kept, st.Committed, before.Committed, st.Locked, before.Locked)
	}
	for p.a.Stats().Kept != 0 { // the arena's figures: no shard is touched while waiting
		if time.Since(start) > 5*time.Second {
			t.Fatalf("kept buffers not purged 5 s after a delay of %v: %+v", delay, p.a.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := p.Stats()
	if before.Committed-st.Committed < 5<<20 || (before.Locked > 0 && before.Locked-st.Locked < 5<<20) {
		t.Fatalf("after the purge: Committed %d (was %d), Locked %d (was %d)", st.Committed, before.Committed, st.Locked, before.Locked)
	}
	for _, n := range []int{1 << 20, 4 << 20} { // reused after the purge: committed again
		b, err := p.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		clear(b)
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestShardsByHeapIndex allocates from many goroutines, so that shards are made on several Ps
// at once: the pool's shard list stays in the order of its heaps' indexes, which is how a large
// free finds its owner's shard.
func TestShardsByHeapIndex(t *testing.T) {
	p := newTestPool(t, Options{Backend: Pageable, Shards: 8})
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				b, err := p.Alloc(2 << 20) // a huge object: freed through its owner's shard
				if err != nil {
					t.Error(err)
					return
				}
				runtime.Gosched()
				if err := p.Free(b); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, s := range *p.shards.Load() {
		if s.h.Index() != i {
			t.Fatalf("shard %d holds heap %d", i, s.h.Index())
		}
	}
}

// TestStatsAfterRelease: a pool's counters outlive its memory. Before, Stats after Close said
// Allocs, Frees and PeakInUse were 0, which a Prometheus scrape of the pool read as a counter
// reset; a device heap's keep theirs after its Close.
func TestStatsAfterRelease(t *testing.T) {
	// Room for each buffer in a chunk of its own: a goroutine moved to another P between two
	// Allocs takes another shard, whose segment takes another chunk.
	p, err := New(Options{Capacity: 16 << 20, Backend: Pageable})
	if err != nil {
		t.Fatal(err)
	}
	var bs [][]byte
	for _, n := range []int{100, 4096, 300 << 10} {
		b, err := p.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	for _, b := range bs {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	before := p.Stats()
	if before.Released {
		t.Error("an open pool's Stats says Released")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	after := p.Stats()
	if after.Allocs != 3 || after.Frees != 3 || after.PeakInUse != before.PeakInUse || after.PeakInUse < 100+4096+300<<10 {
		t.Errorf("after Close: %d allocs, %d frees, peak %d; want 3, 3, %d (as before it)", after.Allocs, after.Frees, after.PeakInUse, before.PeakInUse)
	}
	if after.Shards != 0 || after.Live != 0 || after.InUse != 0 || !after.Released {
		t.Errorf("after Close: %d shards, %d live, %d in use, released %v; want none, released",
			after.Shards, after.Live, after.InUse, after.Released)
	}
}
