package heap

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// failingProvider fails Commit while fail is set, as a provider does when the memlock limit or
// the device's memory runs out.
type failingProvider struct {
	arena.Provider
	fail atomic.Bool
}

func (f *failingProvider) Commit(r *arena.Region, off, size uintptr) error {
	if f.fail.Load() {
		return arena.ErrMemlock
	}
	return f.Provider.Commit(r, off, size)
}

func TestProviderFault(t *testing.T) {
	f := &failingProvider{Provider: arena.LockedHost(arena.HostOptions{})}
	a, err := arena.New(arena.Options{Provider: f, Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	h, err := New(a, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	mem.Bytes(p, 100)[99] = 7
	big, err := h.Alloc(200 << 10) // a large page, committed only as far as its first block
	if err != nil {
		t.Fatal(err)
	}
	f.fail.Store(true)
	if _, err := h.Alloc(200 << 10); !errors.Is(err, arena.ErrMemlock) { // the page cannot extend
		t.Fatalf("Alloc extending a page with commits failing: %v", err)
	}
	for _, n := range []uintptr{10 << 10, 200 << 10, 600 << 10, 4 << 20} { // new pages of every kind
		if _, err := h.Alloc(n); !errors.Is(err, arena.ErrMemlock) {
			t.Fatalf("Alloc(%d) with commits failing: %v", n, err)
		}
	}
	q, err := h.Alloc(100) // the page already committed still serves
	if err != nil {
		t.Fatalf("Alloc from a committed page during the fault: %v", err)
	}
	f.fail.Store(false)
	r, err := h.Alloc(4 << 20) // a huge object that fits under Debian's default 8 MiB memlock limit
	if err != nil {
		t.Fatalf("after the fault: %v", err)
	}
	big2, err := h.Alloc(200 << 10) // the page extends now
	if err != nil {
		t.Fatalf("extending after the fault: %v", err)
	}
	mem.Bytes(big2, 200<<10)[200<<10-1] = 1 // committed: no fault
	if mem.Bytes(p, 100)[99] != 7 {
		t.Fatal("a live block changed")
	}
	for _, x := range []uintptr{p, q, r, big, big2} {
		if err := h.Free(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	// A failed allocation keeps nothing: the object segment made for the 600 KiB request went
	// back when its commit failed.
	if st := a.Stats(); st.ChunksInUse != 0 {
		t.Fatalf("chunks still in use after Close: %+v", st)
	}
}

// TestRetryCommitsHugeOfSegmentSize fills a small arena, frees a block the lock-free way so
// that only a collection can give its chunk back, and then asks for a huge object of exactly a
// segment's size: the retry after collection must hand out committed memory, not a reservation.
func TestRetryCommitsHugeOfSegmentSize(t *testing.T) {
	h := newTestHeap(t, 2*segSize, Options{})
	p1, err := h.Alloc(segSize)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := h.Alloc(segSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.g.Free(p1); err != nil { // pending until the owner collects
		t.Fatal(err)
	}
	p3, err := h.Alloc(segSize) // the arena is full: only the retry after collection succeeds
	if err != nil {
		t.Fatal(err)
	}
	h.a.Trim() // purges whatever no span claims: a reserved-only huge object would go with it
	b := mem.Bytes(p3, segSize)
	b[0], b[segSize-1] = 1, 1 // faults if the memory was only reserved
	for _, p := range []uintptr{p2, p3} {
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
	}
}
