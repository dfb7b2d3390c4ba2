package arena

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// lender lends units of one anonymous mapping, committed, as a shared pool's grants are.
type lender struct {
	base, size, unit uintptr
	mu               sync.Mutex
	lent             map[uintptr]uintptr // base -> size
	released         []uintptr
}

func newLender(t *testing.T, size, unit uintptr) *lender {
	t.Helper()
	p, err := unix.MmapPtr(-1, 0, nil, size+DefaultChunkSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.MunmapPtr(p, size+DefaultChunkSize) })
	base := (uintptr(p) + DefaultChunkSize - 1) &^ (DefaultChunkSize - 1)
	return &lender{base: base, size: size, unit: unit, lent: map[uintptr]uintptr{}}
}

func (l *lender) Name() string                             { return "lender" }
func (l *lender) Kind() Kind                               { return HostPageable }
func (l *lender) Caps() Caps                               { return Caps{Granule: 4096, Aligns: true, Releases: true} }
func (l *lender) Space() (uintptr, uintptr)                { return l.base, l.size }
func (l *lender) Unit() uintptr                            { return l.unit }
func (l *lender) Commit(r *Region, off, n uintptr) error   { return r.CheckRange(off, n) }
func (l *lender) Decommit(r *Region, off, n uintptr) error { return r.CheckRange(off, n) }

// Reserve lends the first free run of units holding size bytes.
func (l *lender) Reserve(size, align uintptr) (*Region, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := (size + l.unit - 1) / l.unit * l.unit
	for off := uintptr(0); off+n <= l.size; off += l.unit {
		free := true
		for b, s := range l.lent {
			if b < l.base+off+n && l.base+off < b+s {
				free = false
			}
		}
		if free && (l.base+off)%align == 0 {
			l.lent[l.base+off] = n
			return &Region{Base: l.base + off, Size: n, Committed: true}, nil
		}
	}
	return nil, fmt.Errorf("%w: lender full", ErrExhausted)
}

func (l *lender) Release(r *Region) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lent[r.Base] != r.Size {
		return fmt.Errorf("%w: %#x not lent", ErrInvalid, r.Base)
	}
	delete(l.lent, r.Base)
	l.released = append(l.released, r.Base)
	return nil
}

func (l *lender) nlent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lent)
}

// A lent region goes back once its chunks have been free for the purge delay, and a new loan at
// the same addresses has the same chunk IDs.
func TestLentRegionReleasedWhenIdle(t *testing.T) {
	l := newLender(t, 32<<20, 4<<20)
	a := newTestArena(t, Options{Provider: l, PurgeDelay: 20 * time.Millisecond})
	if a.Capacity() != 32<<20 || a.MaxChunks() != 16 {
		t.Fatalf("capacity %d, %d chunk IDs", a.Capacity(), a.MaxChunks())
	}
	s1, err := a.Alloc(2<<20, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := a.Alloc(6<<20, 2<<20) // a region of two units of its own
	if err != nil {
		t.Fatal(err)
	}
	if l.nlent() != 2 {
		t.Fatalf("%d loans, want 2 (one unit, then two units)", l.nlent())
	}
	for _, s := range []Span{s1, s2} {
		if want := ChunkID((s.Base - l.base) >> 21); s.ID != want {
			t.Fatalf("span at %#x has chunk %d, want %d (its place in the space)", s.Base, s.ID, want)
		}
	}
	mem.Bytes(s2.Base, s2.Size)[0] = 1
	if err := a.Free(s2); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for l.nlent() != 1 {
		if time.Since(start) > 2*time.Second {
			t.Fatal("the empty region was not released")
		}
		time.Sleep(time.Millisecond)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("released after %v, before the purge delay", d)
	}
	st := a.Stats()
	if st.RegionsReleased != 1 || st.Regions != 1 || st.Reserved != 4<<20 || st.Committed != 4<<20 {
		t.Fatalf("after the release: %+v", st)
	}
	if _, ok := a.Lookup(s2.Base); ok {
		t.Fatal("Lookup finds a released region")
	}
	// The region holding s1 stays while s1 lives; a new loan of the same units has the same IDs.
	s3, err := a.Alloc(6<<20, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if s3.Base != s2.Base || s3.ID != s2.ID {
		t.Fatalf("new loan at %#x chunk %d, the old one at %#x chunk %d", s3.Base, s3.ID, s2.Base, s2.ID)
	}
	if err := a.Free(s3); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(s1); err != nil {
		t.Fatal(err)
	}
	a.Trim() // at once
	if l.nlent() != 0 || a.Stats().Regions != 0 {
		t.Fatalf("%d loans after Trim", l.nlent())
	}
	s4, err := a.Alloc(2<<20, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(s4); err != nil {
		t.Fatal(err)
	}
}

// An arena whose provider does not release keeps its empty regions.
func TestLentRegionKeptWithoutReleases(t *testing.T) {
	l := newLender(t, 8<<20, 2<<20)
	a := newTestArena(t, Options{Provider: keeper{l}, PurgeDelay: time.Millisecond})
	s, err := a.Alloc(2<<20, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	a.Trim()
	if l.nlent() != 1 {
		t.Fatalf("%d loans: a provider without Caps.Releases lost its region", l.nlent())
	}
}

type keeper struct{ *lender }

func (k keeper) Caps() Caps { c := k.lender.Caps(); c.Releases = false; return c }

func TestLenderGeometryRefused(t *testing.T) {
	l := newLender(t, 8<<20, 3<<20) // a unit that is no multiple of the chunk
	if _, err := New(Options{Provider: l}); err == nil {
		t.Fatal("a lender of 3 MiB units accepted")
	}
}

// A region given back when idle is taken back from its observers first (a UCX registration
// of a grant of a shared pool is dropped before the grant goes back to the owner).
func TestLentRegionReleasedTellsObservers(t *testing.T) {
	l := newLender(t, 16<<20, 4<<20)
	a := newTestArena(t, Options{Provider: l, PurgeDelay: -1})
	rec := &recorder{live: map[uintptr]uintptr{}}
	if err := a.Observe(rec); err != nil {
		t.Fatal(err)
	}
	s, err := a.Alloc(2<<20, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.live) != 1 {
		t.Fatalf("observer told of %d regions, want 1", len(rec.live))
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	a.Trim()
	if l.nlent() != 0 {
		t.Fatalf("%d loans after Trim", l.nlent())
	}
	if len(rec.live) != 0 {
		t.Fatalf("the observer still holds %d regions the arena gave back: %v", len(rec.live), rec.events)
	}
}
