package pinned_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/probe"
	"github.com/pinmalloc/pinmalloc/pinned"
)

var holdSizes = []int{100, 64 << 10, 700 << 10, 3 << 20} // a class block, a medium one, an object page, a huge object

func live(t *testing.T, p *pinned.Pool) uint64 {
	t.Helper()
	return p.Usage().Live
}

// TestHoldDefersFree: a buffer freed while held stays live, and is not handed out again, until
// the last hold is released; a buffer held and released without a free stays live and frees
// as usual.
func TestHoldDefersFree(t *testing.T) {
	p := newPool(t, pinned.Options{Capacity: 64 << 20, Backend: pinned.Pageable}) // 15 MiB live: beyond an ordinary user's memlock
	defer p.Close()
	for _, n := range holdSizes {
		b, err := p.Alloc(n)
		ok(t, "Alloc", err)
		h1, err := p.Hold(b)
		ok(t, "Hold", err)
		h2, err := p.Hold(b[n/2 : n/2+1]) // a part of it holds the whole buffer
		ok(t, "Hold of a part", err)
		ok(t, "Free of a held buffer", p.Free(b))
		if live(t, p) != 1 {
			t.Fatalf("%d bytes: a held buffer freed is not live", n)
		}
		if err := p.Free(b); !errors.Is(err, pinned.ErrDoubleFree) {
			t.Fatalf("second Free of a held buffer: %v", err)
		}
		if _, err := p.Hold(b); !errors.Is(err, pinned.ErrDoubleFree) {
			t.Fatalf("Hold of a buffer whose free is pending: %v", err)
		}
		// No Alloc of the size gets the held buffer's memory.
		var others [][]byte
		for range 4 {
			o, err := p.Alloc(n)
			ok(t, "Alloc", err)
			if mem.Addr(o) == mem.Addr(b) {
				t.Fatalf("%d bytes: the held buffer was handed out again", n)
			}
			others = append(others, o)
		}
		ok(t, "Release", h1.Release())
		if live(t, p) != 5 {
			t.Fatalf("%d bytes: freed before its last hold was released", n)
		}
		// A second Release of a hold that is not the last ends no other hold.
		if err := h1.Release(); !errors.Is(err, pinned.ErrDoubleFree) {
			t.Fatalf("%d bytes: a second Release of a hold not the last: %v", n, err)
		}
		if live(t, p) != 5 {
			t.Fatalf("%d bytes: a second Release of one hold freed the buffer another holds", n)
		}
		ok(t, "last Release", h2.Release())
		if live(t, p) != 4 {
			t.Fatalf("%d bytes: the last Release did not free the buffer (%d live)", n, live(t, p))
		}
		if err := h2.Release(); !errors.Is(err, pinned.ErrDoubleFree) {
			t.Fatalf("Release once more: %v", err)
		}
		// Held and released, never freed meanwhile: an ordinary live buffer.
		c := others[0]
		h, err := p.Hold(c)
		ok(t, "Hold", err)
		ok(t, "Release", h.Release())
		for _, o := range others {
			ok(t, "Free after a Release", p.Free(o))
		}
		if live(t, p) != 0 {
			t.Fatalf("%d live after every free", live(t, p))
		}
	}
}

func TestHoldErrors(t *testing.T) {
	p := newPool(t, pinned.Options{Capacity: 64 << 20})
	b, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	if _, err := p.Hold(nil); !errors.Is(err, pinned.ErrNotOwned) {
		t.Errorf("Hold(nil): %v", err)
	}
	if _, err := p.Hold(make([]byte, 10)); !errors.Is(err, pinned.ErrNotOwned) {
		t.Errorf("Hold of Go memory: %v", err)
	}
	tail, err := p.Hold(b[4000:])
	ok(t, "Hold of the tail", err)
	if err := (pinned.Hold{}).Release(); !errors.Is(err, pinned.ErrNotOwned) {
		t.Errorf("Release of the zero Hold: %v", err)
	}
	h, err := p.Hold(b)
	ok(t, "Hold", err)
	if err := p.Free(b[:10:10]); !errors.Is(err, pinned.ErrSubSlice) {
		t.Errorf("Free of a sub-slice of a held buffer: %v", err)
	}
	ok(t, "Free", p.Free(b))
	ok(t, "Release", h.Release())
	if live(t, p) != 1 {
		t.Error("freed before the tail's hold was released")
	}
	ok(t, "Release of the tail's hold", tail.Release())
	if _, err := p.Hold(b); !errors.Is(err, pinned.ErrDoubleFree) {
		t.Errorf("Hold of a freed buffer: %v", err)
	}
	ok(t, "Close", p.Close())
	if _, err := p.Hold(b); !errors.Is(err, pinned.ErrClosed) {
		t.Errorf("Hold after Close: %v", err)
	}
}

