package heap

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestPropertyKept runs random Alloc, Zalloc, local and remote frees of object pages and huge
// objects (256 KiB to 6 MiB) over an arena whose purge timer ticks every half millisecond, with
// pauses that let it give kept memory up while the heap is idle, and occasional Trims. A range
// given up while in use would lose its contents (a decommitted page reads as zero): every live
// block's pattern is checked before it is freed, Zalloc must read as zero, and the model's
// counters must agree with the heap's.
func TestPropertyKept(t *testing.T) {
	ops := 500 // each step may fault in megabytes the timer gave back: slow on a VM
	if longRun() {
		ops = 1_500
	}
	const capacity = 256 << 20
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: capacity, RegionSize: capacity, PurgeDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	g, _ := NewGroup(a)
	h, _ := g.NewHeap(Options{})
	r := rand.New(rand.NewPCG(7, 11))
	sizes := []uintptr{300 << 10, 512 << 10, 1 << 20, 4 << 20}
	var live []liveBlock
	var inUse uintptr
	var given uint64
	for step := 0; step < ops; step++ {
		switch x := r.IntN(1000); {
		case x < 10:
			time.Sleep(2 * time.Millisecond) // idle past the delay: the timer gives up what is kept
		case x < 12:
			h.Trim()
		}
		if len(live) < 4 || (len(live) < 24 && r.IntN(2) == 0) {
			n := sizes[r.IntN(len(sizes))] - uintptr(r.IntN(16<<10))
			var p uintptr
			var err error
			if r.IntN(4) == 0 {
				p, err = h.Zalloc(n)
				if err == nil {
					for i := uintptr(0); i < n; i += 1024 {
						if mem.Bytes(p, n)[i] != 0 {
							t.Fatalf("step %d: Zalloc(%d) byte %d is not zero", step, n, i)
						}
					}
				}
			} else {
				p, err = h.Alloc(n)
			}
			if errors.Is(err, ErrOutOfMemory) {
				continue
			}
			if err != nil {
				t.Fatalf("step %d: alloc %d: %v", step, n, err)
			}
			b := liveBlock{p: p, n: n, seed: byte(step)}
			fill(b, false)
			live = append(live, b)
			inUse += n
			continue
		}
		b := takeRandom(t, r, &live, step)
		inUse -= b.n
		if r.IntN(4) == 0 {
			err = g.Free(b.p) // collected by the owner later
		} else {
			err = h.FreeSized(b.p, b.n)
		}
		if err != nil {
			t.Fatalf("step %d: free: %v", step, err)
		}
		if step%100 == 0 {
			if st := h.Stats(); st.Live != uint64(len(live)) || st.InUse != uint64(inUse) {
				t.Fatalf("step %d: stats live %d inuse %d, model %d %d", step, st.Live, st.InUse, len(live), inUse)
			}
			given = a.Stats().Purged
		}
	}
	if given == 0 {
		t.Fatal("nothing was ever purged: the test did not exercise the timer")
	}
	for _, b := range live {
		if bad := fill(b, true); bad > 0 {
			t.Fatalf("block [%#x, +%d) has %d corrupted bytes", b.p, b.n, bad)
		}
		if err := h.Free(b.p); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.ChunksInUse != 0 || st.Kept != 0 {
		t.Fatalf("after Close: %+v", st)
	}
}
