package heap

import (
	"fmt"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
)

// TestTrimGivesRunsBack: a packed heap's run that grew over the arena and then emptied but for
// a block or two gives its empty chunks back at Trim, wherever they lie in the run, so that
// another heap of the group finds room for a run of its own. The run kept them until it
// emptied whole: the other heap's Alloc failed with the arena's capacity exhausted while one
// chunk of it was in use (in a pinned CUDAHost pool of 64 MiB, an Alloc of 64 B failed with
// 8 MiB committed for 13 live buffers). Trim gave back the empty chunks at a run's end first,
// and those before a live block, which split the run, not at all. Both heaps then allocate
// over the split runs again.
func TestTrimGivesRunsBack(t *testing.T) {
	for _, keep := range [][]int{{0}, {14}, {7}, {0, 14}, {3, 10}} { // the 1 MiB objects left live
		t.Run(fmt.Sprint(keep), func(t *testing.T) {
			a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB}), Capacity: 16 << 20, PurgeDelay: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			g, err := NewGroup(a)
			if err != nil {
				t.Fatal(err)
			}
			ha, err := g.NewHeap(Options{Align: 64})
			if err != nil {
				t.Fatal(err)
			}
			hb, err := g.NewHeap(Options{Align: 64})
			if err != nil {
				t.Fatal(err)
			}
			if !ha.packed || !g.packRuns {
				t.Skip("the arena's memory does not commit 2 MiB at a time here: no runs to pack")
			}
			var ps, live []uintptr
			for range 15 { // 15 MiB of objects: a run of 8 chunks, the whole arena
				p, err := ha.Alloc(1 << 20)
				if err != nil {
					t.Fatal(err)
				}
				ps = append(ps, p)
			}
			for i, p := range ps {
				if len(live) < len(keep) && keep[len(live)] == i {
					live = append(live, p)
				} else if err := ha.Free(p); err != nil {
					t.Fatal(err)
				}
			}
			ha.Trim()
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(ha.verify())
			t.Logf("after the Trim: the first heap's runs hold %d chunks in %d runs", ha.nsegs, len(ha.runs))
			chunks := map[uintptr]bool{} // the chunks the live objects hold
			for _, p := range live {
				chunks[p>>segShift] = true
			}
			n := 0
			for ; ; n++ { // the other heap's 1 MiB objects, two a chunk, till the arena is full
				p, err := hb.Alloc(1 << 20)
				if err != nil {
					break
				}
				live = append(live, p)
			}
			if want := 2 * (8 - len(chunks)); n < want {
				t.Fatalf("another heap made %d objects of 1 MiB after the first one's Trim, with %d MiB of 16 live in %d chunks: want %d", n, len(keep), len(chunks), want)
			}
			for _, p := range live[len(live)-n:] {
				must(hb.Free(p))
			}
			live = live[:len(live)-n]
			for range 4 { // the split runs take pages and grow again
				for _, h := range []*Heap{ha, hb} {
					for _, n := range []uintptr{64, 200 << 10} {
						if p, err := h.Alloc(n); err == nil {
							live = append(live, p)
						}
					}
				}
				must(ha.verify())
				must(hb.verify())
			}
			for _, p := range live {
				if ha.Free(p) != nil {
					must(hb.Free(p))
				}
			}
			must(ha.Close())
			must(hb.Close())
		})
	}
}