// TestHoldGuards: with ZeroOnFree and a quota, the scrub and the quota's credit come at the
// last Release, not at the Free. The purge is off: the test reads the buffer after its last
// Release, and a purge between the two rightly decommits it (PROT_NONE: a fault).
func TestHoldGuards(t *testing.T) {
	p := newPool(t, pinned.Options{Capacity: 64 << 20, ZeroOnFree: true, Quota: 1 << 20, Backend: pinned.Pageable, PurgeDelay: -1})
	defer p.Close()
	b, err := p.Alloc(1 << 20)
	ok(t, "Alloc", err)
	for i := range b {
		b[i] = 0xAB
	}
	h, err := p.Hold(b)
	ok(t, "Hold", err)
	ok(t, "Free", p.Free(b))
	if b[0] != 0xAB || b[len(b)-1] != 0xAB {
		t.Fatal("scrubbed while held: a transfer would send zeros")
	}
	if _, err := p.Alloc(1); !errors.Is(err, pinned.ErrQuota) {
		t.Fatalf("Alloc under the quota while the held buffer counts: %v", err)
	}
	ok(t, "Release", h.Release())
	if b[0] != 0 || b[len(b)-1] != 0 {
		t.Fatal("not scrubbed at the last Release")
	}
	c, err := p.Alloc(1 << 20)
	ok(t, "Alloc after the Release", err)
	ok(t, "Free", p.Free(c))
}

// TestHoldClose: Close with a freed buffer still held keeps the memory, and the last Release
// releases it.
func TestHoldClose(t *testing.T) {
	p := newPool(t, pinned.Options{Capacity: 64 << 20})
	b, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	h, err := p.Hold(b)
	ok(t, "Hold", err)
	if err := p.Close(); !errors.Is(err, pinned.ErrLiveBlocks) {
		t.Fatalf("Close with a live held buffer: %v", err)
	}
	ok(t, "Free", p.Free(b))
	b[0] = 1 // still mapped
	ok(t, "Release", h.Release())
	if u := p.Usage(); u.Reserved != 0 || u.Live != 0 {
		t.Fatalf("after the last Release of a closed pool: %+v", u)
	}
}

// TestHoldFreedClose: Close with a buffer freed while held, in a pool with no streams, says
// ErrBusy for the Release it waits for (it said the buffers waited for their streams), and
// the last Release releases the memory.
func TestHoldFreedClose(t *testing.T) {
	p := newPool(t, pinned.Options{Backend: pinned.Pageable, Capacity: 8 << 20})
	b, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	h, err := p.Hold(b)
	ok(t, "Hold", err)
	ok(t, "Free of the held buffer", p.Free(b))
	err = p.Close()
	if !errors.Is(err, pinned.ErrBusy) || !strings.Contains(err.Error(), "Release") || strings.Contains(err.Error(), "stream") {
		t.Fatalf("Close with a buffer freed while held: %v, want ErrBusy naming its Release and no stream", err)
	}
	ok(t, "Release", h.Release())
	if u := p.Usage(); u.Reserved != 0 || u.Live != 0 {
		t.Fatalf("after the last Release of a closed pool: %+v", u)
	}
}

// TestHoldCloseRacingRelease: Close while the last Release of a held buffer freed meanwhile
// makes that free waits for the Release, and releases the pool's memory: nil, and a later Close
// says ErrClosed. Close counted the buffer live (the Release had taken it off the buffers freed
// while held, and not yet given it back) and said ErrLiveBlocks, though it was on its way back.
// Checked with a buffer of its own and a shared one whose last reference went while held.
func TestHoldCloseRacingRelease(t *testing.T) {
	for _, shared := range []bool{false, true} {
		p, s := newSharedPool(t, pinned.Options{Backend: pinned.Pageable})
		b, err := p.Alloc(4096)
		ok(t, "Alloc", err)
		if shared {
			s.share(t, p, b, 1)
		}
		h, err := p.Hold(b)
		ok(t, "Hold", err)
		ok(t, "Free of the held buffer", p.Free(b))
		closeRacingRelease(t, p, h, fmt.Sprintf("shared %v", shared))
		if err := p.Close(); !errors.Is(err, pinned.ErrClosed) {
			t.Fatalf("shared %v: Close once more: %v, want ErrClosed", shared, err)
		}
	}
}

