package pinned

import (
	"errors"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
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
	p, err := New(Options{Backend: CUDAHost, Capacity: 16 << 20, PurgeDelay: -1})
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
		defer dev.StreamDestroy(s)
	}
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
