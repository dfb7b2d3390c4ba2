package pinned_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// refSharer counts references of shared buffers, as package ipcpool does across processes.
type refSharer struct {
	mu       sync.Mutex
	refs     map[uintptr]int
	asked    int
	outside  [][]byte
	outsideE error
}

func newRefSharer() *refSharer { return &refSharer{refs: map[uintptr]int{}} }

func (s *refSharer) share(t *testing.T, p *pinned.Pool, b []byte, refs int) {
	t.Helper()
	if err := p.Share(b); err != nil {
		t.Fatalf("Share: %v", err)
	}
	s.mu.Lock()
	s.refs[mem.Addr(b)] += refs
	s.mu.Unlock()
}

// goneElsewhere drops every reference to b, as when the other processes let it go: the sharer
// knows b no more, and FreeShared is its last free.
func (s *refSharer) goneElsewhere(b []byte) {
	s.mu.Lock()
	delete(s.refs, mem.Addr(b))
	s.mu.Unlock()
}

// newSharedPool returns a pool made with o and a refSharer as its Sharer (of 8 MiB unless
// o.Capacity says), and the sharer.
func newSharedPool(t *testing.T, o pinned.Options) (*pinned.Pool, *refSharer) {
	t.Helper()
	s := newRefSharer()
	o.Sharer = s
	if o.Capacity == 0 {
		o.Capacity = 8 << 20
	}
	return newPool(t, o), s
}

// newSharedRig is newAsyncRig with a refSharer as the pool's Sharer, and the sharer; the rig is
// nil where newAsyncRig's is.
func newSharedRig(t *testing.T, o pinned.Options) (*asyncRig, *refSharer) {
	t.Helper()
	s := newRefSharer()
	o.Sharer = s
	return newAsyncRig(t, o), s
}

func (s *refSharer) FreeOutside(b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outside = append(s.outside, b)
	return s.outsideE
}

var errDropped = errors.New("reference dropped already")

func (s *refSharer) DropShared(addr uintptr) (shared, last bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	n, ok := s.refs[addr]
	switch {
	case !ok:
		return false, false, nil
	case n == 0:
		return true, false, errDropped
	}
	s.refs[addr] = n - 1
	if n == 1 {
		delete(s.refs, addr)
		return true, true, nil
	}
	return true, false, nil
}

// A shared buffer stays live through frees until its last reference goes; buffers never shared
// never ask the Sharer; memory outside the pool goes to FreeOutside.
func TestShareKeepsBufferUntilLastReference(t *testing.T) {
	for _, o := range []pinned.Options{{}, {ZeroOnFree: true, Quota: 1 << 20}} {
		p, s := newSharedPool(t, o)
		b, err := p.Alloc(4096)
		ok(t, "Alloc", err)
		b[0] = 7
		s.share(t, p, b, 2)
		ok(t, "first Free", p.Free(b)) // one of two references
		if st := p.Stats(); st.Live != 1 {
			t.Fatalf("after the first free of a buffer with two references: %d live", st.Live)
		}
		if b[0] != 7 {
			t.Fatal("a shared buffer was scrubbed before its last free")
		}
		ok(t, "last Free", p.Free(b))
		if st := p.Stats(); st.Live != 0 {
			t.Fatalf("after the last free: %d live", st.Live)
		}
		if err := p.Free(b); !errors.Is(err, pinned.ErrDoubleFree) {
			t.Fatalf("a third free: %v, want ErrDoubleFree", err)
		}
		// A buffer never shared: the Sharer is not asked.
		asked := s.asked
		for i := 0; i < 100; i++ {
			c, err := p.Alloc(64 + i)
			ok(t, "Alloc", err)
			ok(t, "Free", p.Free(c))
		}
		if s.asked != asked {
			t.Fatalf("frees of buffers never shared asked the Sharer %d times", s.asked-asked)
		}
		// FreeShared: the last reference went elsewhere.
		c, err := p.Alloc(100)
		ok(t, "Alloc", err)
		s.share(t, p, c, 1)
		s.goneElsewhere(c)
		ok(t, "FreeShared", p.FreeShared(c))
		if st := p.Stats(); st.Live != 0 {
			t.Fatalf("after FreeShared: %d live", st.Live)
		}
		// A reference dropped twice is the Sharer's error, and nothing is freed.
		d, err := p.Alloc(100)
		ok(t, "Alloc", err)
		s.share(t, p, d, 1)
		s.mu.Lock()
		s.refs[mem.Addr(d)] = 0
		s.mu.Unlock()
		if err := p.Free(d); !errors.Is(err, errDropped) {
			t.Fatalf("Free with no reference left: %v", err)
		}
		s.goneElsewhere(d)
		ok(t, "FreeShared", p.FreeShared(d))
		// Outside the pool.
		other := newPool(t, pinned.Options{Capacity: 4 << 20})
		x, err := other.Alloc(512)
		ok(t, "Alloc", err)
		ok(t, "Free outside", p.Free(x))
		if len(s.outside) != 1 || mem.Addr(s.outside[0]) != mem.Addr(x) || len(s.outside[0]) != 512 {
			t.Fatalf("FreeOutside got %d slices", len(s.outside))
		}
		s.outsideE = pinned.ErrNotOwned
		if err := p.Free(x); !errors.Is(err, pinned.ErrNotOwned) {
			t.Fatalf("a refused free outside: %v", err)
		}
		ok(t, "Free", other.Free(x))
		ok(t, "Close", other.Close())
		ok(t, "Close", p.Close())
	}
}

