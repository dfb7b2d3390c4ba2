package pinned

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// quotaBuffer is the size of fullQuota's buffers: above the FreeAsync cache's, so that a
// buffer freed with FreeAsync is on its stream's list at once.
const quotaBuffer = 64 << 10

// fullQuota returns a pool of CUDA pinned memory whose quota of two buffers of quotaBuffer
// bytes is full: b is live, and another buffer was freed with FreeAsync on an idle stream
// (the next reclaim takes it back). done frees the buffers given, forgets and destroys the
// stream and closes the pool.
func fullQuota(t *testing.T, dev *icuda.Device) (p *Pool, b []byte, done func(live ...[]byte)) {
	t.Helper()
	p, err := New(Options{Backend: CUDAHost, Capacity: 16 << 20, Quota: 2 * quotaBuffer})
	if err != nil {
		t.Fatal(err)
	}
	s, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.Alloc(quotaBuffer)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = p.Alloc(quotaBuffer); err != nil {
		t.Fatal(err)
	}
	if err := p.FreeAsync(a, cuda.Stream(s)); err != nil {
		t.Fatal(err)
	}
	return p, b, func(live ...[]byte) {
		t.Helper()
		for _, buf := range live {
			if err := p.Free(buf); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.ForgetStream(cuda.Stream(s)); err != nil {
			t.Fatal(err)
		}
		if err := dev.StreamDestroy(s); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFakeQuotaWaitsForReclaim: an Alloc the quota refuses while another goroutine's reclaim
// has taken a deferred buffer off its list, and not yet freed it, waits for that reclaim and
// gets the room. It refused at once: it saw no weight deferred and no FreeAsync cache, though
// the buffer was about to leave the quota.
func TestFakeQuotaWaitsForReclaim(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = quotaBuffer
	p, b, done := fullQuota(t, dev)
	polled, release := make(chan struct{}), make(chan struct{})
	afterPoll = func() {
		afterPoll = nil
		close(polled)
		<-release
	}
	go p.Trim() // a reclaim: it polls, then waits in afterPoll with the buffer off its list
	<-polled
	got := make(chan error, 1)
	var c []byte
	go func() {
		var err error
		c, err = p.Alloc(n)
		got <- err
	}()
	var early error
	select {
	case early = <-got: // refused at once, while the reclaim was under way
	case <-time.After(50 * time.Millisecond): // waiting for it, as it must
	}
	close(release)
	err := early
	if err == nil {
		err = <-got
	}
	if err != nil {
		t.Fatalf("Alloc of %d bytes under a quota of %d, one buffer live and the other being freed by a reclaim: %v", n, 2*n, err)
	}
	done(b, c)
}

// TestFakeQuotaRoomAfterReclaim: an Alloc whose sum against the quota counted a deferred
// buffer that another goroutine's reclaim then took back, and finished with, before the Alloc
// asked whether anything was still coming back, gets the room. It was refused: nothing waited
// any more, so the refusal looked final, though the quota had room by then (1 Alloc in some 400
// runs of TestFakeQuotaConcurrentFreeAsync in the probe build).
func TestFakeQuotaRoomAfterReclaim(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = quotaBuffer
	p, b, done := fullQuota(t, dev)
	missed := false
	afterQuotaMiss = func() { // another goroutine's reclaim, all of it, between the sum and the question
		afterQuotaMiss = nil
		missed = true
		if err := p.reclaim(true); err != nil {
			t.Error(err)
		}
	}
	c, err := p.Alloc(n)
	afterQuotaMiss = nil
	if !missed {
		t.Fatal("the Alloc found room at its first sum: the buffer freed with FreeAsync left the quota before it")
	}
	if err != nil {
		t.Fatalf("Alloc of %d bytes under a quota of %d, one buffer live and the other taken back while the Alloc looked: %v", n, 2*n, err)
	}
	done(b, c)
}

// TestFakeQuotaSeesCacheOnItsWay: the buffers a FreeAsync takes out of its shard's FreeAsync
// cache (a cache of another stream) are, until they are on their stream's list, in no cache and
// on no list. When a flush and a reclaim emptied the shard's cache meanwhile (here the reclaim
// of a quota refusal, which flushes every cache), a refusal asked whether anything was still
// coming back, was told no, and refused for good with those buffers about to leave the quota.
// One P, so that both frees fill the same shard's cache; no idle purge, whose holding the shard
// would send a FreeAsync past the cache (the probe build's purges at 1 µs did, once in CI).
func TestFakeQuotaSeesCacheOnItsWay(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 4 << 10 // small enough for the FreeAsync cache
	p, err := New(Options{Backend: CUDAHost, Capacity: 16 << 20, Quota: 2 * n, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !p.fast {
		t.Skip("no fast sections in this build (the race detector turns them off), so no FreeAsync cache")
	}
	var ss [2]cuda.Stream
	for i := range ss {
		s, err := dev.StreamCreate(true)
		if err != nil {
			t.Fatal(err)
		}
		ss[i] = cuda.Stream(s)
	}
	a, err := p.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	x, err := p.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.FreeAsync(a, ss[0]); err != nil { // the shard's cache, of stream 0
		t.Fatal(err)
	}
	taken, returning := false, false
	afterCacheOut = func() {
		afterCacheOut = nil
		taken = true
		if err := p.reclaim(true); err != nil { // flushes x's cache, and takes x back
			t.Error(err)
		}
		returning = p.order.returning()
	}
	err = p.FreeAsync(x, ss[1]) // another stream: a's cache goes to stream 0's list, x's starts
	afterCacheOut = nil
	if err != nil {
		t.Fatal(err)
	}
	if !taken {
		t.Fatal("the FreeAsync on another stream did not take the shard's cache out")
	}
	if !returning {
		t.Fatal("a quota refusal, with a buffer freed with FreeAsync on its way from a cache to its list, was told nothing was coming back")
	}
	for _, s := range ss {
		if err := p.ForgetStream(s); err != nil {
			t.Fatal(err)
		}
		if err := dev.StreamDestroy(uintptr(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFakeQuotaConcurrentFreeAsync: goroutines that each hold at most one buffer, freed with
// FreeAsync on an idle stream, fill a quota exactly: no Alloc is ever refused, since every
// buffer beyond the live ones is on its way back. 8 goroutines of 64 KiB under 512 KiB had 1
// Alloc of 24,000 refused; 3,000 each with PINMALLOC_LONG=1, 500 by default.
func TestFakeQuotaConcurrentFreeAsync(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const workers, n = 8, 64 << 10
	rounds := 500
	if testing.Short() {
		rounds = 100
	}
	if longRun() {
		rounds = 3000
	}
	p, err := New(Options{Backend: CUDAHost, Capacity: 64 << 20, Quota: workers * n})
	if err != nil {
		t.Fatal(err)
	}
	streams := make([]cuda.Stream, 2)
	for i := range streams {
		s, err := dev.StreamCreate(true)
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = cuda.Stream(s)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var refusals, others []error
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				b, err := p.Alloc(n)
				if err == nil {
					b[0] = byte(i)
					err = p.FreeAsync(b, streams[(w+i)%len(streams)])
				}
				if err != nil {
					mu.Lock()
					if errors.Is(err, ErrQuota) {
						refusals = append(refusals, err)
					} else {
						others = append(others, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(refusals) > 0 || len(others) > 0 {
		t.Fatalf("%d of %d Allocs refused by the quota (first: %v), %d other errors (first: %v)",
			len(refusals), workers*rounds, first(refusals), len(others), first(others))
	}
	for _, s := range streams {
		if err := p.ForgetStream(s); err != nil {
			t.Fatal(err)
		}
		if err := dev.StreamDestroy(uintptr(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func first(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}
