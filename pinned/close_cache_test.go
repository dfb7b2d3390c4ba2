package pinned

import (
	"errors"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// TestFakeCloseSeesCacheOnItsWay: a Close that runs while a FreeAsync on another stream has
// taken its shard's full FreeAsync cache out (its buffers, all freed, in no cache and on no
// list until they are on their stream's list) waits for them to reach the list, and releases
// the pool's memory: nil. It counted them as buffers the caller has and said ErrLiveBlocks with
// every buffer freed. One P, so that every free fills the same shard's cache; no idle purge,
// whose holding the shard would send a FreeAsync past the cache.
func TestFakeCloseSeesCacheOnItsWay(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 4 << 10 // small enough for the FreeAsync cache
	p, ss := cacheRig(t, dev, Options{Backend: CUDAHost, Capacity: 16 << 20, PurgeDelay: -1})
	var err error
	bufs := make([][]byte, pendMax+1)
	for i := range bufs {
		if bufs[i], err = p.Alloc(n); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range bufs[:pendMax] { // the shard's cache, of stream 0, full
		if err := p.FreeAsync(b, ss[0]); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error, 1)
	waiting := make(chan struct{})
	var early error
	taken, returned := false, false
	defer func() { afterCacheOut, closeWaitsCache = nil, nil }()
	closeWaitsCache = func() { closeWaitsCache = nil; close(waiting) }
	afterCacheOut = func() {
		afterCacheOut = nil
		taken = true
		go func() { closed <- p.Close() }()
		select {
		case early = <-closed: // Close did not wait for the buffers on their way
			returned = true
		case <-waiting:
		}
	}
	err = p.FreeAsync(bufs[pendMax], ss[1]) // another stream: the cache goes to stream 0's list
	if err != nil && !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if !taken {
		t.Fatal("the FreeAsync on another stream did not take the shard's cache out")
	}
	if returned {
		t.Fatalf("Close while %d buffers freed with FreeAsync were on their way from a cache to their list: %v, want nil", pendMax, early)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v, want nil", err)
	}
	if u := p.Usage(); u.Reserved != 0 || u.Live != 0 {
		t.Fatalf("after Close with every buffer freed: %+v", u)
	}
}

// TestFakeCloseAfterFreeAsyncLookedAtClosed: a Close that runs while a FreeAsync of the last
// live buffer is on its way to its fast section (past FreeAsync's checks, before its pin),
// and counts the live buffers once the FreeAsync has returned: the buffer is on its stream's
// list, deferred, and Close releases the pool's memory (nil). The FreeAsync read closed before
// its section, cached the buffer after Close's flush of the caches, and Close counted it as a
// buffer the caller has: ErrLiveBlocks, every buffer freed. Once by freeAsync's section (the
// shard's cache empty), once by enqueue's (the cache another stream's). The hook before the
// section is compiled in with -tags invariants only.
func TestFakeCloseAfterFreeAsyncLookedAtClosed(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	if !invariants.Enabled {
		t.Skip("the hook before FreeAsync's fast section is compiled in with -tags invariants only")
	}
	for _, c := range []struct {
		path string
		at   int // the call of the hook that starts the Close
	}{{"freeAsync", 1}, {"enqueue", 2}} {
		p, ss := cacheRig(t, dev, Options{Backend: CUDAHost, Capacity: 16 << 20, PurgeDelay: -1})
		b, err := p.Alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		if c.at == 2 { // the cache is another stream's: b's FreeAsync goes on to enqueue
			y, err := p.Alloc(4096)
			if err == nil {
				err = p.FreeAsync(y, ss[1])
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		closed := make(chan error, 1)
		flushed, count := make(chan struct{}), make(chan struct{})
		calls := 0
		var cerr error
		counted := false
		beforeCacheSection = func() {
			if calls++; calls != c.at {
				return
			}
			beforeCacheSection = nil
			afterCloseReclaim = func() { afterCloseReclaim = nil; close(flushed); <-count }
			go func() { closed <- p.Close() }()
			<-flushed // Close has flushed the caches and waits to count
		}
		beforeFinishClose = func() { // the FreeAsync has returned from its free
			beforeFinishClose = nil
			close(count)
			cerr, counted = <-closed, true
		}
		err = p.FreeAsync(b, ss[0])
		beforeCacheSection, afterCloseReclaim, beforeFinishClose = nil, nil, nil
		if err != nil {
			t.Fatalf("%s: FreeAsync: %v", c.path, err)
		}
		if calls < c.at || !counted {
			t.Fatalf("%s: the FreeAsync did not reach the hook (%d calls) or finishClose (%v)", c.path, calls, counted)
		}
		if cerr != nil {
			t.Errorf("%s: Close racing the FreeAsync of the last live buffer, counting after it returned: %v, want nil", c.path, cerr)
		}
		if u := p.Usage(); u.Reserved != 0 || u.Live != 0 {
			t.Errorf("%s: after Close and the FreeAsync of every buffer: %+v", c.path, u)
		}
	}
}

// cacheRig opens a pool with o whose FreeAsync caches work (skipping t in a build without fast
// sections) and two non-blocking streams of dev, destroyed at the end of t.
func cacheRig(t *testing.T, dev *icuda.Device, o Options) (*Pool, [2]cuda.Stream) {
	t.Helper()
	p, err := New(o)
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
		t.Cleanup(func() { _ = dev.StreamDestroy(s) })
	}
	return p, ss
}