func TestShareRefusals(t *testing.T) {
	p := newPool(t, pinned.Options{Capacity: 4 << 20})
	b, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	if err := p.Share(b); !errors.Is(err, pinned.ErrInvalidOptions) {
		t.Fatalf("Share without a Sharer: %v", err)
	}
	ok(t, "Free", p.Free(b))
	ok(t, "Close", p.Close())

	p, _ = newSharedPool(t, pinned.Options{Capacity: 4 << 20})
	b, err = p.Alloc(4096)
	ok(t, "Alloc", err)
	if err := p.Share(b[16:]); !errors.Is(err, pinned.ErrSubSlice) {
		t.Fatalf("Share of an interior slice: %v", err)
	}
	if err := p.Share(b[:16:16]); !errors.Is(err, pinned.ErrSubSlice) {
		t.Fatalf("Share of a cut slice: %v", err)
	}
	ok(t, "Free", p.Free(b))
	if err := p.Share(b); !errors.Is(err, pinned.ErrDoubleFree) && !errors.Is(err, pinned.ErrNotOwned) {
		t.Fatalf("Share of a freed buffer: %v", err)
	}
	if err := p.Share(make([]byte, 64)); !errors.Is(err, pinned.ErrNotOwned) {
		t.Fatalf("Share of Go memory: %v", err)
	}
	ok(t, "Close", p.Close())
}

