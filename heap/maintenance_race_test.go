package heap

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// raceMsg is a block handed to a goroutine that does not own it.
type raceMsg struct {
	p, n  uintptr
	stamp byte
}

// TestMaintenanceRacesRemote races the owners' maintenance (Trim, PurgeIdle, Collect), their
// non-blocking paths (TryAlloc, TryFree, which leave object pages pending and empty pages
// deferred) and the arena's purge timer with remote frees (Group.FreeSized, another heap's
// Free and TryFree) of class blocks, object pages and huge objects. Every block is stamped at
// both ends and checked before its free: a block handed out twice, or whose memory a purge gave
// up while live (the host provider's decommit zeroes it), reads a wrong stamp.
func TestMaintenanceRacesRemote(t *testing.T) {
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 2 << 30, PurgeDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	g, err := NewGroup(a)
	if err != nil {
		t.Fatal(err)
	}
	heaps := make([]*Heap, 3)
	for i := range heaps {
		if heaps[i], err = g.NewHeap(Options{}); err != nil {
			t.Fatal(err)
		}
	}
	raceStress(t, g, heaps, nil)
	for w, h := range heaps {
		if err := h.Close(); err != nil {
			t.Errorf("heap %d: %v", w, err)
		}
	}
}

// TestLendRacesRemote is TestMaintenanceRacesRemote over coarse memory with borrowers:
// the lender's owner (under the lender's lock) allocates, frees, trims and purges while the
// borrowers' pages in its runs take remote frees and go back to it.
func TestLendRacesRemote(t *testing.T) {
	g, l, hs := newLendGroup(t, 3)
	stop := make(chan struct{})
	var lw sync.WaitGroup
	lw.Add(1)
	go func() {
		defer lw.Done()
		r := rand.New(rand.NewPCG(5, 5))
		var live []uintptr
		for {
			select {
			case <-stop:
				l.mu.Lock()
				for _, p := range live {
					if err := l.h.Free(p); err != nil {
						t.Errorf("lender free: %v", err)
					}
				}
				l.h.Trim()
				l.mu.Unlock()
				return
			default:
			}
			l.mu.Lock()
			for range 20 {
				switch k := r.IntN(10); {
				case k < 5:
					p, err := l.h.Alloc(uintptr(16 + r.IntN(200<<10)))
					if err != nil {
						t.Errorf("lender alloc: %v", err)
					} else {
						live = append(live, p)
					}
				case k < 9:
					if len(live) > 0 {
						j := r.IntN(len(live))
						if err := l.h.Free(live[j]); err != nil {
							t.Errorf("lender free: %v", err)
						}
						live[j] = live[len(live)-1]
						live = live[:len(live)-1]
					}
				default:
					if r.IntN(2) == 0 {
						l.h.Trim()
					} else {
						l.h.PurgeIdle()
					}
				}
			}
			l.mu.Unlock()
			time.Sleep(20 * time.Microsecond)
		}
	}()
	raceStress(t, g, hs, func() { // verify reads the group's tables, which the lender changes
		close(stop)
		lw.Wait()
	})
}

