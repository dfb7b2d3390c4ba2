package heap

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
)

// TestTrimGivesRunTailsBack: a packed heap's run that grew over the arena and then emptied but
// for a block in its first chunk gives the empty chunks at its end back at Trim, so that
// another heap of the group finds room for a run of its own. The run kept them until it
// emptied whole: the other heap's Alloc failed with the arena's capacity exhausted while one
// chunk of it was in use (in a pinned CUDAHost pool of 64 MiB, an Alloc of 64 B failed with
// 8 MiB committed for 13 live buffers).
func TestTrimGivesRunTailsBack(t *testing.T) {
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
	var ps []uintptr
	for range 15 { // 15 MiB of objects: a run of 8 chunks, the whole arena
		p, err := ha.Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for _, p := range ps[1:] {
		if err := ha.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	ha.Trim()
	t.Logf("after the Trim: the first heap's runs hold %d chunks, the arena %d of %d bytes reserved", ha.nsegs, a.Stats().Reserved, a.Stats().Capacity)
	p, err := hb.Alloc(3 << 20)
	if err != nil {
		t.Fatalf("another heap's 3 MiB after the first one's Trim, with 1 MiB of 16 live: %v", err)
	}
	for _, f := range []func() error{func() error { return hb.Free(p) }, func() error { return ha.Free(ps[0]) }, ha.Close, hb.Close} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
}
