package heap

import "testing"

// TestBlocksFreedDuringWalk: the owner of every heap walks the blocks while another goroutine
// frees one (a remote free takes no lock). eachLive read the block's state word twice, once to
// see it live and once for its size, so a free between the two listed the block with size 0
// (pinned's TestObserveConcurrent saw it once). A block is listed with the size it was
// allocated with, or not at all, whatever the free's moment.
func TestBlocksFreedDuringWalk(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	sizes := []uintptr{16, 1000, 9000, 100 << 10, 300 << 10} // class pages and an object page
	want := map[uintptr]uintptr{}
	for _, n := range sizes {
		p, err := h.Alloc(n)
		mustOK(t, err)
		want[p] = n
	}
	g := h.Group()
	freed := 0
	eachLiveMidway = func(pg *page, idx uint32) {
		mustOK(t, g.Free(pg.base+uintptr(idx)*pg.bsize)) // as another goroutine's free would
		freed++
	}
	defer func() { eachLiveMidway = nil }()
	var c BlockCursor
	var got []Block
	for done := false; !done; {
		done = g.BlocksFrom(&c, 1, func(b Block) { got = append(got, b) })
	}
	eachLiveMidway = nil
	if freed != len(sizes) {
		t.Fatalf("the walk reached %d of %d blocks", freed, len(sizes))
	}
	for _, b := range got {
		if n, ok := want[b.Addr]; !ok || b.Size != uint64(n) {
			t.Errorf("block %+v: allocated with %d bytes (known %v)", b, n, ok)
		}
	}
	h.Collect()
	if u := h.Usage(); u.Live != 0 {
		t.Errorf("after the frees: %+v", u)
	}
}
