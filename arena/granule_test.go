package arena

import (
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// offPageRegion maps size bytes and returns an external region over them that starts 8 bytes
// past a page boundary: its chunk grid (aligned to the arena's Align) is off its granule grid,
// so each two adjacent chunks touch one granule both.
func offPageRegion(t *testing.T, size uintptr, exclusive bool) ExternalRegion {
	t.Helper()
	m, err := unix.Mmap(-1, 0, int(size)+4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(m) })
	return ExternalRegion{Base: mem.Addr(m) + 8, Size: size, Kind: HostPageable, Exclusive: exclusive}
}

// adjacentOffPage returns an arena over an external region off a page, exclusive, purged only by
// Trim, and two spans of a chunk each at adjacent chunks, which share a granule.
func adjacentOffPage(t *testing.T) (*Arena, Span, Span) {
	t.Helper()
	p, err := External(offPageRegion(t, 8<<20, true))
	if err != nil {
		t.Fatal(err)
	}
	a := newTestArena(t, Options{Provider: p, PurgeDelay: -1})
	x, err := a.Alloc(2<<20, 256)
	if err != nil {
		t.Fatal(err)
	}
	y, err := a.Alloc(2<<20, 256)
	if err != nil {
		t.Fatal(err)
	}
	if y.ID != x.ID+1 {
		t.Fatalf("spans at chunks %d and %d, want adjacent", x.ID, y.ID)
	}
	return a, x, y
}

// TestFreeKeepsSharedGranule frees a span whose last chunk shares a granule with the next
// chunk, in use by a live span, and trims: the live span's bytes must survive. Free gave up
// every granule its chunks touched, the shared one too, and the purge dropped the page the
// live span starts in (madvise(DONTNEED) on exclusive memory: its first 3,840 bytes read zero,
// and Wanted said false for a span in use).
func TestFreeKeepsSharedGranule(t *testing.T) {
	a, x, live := adjacentOffPage(t)
	b := mem.Bytes(live.Base, live.Size)
	for i := range b {
		b[i] = 0xAA
	}
	if err := a.Free(x); err != nil {
		t.Fatal(err)
	}
	a.Trim()
	if !a.Wanted(live.Base, live.Size) {
		t.Error("a span in use is no longer wanted after its neighbour's Free and a Trim")
	}
	for i, c := range b {
		if c != 0xAA {
			t.Fatalf("byte %d of a live span reads %#x after its neighbour's Free and a Trim", i, c)
		}
	}
	if err := a.Free(live); err != nil {
		t.Fatal(err)
	}
	a.Trim()
	if st := a.Stats(); st.Committed != 0 {
		t.Errorf("committed %d after every span was freed and trimmed", st.Committed)
	}
}

// gateProvider blocks its first Commit until released, and fails the test if two Commit calls
// for overlapping ranges run at once (the Provider contract forbids it).
type gateProvider struct {
	Provider
	t       *testing.T
	entered chan struct{}
	release chan struct{}

	mu     sync.Mutex
	calls  int
	flying [][2]uintptr
}

func (g *gateProvider) Commit(r *Region, off, size uintptr) error {
	g.mu.Lock()
	for _, f := range g.flying {
		if off < f[1] && f[0] < off+size {
			g.t.Errorf("Commit [%d, %d) while Commit [%d, %d) runs", off, off+size, f[0], f[1])
		}
	}
	g.calls++
	first := g.calls == 1
	g.flying = append(g.flying, [2]uintptr{off, off + size})
	i := len(g.flying) - 1
	g.mu.Unlock()
	if first {
		close(g.entered)
		<-g.release
	}
	err := g.Provider.Commit(r, off, size)
	g.mu.Lock()
	g.flying[i] = [2]uintptr{}
	g.mu.Unlock()
	return err
}

// TestPrecommitSharedGranule precommits a free chunk that shares a granule with the chunk
// before it, reserved by a span, while the span commits its last page: the two commits must
// not overlap, and Committed must count the shared granule once. Precommit committed every
// granule its chunk touched, without the arena's lock, so the span's Commit committed the
// shared granule beside it, and both counted it.
func TestPrecommitSharedGranule(t *testing.T) {
	p, err := External(offPageRegion(t, 8<<20, false))
	if err != nil {
		t.Fatal(err)
	}
	g := &gateProvider{Provider: p, t: t, entered: make(chan struct{}), release: make(chan struct{})}
	a := newTestArena(t, Options{Provider: g, Capacity: 8 << 20, PurgeDelay: -1, CommitWorkers: 1})
	s, err := a.Reserve(2<<20, 256)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := a.Precommit(2 << 20)
		done <- err
	}()
	<-g.entered
	if _, err := a.Commit(s.Base+s.Size-4096, 4096); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := a.Stats()
	var sum uint64
	for _, r := range st.PerRegion {
		sum += r.Committed
	}
	if st.Committed != sum {
		t.Errorf("Committed %d, the regions' committed granules %d", st.Committed, sum)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
}

// TestGranuleEnd: GranuleEnd rounds an address up to the end of its granule as the region
// counts granules, from its base, off the page grid here, not as the address space does; the
// span Alloc commits is wanted up to there, and not a byte further; an address in no region is
// refused.
func TestGranuleEnd(t *testing.T) {
	reg := offPageRegion(t, 8<<20, true)
	p, err := External(reg)
	if err != nil {
		t.Fatal(err)
	}
	a := newTestArena(t, Options{Provider: p, PurgeDelay: -1})
	s, err := a.Alloc(1<<20+100, 256)
	if err != nil {
		t.Fatal(err)
	}
	g := p.Caps().Granule
	for _, q := range []uintptr{s.Base, s.Base + g - 1, s.Base + 5000, reg.Base + reg.Size - 1} {
		want := reg.Base + ((q-reg.Base)/g+1)*g
		if end, ok := a.GranuleEnd(q); !ok || end != want || end == (q+g)&^(g-1) {
			t.Errorf("GranuleEnd(base%+d) = base%+d, %v; want base%+d, off the page grid", q-reg.Base, end-reg.Base, ok, want-reg.Base)
		}
	}
	end, ok := a.GranuleEnd(s.Base + s.Size - 1)
	if !ok || !a.Wanted(s.Base, end-s.Base) || a.Wanted(s.Base, end-s.Base+1) {
		t.Errorf("a span of %d bytes at base%+d: GranuleEnd of its last byte base%+d (%v); wanted to there %v, a byte further %v; want true, false",
			s.Size, s.Base-reg.Base, end-reg.Base, ok, a.Wanted(s.Base, end-s.Base), a.Wanted(s.Base, end-s.Base+1))
	}
	if _, ok := a.GranuleEnd(reg.Base + reg.Size); ok {
		t.Error("GranuleEnd of an address past the region succeeded")
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
}

// TestPurgeSharedGranuleOnce frees two adjacent spans of a region off a page (their chunks
// share a granule) and trims: the purge must decommit the shared granule once and count it
// once. Each chunk's plan named it, and both runs went to the provider: a second decommit of
// memory decommitted already (an error for a driver's unmap), and Committed, lowered twice,
// wrapped below zero.
func TestPurgeSharedGranuleOnce(t *testing.T) {
	a, x, y := adjacentOffPage(t)
	committed := a.Stats().Committed
	if err := a.Free(x); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(y); err != nil {
		t.Fatal(err)
	}
	a.Trim()
	if st := a.Stats(); st.Committed != 0 || st.Purged != committed {
		t.Errorf("after freeing both spans and a Trim: committed %d, purged %d; want 0 and the %d committed before",
			int64(st.Committed), st.Purged, committed)
	}
}
