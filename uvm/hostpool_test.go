package uvm_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/procpin"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestSharedHostPool gives a tier a pool of its user's, with a quota the user's own buffers
// share: an eviction the quota refuses drops the host copy of a clean block on the device
// first, fails with ErrHostFull when none is left, and succeeds once the user frees; every
// block keeps its bytes, and Close gives the tier's buffers back without closing the pool.
func TestSharedHostPool(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 64 * kib
	pool, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20, Quota: 4 * size, PurgeDelay: -1})
	must(t, err)
	defer func() { must(t, pool.Close()) }()
	if _, err := uvm.New(public(dev), uvm.Options{DeviceBudget: 3 * size, HostPool: pool, HostPrecommit: size}); !errors.Is(err, uvm.ErrInvalidOptions) {
		t.Fatalf("HostPrecommit with a HostPool: %v, want ErrInvalidOptions", err)
	}
	tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: 3 * size, HostPool: pool})
	must(t, err)
	s := stream(t, dev)

	hs := filled(t, tr, 2, size) // A and B: host buffers of the pool
	for _, h := range hs {       // on the device, clean: their host copies stay
		_, err := tr.Acquire(h, s, uvm.Read)
		must(t, err)
		must(t, tr.Release(h, s))
	}
	user, err := pool.Alloc(2 * size) // the quota is full
	must(t, err)
	c, err := tr.Alloc(size)
	must(t, err)
	p, err := tr.Acquire(c, s, uvm.Write)
	must(t, err)
	writeDev(t, dev, s, p, pattern(2, size))
	must(t, tr.Release(c, s))
	hs = append(hs, c)

	must(t, tr.Evict(hs[2:])) // C needs a buffer: A's host copy goes
	if st := tr.Stats(); st.HostCopiesDropped != 1 {
		t.Fatalf("%d host copies dropped for C's eviction, want 1", st.HostCopiesDropped)
	}
	must(t, tr.Evict(hs[:1])) // A, dirty now, takes B's
	if err := tr.Evict(hs[1:2]); !errors.Is(err, uvm.ErrHostFull) {
		t.Fatalf("evicting B with the quota full and no clean copy left: %v, want ErrHostFull", err)
	} else if want := fmt.Sprintf("block %#x:", uint64(hs[1])); !strings.Contains(err.Error(), want) {
		t.Errorf("the error does not name B (%q): %v", want, err) // it gave the handle's text in hex
	}
	must(t, pool.Free(user))
	must(t, tr.Evict(hs[1:2]))
	for i, h := range hs {
		b, err := tr.AcquireHost(h, uvm.Read)
		must(t, err)
		if !bytes.Equal(b, pattern(byte(i), size)) {
			t.Errorf("block %d lost its bytes through the evictions", i)
		}
		must(t, tr.ReleaseHost(h))
	}
	must(t, tr.Close())
	if st := pool.Stats(); st.Live != 0 {
		t.Fatalf("the pool holds %d buffers after the tier's Close, want 0", st.Live)
	}
	b, err := pool.Alloc(4 * size) // still open, the whole quota free
	must(t, err)
	must(t, pool.Free(b))
}

// TestOwnPoolOneShard evicts blocks of every segment kind (small, medium, large and object
// pages) from goroutines on two Ps in turn, holding as many host bytes as HostCapacity allows:
// the tier's own pool must not take a shard, and a segment of each kind, per P that evicts.
// Its capacity is sized for one of each (openPool), and with a shard per P the second P's
// evictions failed with ErrHostFull: a tier that cannot evict fills its device heap.
func TestOwnPoolOneShard(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	sizes := []int{4 * kib, 48 * kib, 200 * kib, 600 * kib} // small, medium, large, object pages
	const budget = 1024 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: budget, HostCapacity: 2 * budget})
	s := stream(t, dev)
	for p := range 2 {
		onP(p, func() {
			for _, size := range sizes {
				h, err := tr.Alloc(size)
				must(t, err)
				ptr, err := tr.Acquire(h, s, uvm.Write)
				must(t, err)
				writeDev(t, dev, s, ptr, pattern(byte(size), size))
				must(t, tr.Release(h, s))
				if err := tr.Evict([]uvm.Handle{h}); err != nil {
					t.Fatalf("P %d: evicting a block of %d bytes: %v", p, size, err)
				}
			}
		})
	}
	must(t, tr.Sync())
}

// onP runs f on a goroutine locked to its thread once it runs on P p (of GOMAXPROCS), so that
// a pool keyed by P sees f's calls on p.
func onP(p int, f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for procpin.ID() != p {
			runtime.Gosched()
		}
		f()
	}()
	<-done
}