// closeRacingRelease releases h, the last hold of a buffer freed while held, with a Close of p
// run during the Release's free, and checks that both succeed and that p holds no memory after.
func closeRacingRelease(t *testing.T, p *pinned.Pool, h pinned.Hold, what string) {
	t.Helper()
	errc := inRelease(t, p.Close)
	ok(t, "Release", h.Release())
	if err := <-errc; err != nil {
		t.Fatalf("%s: Close during the last Release's free: %v, want nil", what, err)
	}
	if u := p.Usage(); u.Reserved != 0 || u.Live != 0 {
		t.Fatalf("%s: after Close and the last Release: %+v", what, u)
	}
}

// TestHoldRace holds, frees and releases buffers from several goroutines at once, in random
// orders: every buffer is freed exactly once, and only after its last hold.
func TestHoldRace(t *testing.T) {
	p := newPool(t, pinned.Options{Capacity: 256 << 20, Backend: pinned.Pageable})
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
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range rounds {
				n := 1 + rng.IntN(300<<10)
				b, err := p.Alloc(n)
				if err != nil {
					t.Error(err)
					return
				}
				k := 1 + rng.IntN(3)
				hs := make([]pinned.Hold, k)
				for i := range hs {
					if hs[i], err = p.Hold(b); err != nil {
						t.Error(err)
						return
					}
				}
				// The free lands anywhere among the releases, on another goroutine.
				at := rng.IntN(k + 1)
				var fw sync.WaitGroup
				for i := range k + 1 {
					if i == at {
						fw.Add(1)
						go func() { defer fw.Done(); b[0] = 1; ok2(t, p.Free(b)) }()
						continue
					}
					j := i
					if i > at {
						j = i - 1
					}
					ok2(t, hs[j].Release())
				}
				fw.Wait()
			}
		}()
	}
	wg.Wait()
	if n := live(t, p); n != 0 {
		t.Fatalf("%d buffers live after every free and release", n)
	}
}

func ok2(t *testing.T, err error) {
	probe.Pause()
	if err != nil {
		t.Error(err)
	}
}

// inRelease makes the next last Release that has a deferred free to make run race on another
// goroutine just before that free, and returns race's error. The Release goes on once race has
// returned, or waits for the Release.
func inRelease(t *testing.T, race func() error) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	waiting := make(chan struct{}, 1)
	var once sync.Once
	restore := pinned.SetReleaseHooks(func() {
		once.Do(func() {
			done := make(chan error, 1)
			go func() { done <- race() }()
			select {
			case err := <-done:
				errc <- err
			case <-waiting:
				go func() { errc <- <-done }()
			}
		})
	}, func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	})
	t.Cleanup(restore)
	return errc
}

// TestHoldReleaseRacingFree: a second Free of a held buffer (a double free: the first was
// deferred to the last Release) that runs while that Release makes the deferred free is
// refused with ErrDoubleFree, and the buffer is freed once. The Release used to drop the
// buffer's entry and hold bit before its free, so the racing Free freed the buffer, and the
// Release's own free then failed (or freed the buffer of whoever had it since).
func TestHoldReleaseRacingFree(t *testing.T) {
	for _, o := range []pinned.Options{
		{Capacity: 64 << 20, Backend: pinned.Pageable},
		{Capacity: 64 << 20, Backend: pinned.Pageable, ZeroOnFree: true, Quota: 32 << 20, RecordSites: true}, // the guarded paths
	} {
		holdReleaseRacingFree(t, newPool(t, o))
	}
}

func holdReleaseRacingFree(t *testing.T, p *pinned.Pool) {
	for _, n := range holdSizes {
		for _, racer := range []string{"Free", "Hold"} {
			b, err := p.Alloc(n)
			ok(t, "Alloc", err)
			h, err := p.Hold(b)
			ok(t, "Hold", err)
			ok(t, "Free of the held buffer", p.Free(b))
			errc := inRelease(t, func() error {
				if racer == "Hold" {
					_, err := p.Hold(b)
					return err
				}
				return p.Free(b)
			})
			before := p.Stats()
			if err := h.Release(); err != nil {
				t.Fatalf("%d bytes, racing %s: Release: %v", n, racer, err)
			}
			if err := <-errc; !errors.Is(err, pinned.ErrDoubleFree) {
				t.Fatalf("%d bytes: %s during the last Release's free: %v, want ErrDoubleFree", n, racer, err)
			}
			if st := p.Stats(); st.Live != 0 || st.Frees != before.Frees+1 {
				t.Fatalf("%d bytes, racing %s: %d live and %d frees after the Release, want 0 and %d", n, racer, st.Live, st.Frees, before.Frees+1)
			}
			c, err := p.Alloc(n)
			ok(t, "Alloc after the Release", err)
			ok(t, "Free", p.Free(c))
		}
	}
	ok(t, "Close", p.Close())
}

