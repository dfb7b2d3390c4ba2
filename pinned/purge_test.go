package pinned

import (
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
	"github.com/pinmalloc/pinmalloc/internal/memlocktest"
)

// larson runs the low-occupancy churn of issue 38 on p: g goroutines, each keeping slots
// buffers of uniform random size lo to hi bytes and replacing one at random, steps times. It
// returns every goroutine's buffers, still live.
func larson(t *testing.T, p *Pool, g, slots, lo, hi, steps int) [][][]byte {
	t.Helper()
	out := make([][][]byte, g)
	errs := make([]error, g)
	var wg sync.WaitGroup
	for k := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(k), 38))
			size := func() int { return lo + r.IntN(hi-lo+1) }
			s := make([][]byte, slots)
			defer func() { out[k] = s }()
			for i := range s {
				b, err := p.Alloc(size())
				if err != nil {
					errs[k] = err
					s = s[:i]
					return
				}
				s[i] = b
			}
			for range steps {
				i := r.IntN(slots)
				if err := p.Free(s[i]); err != nil {
					errs[k] = err
					s = append(s[:i], s[i+1:]...)
					return
				}
				b, err := p.Alloc(size())
				if err != nil {
					errs[k] = err
					s = append(s[:i], s[i+1:]...)
					return
				}
				b[0], b[len(b)-1] = byte(i), byte(i)
				s[i] = b
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

// larsonSteps is the churn's length per goroutine: issue 38's 100,000 with PINMALLOC_LONG,
// a fifth of it otherwise.
func larsonSteps() int {
	if longRun() {
		return 100_000
	}
	return 20_000
}

func freeAll(t *testing.T, p *Pool, bufs [][][]byte) {
	t.Helper()
	for _, s := range bufs {
		for _, b := range s {
			if err := p.Free(b); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestIdleFootprint holds issue 38's bound: after larson-style churn at low occupancy (8
// goroutines each keeping 8 buffers of 8 B to 64 KiB), a pool left idle gives back what its
// buffers do not use, so that its committed memory falls to the live bytes plus 1 MiB within
// a few purge delays, with no call from the user; and Trim gets there at once. The purge delay
// is short and the test polls, so it takes a few milliseconds, not a fixed sleep.
func TestIdleFootprint(t *testing.T) {
	p, err := New(Options{Capacity: 1 << 30, Backend: Pageable, PurgeDelay: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bufs := larson(t, p, 8, 8, 8, 64<<10, larsonSteps())
	u := p.Usage()
	t.Logf("end of the churn: live %d bytes, committed %d", u.InUse, u.Committed)
	deadline := time.Now().Add(10 * time.Second) // a loaded machine: the bound is met in milliseconds
	for u.Committed > u.InUse+1<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("idle pool: committed %d bytes for %d live, above live + 1 MiB after 10 s", u.Committed, u.InUse)
		}
		time.Sleep(time.Millisecond)
		u = p.Usage()
	}
	t.Logf("idle: live %d bytes, committed %d", u.InUse, u.Committed)
	p.Trim()
	if u = p.Usage(); u.Committed > u.InUse+1<<20 {
		t.Fatalf("after Trim: committed %d bytes for %d live", u.Committed, u.InUse)
	}
	for k, s := range bufs {
		for i, b := range s {
			if b[0] != b[len(b)-1] {
				t.Fatalf("goroutine %d buffer %d: its ends read %d and %d", k, i, b[0], b[len(b)-1])
			}
		}
	}
	freeAll(t, p, bufs)
}

// TestPurgerStops: the purger of a pool whose buffers are all freed gives everything back and
// stops ticking; the next slow path starts it again. A pool with a negative purge delay has
// none.
func TestPurgerStops(t *testing.T) {
	p, err := New(Options{Capacity: 64 << 20, Backend: Pageable, PurgeDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bufs := larson(t, p, 2, 64, 8, 64<<10, 2000)
	freeAll(t, p, bufs)
	deadline := time.Now().Add(10 * time.Second)
	for p.purge.armed.Load() || p.Usage().Committed != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: purger armed %v, committed %d with no buffer live", p.purge.armed.Load(), p.Usage().Committed)
		}
		time.Sleep(time.Millisecond)
	}
	b, err := p.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if !p.purge.armed.Load() {
		t.Error("an allocation that made a page did not start the purger")
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	q, err := New(Options{Capacity: 64 << 20, Backend: Pageable, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if b, err = q.Alloc(100); err != nil {
		t.Fatal(err)
	}
	if q.purge.delay != 0 || q.purge.armed.Load() {
		t.Errorf("a pool with a negative purge delay has a purger (delay %v, armed %v)", q.purge.delay, q.purge.armed.Load())
	}
	if err := q.Free(b); err != nil {
		t.Fatal(err)
	}
}

// TestLarsonUnderMemlock runs the low-occupancy churn on locked memory (the default backend)
// as an ordinary user: the test binary runs itself again as nobody under Debian's default
// RLIMIT_MEMLOCK, 8 MiB (internal/memlocktest). The live buffers take about 2 MiB; what the
// shards keep free must go back when the limit refuses a commit, so no allocation fails.
func TestLarsonUnderMemlock(t *testing.T) {
	if memlocktest.Child(t) {
		p, err := New(Options{Capacity: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		freeAll(t, p, larson(t, p, 8, 8, 8, 64<<10, larsonSteps()))
		st := p.Stats()
		t.Logf("peak committed %d bytes, %d forced purges", st.PeakCommitted, st.ForcedPurges)
		return
	}
	out := memlocktest.RunAt(t, "TestLarsonUnderMemlock", 8<<20)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "peak committed") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

// TestPurgeTickAllocatesNothing: a tick of the idle purger over a quiet pool with live buffers
// makes no heap allocation. It made one at each tick and each arming (the method value handed
// to the timer), which testing.AllocsPerRun counts in whatever test the purger ticked during.
func TestPurgeTickAllocatesNothing(t *testing.T) {
	p := newTestPool(t, Options{Capacity: 64 << 20, Backend: Pageable, PurgeDelay: time.Hour})
	var bufs [][]byte
	for range 100 {
		b, err := p.Alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	if n := testing.AllocsPerRun(100, p.purgeTick); n != 0 && !invariants.Enabled {
		t.Errorf("a purger tick allocates %v times", n)
	}
	freeAll(t, p, [][][]byte{bufs})
}