// On a CUDAHost pool, the last free of a shared buffer waits for the streams recorded on it,
// and FreeAsync of a shared buffer drops one reference.
func TestFakeSharedBufferWaitsForStream(t *testing.T) {
	r, s := newSharedRig(t, pinned.Options{})
	if r == nil {
		return
	}
	d := r.devAlloc(4096)
	b := r.alloc(4096, 1)
	s.share(t, r.pool, b, 2)
	r.f.Hold(true) // the stream's work waits
	ok(t, "DtoHAsync", r.heap.DtoHAsync(b, pubcuda.DevicePtr(d), pubcuda.Stream(r.s)))
	ok(t, "FreeAsync", r.pool.FreeAsync(b, pubcuda.Stream(r.s))) // one reference
	if r.deferred() != 0 || r.pool.Stats().Live != 1 {
		t.Fatalf("a shared buffer with a reference left: %d deferred, %d live", r.deferred(), r.pool.Stats().Live)
	}
	ok(t, "Free", r.pool.Free(b)) // the last: deferred behind the copy
	if r.deferred() != 1 {
		t.Fatalf("the last free of a buffer a queued copy writes: %d deferred, want 1", r.deferred())
	}
	r.f.Hold(false)
	ok(t, "Sync", r.heap.Sync())
	if err := r.pool.Trim(); err != nil {
		t.Fatalf("Trim: %v", err)
	}
	if st := r.pool.Stats(); st.Deferred != 0 || st.Live != 0 {
		t.Fatalf("after the stream passed: %d deferred, %d live", st.Deferred, st.Live)
	}
	ok(t, "device Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}

// TestHoldSharedBuffer: a shared buffer (Share) can be held, as package remote holds the
// buffers it moves, and a held buffer can be shared. Each free drops a reference at once; the
// last reference's give-back, by a free or by FreeShared, waits for the last Release. Checked
// on a pool without stream order (package ipcpool's: there the Hold was refused, the Share's
// hold bit taken for a free's claim, and the Share of a held buffer too) and on a CUDAHost
// one (there FreeShared gave a held buffer back at once). A second reference's free while held
// was refused with ErrDoubleFree in both.
func TestHoldSharedBuffer(t *testing.T) {
	p, s := newSharedPool(t, pinned.Options{Backend: pinned.Pageable})
	defer p.Close()
	holdShared(t, p, s)
}

func TestFakeHoldSharedBuffer(t *testing.T) {
	r, s := newSharedRig(t, pinned.Options{})
	if r == nil {
		return
	}
	holdShared(t, r.pool, s)
	r.finish()
}

func holdShared(t *testing.T, p *pinned.Pool, s *refSharer) {
	for _, n := range holdSizes {
		for _, shareFirst := range []bool{true, false} {
			b, err := p.Alloc(n)
			ok(t, "Alloc", err)
			var h pinned.Hold
			if shareFirst {
				s.share(t, p, b, 2)
				h, err = p.Hold(b)
				ok(t, "Hold of a shared buffer", err)
			} else {
				h, err = p.Hold(b)
				ok(t, "Hold", err)
				s.share(t, p, b, 2)
			}
			ok(t, "first Free", p.Free(b))
			ok(t, "last Free", p.Free(b))
			if err := p.Free(b); !errors.Is(err, pinned.ErrDoubleFree) {
				t.Fatalf("%d bytes: a free after the last, before the Release: %v, want ErrDoubleFree", n, err)
			}
			if live(t, p) != 1 {
				t.Fatalf("%d bytes: a held buffer's last reference gave it back before the Release", n)
			}
			ok(t, "Release", h.Release())
			if live(t, p) != 0 {
				t.Fatalf("%d bytes: %d live after the last reference and the last hold", n, live(t, p))
			}
			if err := p.Free(b); !errors.Is(err, pinned.ErrDoubleFree) {
				t.Fatalf("%d bytes: a free after the last: %v", n, err)
			}
		}
		// The last reference goes elsewhere (FreeShared) while held.
		c, err := p.Alloc(n)
		ok(t, "Alloc", err)
		s.share(t, p, c, 1)
		h, err := p.Hold(c)
		ok(t, "Hold", err)
		s.goneElsewhere(c)
		ok(t, "FreeShared", p.FreeShared(c))
		if live(t, p) != 1 {
			t.Fatalf("%d bytes: FreeShared gave a held buffer back before the Release", n)
		}
		ok(t, "Release", h.Release())
		if live(t, p) != 0 {
			t.Fatalf("%d bytes: the Release after FreeShared left %d live", n, live(t, p))
		}
		// Held and released, never freed: shared still, and freed by its references.
		c, err = p.Alloc(n)
		ok(t, "Alloc", err)
		s.share(t, p, c, 1)
		h, err = p.Hold(c)
		ok(t, "Hold", err)
		ok(t, "Release", h.Release())
		ok(t, "Free", p.Free(c))
		if live(t, p) != 0 {
			t.Fatalf("%d bytes: %d live after a shared buffer's only free", n, live(t, p))
		}
	}
}

// TestSharedSubSliceFree: the free of a part of a shared buffer is refused (ErrSubSlice) and
// drops no reference: it dropped the reference and then failed, and the buffer stayed live
// with no reference left to free it.
func TestSharedSubSliceFree(t *testing.T) {
	for _, o := range []pinned.Options{{Backend: pinned.Pageable}, {Backend: pinned.Pageable, ZeroOnFree: true}} {
		p, s := newSharedPool(t, o)
		b, err := p.Alloc(4096)
		ok(t, "Alloc", err)
		s.share(t, p, b, 1)
		if err := p.Free(b[:16:16]); !errors.Is(err, pinned.ErrSubSlice) {
			t.Fatalf("ZeroOnFree %v: free of a part of a shared buffer: %v, want ErrSubSlice", o.ZeroOnFree, err)
		}
		if s.refs[mem.Addr(b)] != 1 {
			t.Fatalf("ZeroOnFree %v: the free of a part dropped the buffer's reference", o.ZeroOnFree)
		}
		ok(t, "Free", p.Free(b))
		if live(t, p) != 0 {
			t.Fatalf("ZeroOnFree %v: the whole buffer's free after a part's left it live", o.ZeroOnFree)
		}
		ok(t, "Close", p.Close())
	}
}

// TestHoldSharedRace holds, shares, frees and releases buffers of a pool without stream order
// from several goroutines at once, in random orders: a buffer shared with r references is
// freed r times, among the releases of its holds, and the Share comes before or after the
// first Hold. Every buffer is freed once, after its last reference and its last hold.
func TestHoldSharedRace(t *testing.T) {
	p, s := newSharedPool(t, pinned.Options{Capacity: 256 << 20, Backend: pinned.Pageable})
	defer p.Close()
	rounds := 50
	if pinned.LongRun() {
		rounds = 200
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for range rounds {
				b, err := p.Alloc(1 + rng.IntN(300<<10))
				if err != nil {
					t.Error(err)
					return
				}
				refs, k := 1+rng.IntN(3), 1+rng.IntN(3)
				shareFirst := rng.IntN(2) == 0
				share := func() bool {
					if err := p.Share(b); err != nil {
						t.Error(err)
						return false
					}
					s.mu.Lock()
					s.refs[mem.Addr(b)] += refs
					s.mu.Unlock()
					return true
				}
				if shareFirst && !share() {
					return
				}
				hs := make([]pinned.Hold, k)
				for i := range hs {
					if hs[i], err = p.Hold(b); err != nil {
						t.Error(err)
						return
					}
				}
				if !shareFirst && !share() {
					return
				}
				// The frees land anywhere among the releases, each on a goroutine of its own.
				ops := rng.Perm(k + refs)
				var fw sync.WaitGroup
				for _, op := range ops {
					if op >= k {
						fw.Add(1)
						go func() { defer fw.Done(); ok2(t, p.Free(b)) }()
						continue
					}
					ok2(t, hs[op].Release())
				}
				fw.Wait()
			}
		}()
	}
	wg.Wait()
	if n := live(t, p); n != 0 {
		t.Fatalf("%d buffers live after every free and release", n)
	}
	if len(s.refs) != 0 {
		t.Fatalf("%d buffers with references left", len(s.refs))
	}
}

// TestFakeSharedFreeAsyncKeepsStream: FreeAsync on s of a shared buffer that is not its last
// reference drops the reference, and the buffer's last free (a Free, FreeShared) waits for s
// to pass the work queued on it before that FreeAsync. It forgot s: the last free, finding
// the buffer waiting for no stream, gave it back at once, and a copy queued on s before the
// FreeAsync wrote into the next owner's buffer.
func TestFakeSharedFreeAsyncKeepsStream(t *testing.T) {
	r, s := newSharedRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	const n = 4096
	d := r.devAlloc(n)
	ok(t, "MemsetAsync", r.heap.MemsetAsync(pubcuda.DevicePtr(d), 0x5C, n, pubcuda.Stream(r.s)))
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	for _, last := range []string{"Free", "FreeShared"} {
		b := r.alloc(n, 0)
		s.share(t, r.pool, b, 2)
		r.f.Hold(true)
		// A copy the pool is not told of (a raw driver call): FreeAsync orders it.
		ok(t, "MemcpyDtoHAsync", r.dev.MemcpyDtoHAsync(mem.Addr(b), d, n, r.s))
		ok(t, "FreeAsync", r.pool.FreeAsync(b, pubcuda.Stream(r.s))) // one of two references
		if last == "Free" {
			ok(t, "Free", r.pool.Free(b))
		} else {
			s.goneElsewhere(b)
			ok(t, "FreeShared", r.pool.FreeShared(b))
		}
		if got := r.deferred(); got != 1 {
			t.Fatalf("%s: %d buffers deferred after the last free of a buffer freed on a busy stream, want 1", last, got)
		}
		c := r.alloc(n, 0xB2)
		if mem.Addr(c) == mem.Addr(b) {
			t.Fatalf("%s: a shared buffer freed on a busy stream was handed out again", last)
		}
		r.f.Hold(false)
		ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
		if !bytes.Equal(c, bytes.Repeat([]byte{0xB2}, n)) {
			t.Fatalf("%s: a copy queued before a FreeAsync wrote into the next owner's buffer", last)
		}
		ok(t, "Free", r.pool.Free(c))
		ok(t, "Trim", r.pool.Trim())
		if st := r.pool.Stats(); st.Deferred != 0 || st.Live != 0 {
			t.Fatalf("%s: after the stream passed: %d deferred, %d live", last, st.Deferred, st.Live)
		}
	}
	ok(t, "device Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}

// TestSharedLastFreeAfterClose: Close with a shared buffer live (ErrLiveBlocks), then its
// frees: the last reference's releases the pool's memory, as the last free of any buffer
// does. It gave the buffer back and kept the memory mapped, with no later Close to release it
// (the pool was not busy: ErrClosed).
func TestSharedLastFreeAfterClose(t *testing.T) {
	for _, o := range []pinned.Options{{Backend: pinned.Pageable}, {Backend: pinned.Pageable, ZeroOnFree: true}} {
		p, s := newSharedPool(t, o)
		b, err := p.Alloc(4096)
		ok(t, "Alloc", err)
		s.share(t, p, b, 2)
		if err := p.Close(); !errors.Is(err, pinned.ErrLiveBlocks) {
			t.Fatalf("ZeroOnFree %v: Close with a shared buffer live: %v", o.ZeroOnFree, err)
		}
		ok(t, "first Free", p.Free(b))
		if st := p.Stats(); st.Reserved == 0 {
			t.Fatalf("ZeroOnFree %v: a free with a reference left released the memory", o.ZeroOnFree)
		}
		ok(t, "last Free", p.Free(b))
		if st := p.Stats(); st.Reserved != 0 || st.Live != 0 {
			t.Fatalf("ZeroOnFree %v: the pool holds %+v after Close and the last free", o.ZeroOnFree, st)
		}
	}
}

func TestFakeSharedLastFreeAsyncAfterClose(t *testing.T) {
	r, s := newSharedRig(t, pinned.Options{})
	if r == nil {
		return
	}
	b := r.alloc(4096, 1)
	s.share(t, r.pool, b, 1)
	if err := r.pool.Close(); !errors.Is(err, pinned.ErrLiveBlocks) {
		t.Fatalf("Close with a shared buffer live: %v", err)
	}
	ok(t, "FreeAsync", r.pool.FreeAsync(b, pubcuda.Stream(r.s)))
	if st := r.pool.Stats(); st.Reserved != 0 || st.Live != 0 {
		t.Fatalf("the pool holds %+v after Close and the last free", st)
	}
	r.finishClosed()
}

// finishClosed closes the heap of r, whose pool is closed and released, and checks that the
// fake holds nothing of either.
func (r *asyncRig) finishClosed() {
	r.t.Helper()
	r.f.Hold(false)
	ok(r.t, "heap Sync", r.heap.Sync())
	ok(r.t, "ForgetStream", r.heap.ForgetStream(pubcuda.Stream(r.s)))
	ok(r.t, "heap Close", r.heap.Close())
	if err := r.pool.Close(); !errors.Is(err, pinned.ErrClosed) {
		r.t.Fatalf("Close of a released pool: %v", err)
	}
	if n := r.f.Stat(fakecuda.Mappings) + r.f.Stat(fakecuda.Registrations) + r.f.Stat(fakecuda.Reservations); n != 0 {
		r.t.Errorf("the pool's memory outlived its last free: the fake holds %v", r.f.LiveObjects())
	}
}

// TestFakeFreeSharedHeldAfterClose: after Close, FreeShared of a held buffer, its last live
// one, returns at once (the last Release gives it back and releases the memory). It waited
// for the buffer to leave the heap's hold, which the Hold keeps: 5 s (closeWait), in the
// goroutine of package ipcpool that takes retired buffers back.
func TestFakeFreeSharedHeldAfterClose(t *testing.T) {
	r, s := newSharedRig(t, pinned.Options{})
	if r == nil {
		return
	}
	defer pinned.SetCloseWait(pinned.SetCloseWait(time.Second))
	b := r.alloc(4096, 1)
	s.share(t, r.pool, b, 1)
	h, err := r.pool.Hold(b)
	ok(t, "Hold", err)
	if err := r.pool.Close(); !errors.Is(err, pinned.ErrLiveBlocks) {
		t.Fatalf("Close with a shared buffer live: %v", err)
	}
	s.goneElsewhere(b)
	start := time.Now()
	ok(t, "FreeShared", r.pool.FreeShared(b))
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("FreeShared of a held buffer after Close took %v: it waited for the Hold", d)
	}
	if st := r.pool.Stats(); st.Live != 1 || st.Reserved == 0 {
		t.Fatalf("FreeShared gave a held buffer back, or released the memory: %+v", st)
	}
	ok(t, "Release", h.Release())
	if st := r.pool.Stats(); st.Reserved != 0 || st.Live != 0 {
		t.Fatalf("the pool holds %+v after Close and the last Release", st)
	}
	r.finishClosed()
}

// TestFreeSharedRefusals: FreeShared of a part of a shared buffer, or of a buffer never
// shared, is refused and changes nothing, as such a free is. In a ZeroOnFree pool without
// stream order it scrubbed the bytes it was given of a live buffer, and the part's refusal
// left the shared buffer's tag cleared, so that every Hold of it then failed with
// ErrDoubleFree; a buffer never shared was refused with ErrInvalidOptions.
func TestFreeSharedRefusals(t *testing.T) {
	p, s := newSharedPool(t, pinned.Options{Backend: pinned.Pageable, ZeroOnFree: true})
	b, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	for i := range b {
		b[i] = 7
	}
	s.share(t, p, b, 1)
	s.goneElsewhere(b)
	if err := p.FreeShared(b[:16:16]); !errors.Is(err, pinned.ErrSubSlice) {
		t.Fatalf("FreeShared of a part of a buffer: %v, want ErrSubSlice", err)
	}
	if b[0] != 7 || live(t, p) != 1 {
		t.Fatalf("FreeShared of a part scrubbed the buffer (%d) or freed it (%d live)", b[0], live(t, p))
	}
	h, err := p.Hold(b)
	ok(t, "Hold after a refused FreeShared", err)
	ok(t, "Release", h.Release())
	ok(t, "FreeShared", p.FreeShared(b))
	if live(t, p) != 0 {
		t.Fatalf("%d live after FreeShared", live(t, p))
	}
	if err := p.FreeShared(b); !errors.Is(err, pinned.ErrDoubleFree) {
		t.Fatalf("a second FreeShared: %v, want ErrDoubleFree", err)
	}
	c, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	c[0] = 9
	if err := p.FreeShared(c); !errors.Is(err, pinned.ErrNotOwned) {
		t.Fatalf("FreeShared of a buffer never shared: %v, want ErrNotOwned", err)
	}
	if c[0] != 9 || live(t, p) != 1 {
		t.Fatalf("FreeShared of a buffer never shared scrubbed it (%d) or freed it (%d live)", c[0], live(t, p))
	}
	ok(t, "Free", p.Free(c))
	ok(t, "Close", p.Close())
}

// TestFreeSharedUnknownToSharer: a Free of a buffer shared with Share whose Sharer does not
// know it (DropShared says shared false: a reference gone, or a Share the Sharer was not told
// of) frees it, as the Sharer's contract says ("the pool frees it as any held buffer"), in
// every backend: Pageable, Locked (with and without the guards' path) and CUDAHost. A CUDAHost
// pool freed it; the others refused it with ErrDoubleFree and kept it shared for FreeShared
// (and before that waited for the Share's hold bit to go, looping for good).
func TestFreeSharedUnknownToSharer(t *testing.T) {
	for _, o := range []pinned.Options{
		{Backend: pinned.Pageable},
		{Backend: pinned.Locked},
		{Backend: pinned.Locked, ZeroOnFree: true},
		{Backend: pinned.Pageable, Quota: 1 << 20},
	} {
		t.Run(fmt.Sprintf("%v zero %v quota %d", o.Backend, o.ZeroOnFree, o.Quota), func(t *testing.T) {
			p, _ := newSharedPool(t, o)
			freeUnknownShared(t, p)
		})
	}
}

// TestFakeFreeSharedUnknownToSharer is TestFreeSharedUnknownToSharer in a CUDAHost pool, with
// and without the guards' path.
func TestFakeFreeSharedUnknownToSharer(t *testing.T) {
	for _, o := range []pinned.Options{{PurgeDelay: -1}, {PurgeDelay: -1, ZeroOnFree: true}} {
		r, _ := newSharedRig(t, o)
		if r == nil {
			return
		}
		freeUnknownShared(t, r.pool)
	}
}

// freeUnknownShared shares a buffer of p that the pool's Sharer does not know, frees it, and
// checks that the Free freed it (see TestFreeSharedUnknownToSharer); then it closes p.
func freeUnknownShared(t *testing.T, p *pinned.Pool) {
	t.Helper()
	b, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	ok(t, "Share", p.Share(b)) // the Sharer counts no reference of it
	done := make(chan error, 1)
	go func() { done <- p.Free(b) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Free of a shared buffer its Sharer does not know: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Free of a shared buffer its Sharer does not know did not return in 5 s")
	}
	if n := live(t, p); n != 0 {
		t.Fatalf("%d live after the Free of a shared buffer its Sharer does not know, want 0", n)
	}
	if err := p.FreeShared(b); err == nil {
		t.Fatal("FreeShared of a buffer freed: nil, want an error")
	}
	if err := p.Free(b); !errors.Is(err, pinned.ErrDoubleFree) {
		t.Fatalf("a second Free: %v, want ErrDoubleFree", err)
	}
	ok(t, "Close", p.Close())
}

// pendingSharer is a refSharer that notes, at each FreeOutside, how much work the fake driver
// still held queued.
type pendingSharer struct {
	*refSharer
	pending func() int
	seen    []int
}

func (s *pendingSharer) FreeOutside(b []byte) error {
	s.seen = append(s.seen, s.pending())
	return s.refSharer.FreeOutside(b)
}

// TestFakeFreeAsyncOutsideWaitsForStream: FreeAsync on stream s of a buffer outside the pool
// (another process's, which its Sharer frees) behind a copy still queued on s hands it to
// FreeOutside only once s has passed the copy: the other process cannot wait for this one's
// stream, and reuses the buffer as soon as it is told.
func TestFakeFreeAsyncOutsideWaitsForStream(t *testing.T) {
	s := &pendingSharer{refSharer: newRefSharer()}
	r := newAsyncRig(t, pinned.Options{Sharer: s})
	if r == nil {
		return
	}
	s.pending = r.f.Pending
	other := newPool(t, pinned.Options{Capacity: 4 << 20, Backend: pinned.CUDAHost})
	x, err := other.Alloc(4096)
	ok(t, "Alloc", err)
	d := r.devAlloc(4096)
	r.f.Hold(true)
	ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), x, pubcuda.Stream(r.s)))
	ok(t, "FreeAsync outside the pool", r.pool.FreeAsync(x, pubcuda.Stream(r.s)))
	if len(s.seen) != 1 || s.seen[0] != 0 {
		t.Errorf("FreeOutside calls, with the work still queued at each: %v; want one, with none queued", s.seen)
	}
	r.f.Hold(false)
	ok(t, "Free", other.Free(x))
	ok(t, "Close", other.Close())
	ok(t, "heap Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}
