package heap

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
)

// TestLenderCloseRefusedWhileLent: a lender's Close while a borrower holds a page in its runs
// fails with ErrLent (of kind pinmalloc.ErrLiveBlocks), releasing nothing, and succeeds once
// the borrower has closed, taking back the room returned meanwhile. Before, the lender closed;
// the borrower's page, returned while another goroutine held the lender (its owner's lock),
// went onto the closed lender's returned list, which nothing empties, and its chunk stayed out
// for good: the arena refused to close (arena.ErrBusy).
func TestLenderCloseRefusedWhileLent(t *testing.T) {
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB}), Capacity: 1 << 30, PurgeDelay: -1})
	mustOK(t, err)
	g, err := NewGroup(a)
	mustOK(t, err)
	if !g.Coarse() {
		t.Fatal("a group over huge pages is not coarse")
	}
	lh, err := g.NewHeap(Options{Align: 64})
	mustOK(t, err)
	b, err := g.NewHeap(Options{Align: 64})
	mustOK(t, err)
	l := &testLender{h: lh}
	b.SetLender(l)
	p, err := b.Alloc(100)
	mustOK(t, err)
	if len(b.runs) != 0 {
		t.Fatal("the borrower's page is in its own runs, not the lender's")
	}

	err = lh.Close()
	if !errors.Is(err, ErrLent) || !errors.Is(err, pinmalloc.ErrLiveBlocks) || errors.Is(err, ErrLiveBlocks) {
		t.Errorf("the lender's Close while its borrower holds a page of its runs = %v; want ErrLent", err)
	}
	l.mu.Lock() // another goroutine holds the lender: the page goes onto its returned list
	mustOK(t, b.Free(p))
	mustOK(t, b.Close())
	l.mu.Unlock()
	if err == nil {
		t.Log("the lender closed before its borrower")
	} else {
		mustOK(t, lh.Close()) // takes back what was returned
	}
	if err := a.Close(); err != nil {
		t.Fatalf("arena close after every heap closed: %v", err)
	}
}