// TestHoldBetweenGuardedFreeLooks: a Hold that takes a ZeroOnFree pool's buffer between its
// Free's look at the holds and the Free's claim defers the Free to the Hold's Release, as a
// Hold before the Free does: the Free returns nil, the buffer stays live and unscrubbed while
// held, and the Release frees it. The Free was refused with ErrDoubleFree ("being freed by
// another goroutine"), and the buffer, held and then released, leaked.
func TestHoldBetweenGuardedFreeLooks(t *testing.T) {
	p := newPool(t, pinned.Options{Capacity: 8 << 20, Backend: pinned.Pageable, ZeroOnFree: true})
	defer p.Close()
	b, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	b[0] = 7
	var h pinned.Hold
	var herr error
	restore := pinned.SetAfterHoldsLook(func() { h, herr = p.Hold(b) })
	err = p.Free(b)
	restore()
	ok(t, "Hold between the Free's looks", herr)
	ok(t, "Free of a buffer held meanwhile", err)
	if live(t, p) != 1 || b[0] != 7 {
		t.Fatalf("a Free deferred to a Hold: %d live, first byte %d; want 1 live, 7", live(t, p), b[0])
	}
	ok(t, "Release", h.Release())
	if live(t, p) != 0 {
		t.Fatalf("the Release left %d live", live(t, p))
	}
}

// TestLive: Live accepts a live buffer and any part of it, holds nothing (a free goes at once),
// and refuses what Hold refuses: a freed buffer, a range running past its buffer, memory of no
// buffer of the pool, an empty slice, a released pool; none of it allocates.
func TestLive(t *testing.T) {
	p := newPool(t, pinned.Options{Capacity: 64 << 20, Backend: pinned.Pageable})
	for _, n := range holdSizes {
		b, err := p.Alloc(n)
		ok(t, "Alloc", err)
		ok(t, "Live", p.Live(b))
		ok(t, "Live of a part", p.Live(b[n/2:n/2+1]))
		if err := p.Live(mem.Bytes(mem.Addr(b), uintptr(n)+1)); !errors.Is(err, pinned.ErrNotOwned) {
			t.Fatalf("%d bytes: Live of a range one byte past the buffer: %v", n, err)
		}
		if a := testing.AllocsPerRun(100, func() { _ = p.Live(b) }); a != 0 {
			t.Fatalf("Live allocates: %.1f", a)
		}
		ok(t, "Free", p.Free(b)) // not held by Live
		if err := p.Live(b); !errors.Is(err, pinned.ErrNotOwned) && !errors.Is(err, pinned.ErrDoubleFree) {
			t.Fatalf("%d bytes: Live of a freed buffer: %v", n, err)
		}
	}
	if err := p.Live(make([]byte, 8)); !errors.Is(err, pinned.ErrNotOwned) {
		t.Fatalf("Live of Go memory: %v", err)
	}
	if err := p.Live(nil); !errors.Is(err, pinned.ErrNotOwned) {
		t.Fatalf("Live of an empty slice: %v", err)
	}
	b, err := p.Alloc(64)
	ok(t, "Alloc", err)
	ok(t, "Free", p.Free(b))
	ok(t, "Close", p.Close())
	if err := p.Live(b); !errors.Is(err, pinned.ErrClosed) {
		t.Fatalf("Live after Close: %v", err)
	}
}

// TestHoldAllocatesNothing: a Hold and its Release allocate nothing in steady state (the holds
// table keeps the entries it drops for the next Hold): package remote holds a buffer for each
// put and get, and for each answer to a peer's get.
func TestHoldAllocatesNothing(t *testing.T) {
	p := newPool(t, pinned.Options{Capacity: 64 << 20, Backend: pinned.Pageable})
	defer p.Close()
	b, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	defer p.Free(b)
	var failed error
	a := testing.AllocsPerRun(200, func() {
		h, err := p.Hold(b)
		if err == nil {
			err = h.Release()
		}
		if err != nil {
			failed = err
		}
	})
	ok(t, "Hold and Release", failed)
	if a != 0 {
		t.Fatalf("a Hold and its Release: %.1f allocations, want 0", a)
	}
}
