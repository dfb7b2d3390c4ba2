package fence

import (
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// litmus runs the store-buffering test the package exists for, rounds times (or for a second),
// and returns how
// many rounds both sides missed the other's store. The light side stores its flag with a
// plain store and loads the other's; the heavy side stores its flag, calls barrier and loads
// the light one's. Each side waits a different short time after the round opens, so that over
// the rounds their stores and loads meet at every offset. With Heavy as the barrier no round
// may miss both; with no barrier some do (a CPU satisfies the light side's load before its
// store leaves the store buffer), which shows the test can tell.
func litmus(rounds int, barrier func()) (both, ran int) {
	// Spinning goroutines hand rounds to each other; on a busy machine a handoff can wait for
	// the OS to run the other, so the rounds stop at a deadline too.
	deadline := time.Now().Add(time.Second)
	var s struct {
		light uint32
		_     [60]byte
		heavy uint32
		_     [60]byte
		round atomic.Int64 // the round the heavy side has opened
		done  atomic.Int64 // the round the light side has finished
		seen  uint32       // what the light side loaded in the round
	}
	spin := func(n int) {
		for i := 0; i < n; i++ {
			runtime.KeepAlive(i)
		}
	}
	go func() {
		for r := int64(1); r <= int64(rounds); r++ {
			for s.round.Load() != r {
				if s.round.Load() < 0 {
					return
				}
			}
			spin(int(r % 61))
			s.light = 1 // plain, as a fast path's
			s.seen = atomic.LoadUint32(&s.heavy)
			s.done.Store(r)
		}
	}()
	for r := int64(1); r <= int64(rounds); r++ {
		s.light = 0
		atomic.StoreUint32(&s.heavy, 0)
		s.round.Store(r)
		spin(int(r / 61 % 61))
		atomic.StoreUint32(&s.heavy, 1)
		barrier()
		saw := atomic.LoadUint32(&s.light)
		for s.done.Load() != r {
		}
		ran++
		if saw == 0 && s.seen == 0 {
			both++
		}
		if r%1024 == 0 && time.Now().After(deadline) {
			break
		}
	}
	s.round.Store(-1)
	return both, ran
}

// TestHeavyOrdersLightSide checks that no round of the litmus test misses both stores with
// Heavy, and logs how many did with no barrier (over a tenth of the rounds, but with
// PINMALLOC_LONG=1).
func TestHeavyOrdersLightSide(t *testing.T) {
	if !Available() {
		t.Skip("no private expedited membarrier here (or the race detector is on)")
	}
	if runtime.NumCPU() < 2 || runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two CPUs running at once")
	}
	rounds := 50000
	if testing.Short() {
		rounds = 5000
	}
	if both, ran := litmus(rounds, Heavy); both > 0 {
		t.Fatalf("with Heavy, %d of %d rounds: both sides missed the other's store", both, ran)
	}
	if os.Getenv("PINMALLOC_LONG") == "" {
		rounds /= 10 // the control, which only logs, a tenth as long (all of it in the long form)
	}
	both, ran := litmus(rounds, func() {})
	t.Logf("with no barrier, %d of %d rounds missed both stores", both, ran)
}

// BenchmarkHeavy is the cost of one barrier on every running thread of the process.
func BenchmarkHeavy(b *testing.B) {
	if !Available() {
		b.Skip("no private expedited membarrier here")
	}
	for b.Loop() {
		Heavy()
	}
}