// raceStress runs the owners of heaps against remote freers (see
// TestMaintenanceRacesRemote), then quiesce, if any, then checks the heaps.
func raceStress(t *testing.T, g *Group, heaps []*Heap, quiesce func()) {
	owners := len(heaps)
	steps := 20_000
	if longRun() {
		steps = 200_000
	}
	var handed sync.Map // block address → stamp, while handed out
	check := func(m raceMsg, who string) {
		b := mem.Bytes(m.p, m.n)
		if b[0] != m.stamp || b[m.n-1] != m.stamp || b[m.n/2] != m.stamp {
			t.Errorf("%s: block %#x+%d reads %d %d %d, want %d", who, m.p, m.n, b[0], b[m.n/2], b[m.n-1], m.stamp)
		}
		if v, ok := handed.LoadAndDelete(m.p); !ok || v.(byte) != m.stamp {
			t.Errorf("%s: block %#x not recorded as handed out with stamp %d (%v %v)", who, m.p, m.stamp, v, ok)
		}
	}
	inbox := make([]chan raceMsg, owners)
	for i := range inbox {
		inbox[i] = make(chan raceMsg, 512)
	}
	remote := make(chan raceMsg, 512)
	var freers sync.WaitGroup
	for range 2 {
		freers.Add(1)
		go func() {
			defer freers.Done()
			for m := range remote {
				check(m, "remote")
				if err := g.FreeSized(m.p, m.n); err != nil {
					t.Errorf("remote free %#x: %v", m.p, err)
				}
			}
		}()
	}
	var stamp atomic.Uint32
	var wg sync.WaitGroup
	var done atomic.Int32
	for w := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := heaps[w]
			r := rand.New(rand.NewPCG(uint64(w), 77))
			var mine []raceMsg
			freeIn := func(m raceMsg) {
				check(m, "owner")
				if r.IntN(2) == 0 && h.TryFree(m.p, m.n) {
					return
				}
				if err := h.FreeSized(m.p, m.n); err != nil {
					t.Errorf("owner %d free %#x: %v", w, m.p, err)
				}
			}
			drain := func() {
				for {
					select {
					case m := <-inbox[w]:
						freeIn(m)
					default:
						return
					}
				}
			}
			for i := 0; i < steps && !t.Failed(); i++ {
				drain()
				switch k := r.IntN(100); {
				case k < 45:
					n := uintptr(16 + r.IntN(12<<10))
					switch r.IntN(60) {
					case 0:
						n = uintptr(300<<10 + r.IntN(700<<10))
					case 1:
						n = uintptr(1<<20 + r.IntN(3<<20))
					}
					var p uintptr
					ok := false
					if r.IntN(2) == 0 {
						p, ok = h.TryAlloc(n)
					}
					if !ok {
						var err error
						if p, err = h.Alloc(n); err != nil {
							t.Errorf("owner %d: %v", w, err)
							return
						}
					}
					s := byte(stamp.Add(1)) | 1
					if old, loaded := handed.LoadOrStore(p, s); loaded {
						t.Errorf("owner %d: block %#x handed out twice (stamp %v)", w, p, old)
					}
					b := mem.Bytes(p, n)
					b[0], b[n/2], b[n-1] = s, s, s
					m := raceMsg{p, n, s}
					switch r.IntN(3) {
					case 0:
						mine = append(mine, m)
					case 1:
						inbox[(w+1+r.IntN(owners-1))%owners] <- m
					default:
						remote <- m
					}
				case k < 85:
					if len(mine) > 0 {
						j := r.IntN(len(mine))
						m := mine[j]
						mine[j] = mine[len(mine)-1]
						mine = mine[:len(mine)-1]
						freeIn(m)
					}
				case k < 90:
					h.Collect()
				case k < 94:
					h.PurgeIdle()
				case k < 96:
					h.Trim()
				default:
					for _, m := range mine {
						check(m, "live")
						handed.Store(m.p, m.stamp)
					}
				}
			}
			for _, m := range mine {
				freeIn(m)
			}
			done.Add(1)
			for int(done.Load()) < owners {
				drain()
				time.Sleep(50 * time.Microsecond)
			}
			drain() // no owner sends any more
		}()
	}
	wg.Wait()
	for _, c := range inbox {
		for m := range len(c) {
			_ = m
			freeIn := <-c
			check(freeIn, "late")
			_ = g.FreeSized(freeIn.p, freeIn.n)
		}
	}
	close(remote)
	freers.Wait()
	if quiesce != nil {
		quiesce()
	}
	for w, h := range heaps {
		h.Collect()
		if err := h.verify(); err != nil {
			t.Errorf("heap %d: %v", w, err)
		}
		if st := h.Stats(); st.Live != 0 {
			t.Errorf("heap %d: %d bytes live after every free", w, st.Live)
		}
	}
}
