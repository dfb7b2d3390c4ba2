package arena

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

func newTestArena(t *testing.T, o Options) *Arena {
	t.Helper()
	if o.Provider == nil {
		o.Provider = PageableHost(HostOptions{})
	}
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return a
}

func TestAllocAlignedAndCommitted(t *testing.T) {
	a := newTestArena(t, Options{Capacity: 64 << 20})
	s, err := a.Alloc(DefaultChunkSize, DefaultChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	if s.Base%DefaultChunkSize != 0 || s.N != 1 || !s.Zeroed {
		t.Fatalf("span %+v: want one zeroed chunk-aligned chunk", s)
	}
	b := mem.Bytes(s.Base, s.Size)
	b[0], b[len(b)-1] = 1, 1 // committed: writable
	// A huge run that ends mid-chunk commits only what it uses.
	h, err := a.Alloc(5<<20+4096, 1)
	if err != nil {
		t.Fatal(err)
	}
	if h.N != 3 {
		t.Fatalf("5 MiB + 4 KiB took %d chunks", h.N)
	}
	st := a.Stats()
	if want := uint64(DefaultChunkSize + 5<<20 + 4096); st.Committed != want {
		t.Fatalf("committed %d, want %d", st.Committed, want)
	}
	if st.AlignWaste != 0 || st.Reserved%DefaultChunkSize != 0 {
		t.Fatalf("stats %+v", st)
	}
	for _, p := range []uintptr{s.Base, s.Base + s.Size - 1, h.Base + 3<<20} {
		if id, ok := a.Lookup(p); !ok || (p < h.Base && id != s.ID) || (p >= h.Base && id != h.ID+1) {
			t.Errorf("Lookup(%#x) = %d, %v", p, id, ok)
		}
	}
	if _, ok := a.Lookup(1234); ok {
		t.Error("Lookup of a foreign address succeeded")
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(s); !errors.Is(err, ErrInvalid) {
		t.Fatalf("double Free: %v", err)
	}
	if err := a.Close(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Close with a span in use: %v", err)
	}
	if err := a.Free(h); err != nil {
		t.Fatal(err)
	}
}

func TestAlignBeyondChunk(t *testing.T) {
	a := newTestArena(t, Options{Capacity: 256 << 20})
	for _, al := range []uintptr{4 << 20, 16 << 20, 64 << 20} {
		s, err := a.Alloc(3<<20, al)
		if err != nil {
			t.Fatal(err)
		}
		if s.Base%al != 0 {
			t.Fatalf("aligned to %d: %#x", al, s.Base)
		}
		if err := a.Free(s); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st.AlignWaste != 0 {
		t.Fatalf("AlignWaste %d", st.AlignWaste)
	}
}

func TestCapacity(t *testing.T) {
	a := newTestArena(t, Options{Capacity: 8 << 20, RegionSize: 4 << 20})
	var spans []Span
	for {
		s, err := a.Alloc(DefaultChunkSize, 1)
		if err != nil {
			if !errors.Is(err, ErrCapacity) {
				t.Fatalf("want ErrCapacity, got %v", err)
			}
			break
		}
		spans = append(spans, s)
	}
	if len(spans) != 4 {
		t.Fatalf("%d chunks from 8 MiB", len(spans))
	}
	if st := a.Stats(); st.Regions != 2 {
		t.Fatalf("%d regions, want 2", st.Regions)
	}
	if _, err := a.Alloc(9<<20, 1); !errors.Is(err, ErrCapacity) {
		t.Fatalf("beyond capacity: %v", err)
	}
	for _, s := range spans {
		if err := a.Free(s); err != nil {
			t.Fatal(err)
		}
	}
	// The freed chunks serve a run again.
	if s, err := a.Alloc(4<<20, 1); err != nil {
		t.Fatal(err)
	} else if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
}

func TestInvalid(t *testing.T) {
	for _, o := range []Options{
		{},
		{Provider: PageableHost(HostOptions{})},
		{Provider: PageableHost(HostOptions{}), Capacity: 1 << 30, ChunkSize: 3 << 20},
		{Provider: PageableHost(HostOptions{}), Capacity: 1 << 30, Align: 100},
	} {
		if _, err := New(o); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%+v): %v", o, err)
		}
	}
	a := newTestArena(t, Options{Capacity: 16 << 20})
	if _, err := a.Alloc(0, 1); !errors.Is(err, ErrInvalid) {
		t.Error(err)
	}
	if _, err := a.Alloc(1, 3); !errors.Is(err, ErrInvalid) {
		t.Error(err)
	}
	if _, err := a.Alloc(^uintptr(0), 1); !errors.Is(err, ErrCapacity) {
		t.Error(err)
	}
	if _, err := a.Alloc(4096, 1<<62); !errors.Is(err, ErrCapacity) {
		t.Errorf("absurd alignment: %v", err)
	}
	if st := a.Stats(); st.Reserved != 0 {
		t.Errorf("failed Allocs reserved %d bytes", st.Reserved)
	}
	if err := a.Free(Span{ID: 999, N: 1}); !errors.Is(err, ErrInvalid) {
		t.Error(err)
	}
}

func TestPurgeAndTrim(t *testing.T) {
	prov := LockedHost(HostOptions{})
	// The delay is long enough that a loaded CI machine does not purge between Free and the
	// Stats call that checks the memory is still committed.
	a := newTestArena(t, Options{Provider: prov, Capacity: 64 << 20, PurgeDelay: 300 * time.Millisecond})
	s, err := a.Alloc(8<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Locked != 8<<20 {
		t.Fatalf("locked %d", st.Locked)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Committed != 8<<20 {
		t.Fatalf("committed right after free: %d", st.Committed)
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.Stats().Committed != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("free chunks not purged after the delay: %+v", a.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s, err = a.Alloc(4<<20, 1)
	if err != nil || !s.Zeroed {
		t.Fatalf("realloc after purge: %+v %v", s, err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	a.Trim()
	if st := a.Stats(); st.Committed != 0 || st.Purged != 12<<20 {
		t.Fatalf("after Trim: %+v", st)
	}
	if c := prov.Counters(); c.LockedBytes != 0 || c.Mlock == 0 || c.Munlock == 0 {
		t.Fatalf("after Trim the provider still holds locks: %+v", c)
	}
}

// faulty wraps a provider and fails the operations it is told to.
type faulty struct {
	Provider
	failReserve, failCommit atomic.Bool
}

var errInjected = errors.New("injected fault")

func (f *faulty) Reserve(size, al uintptr) (*Region, error) {
	if f.failReserve.Load() {
		return nil, fmt.Errorf("%w: %w", ErrReserve, errInjected)
	}
	return f.Provider.Reserve(size, al)
}

func (f *faulty) Commit(r *Region, off, size uintptr) error {
	if f.failCommit.Load() {
		return fmt.Errorf("%w: %w", ErrMemlock, errInjected)
	}
	return f.Provider.Commit(r, off, size)
}

func TestFaultInjection(t *testing.T) {
	f := &faulty{Provider: PageableHost(HostOptions{})}
	a := newTestArena(t, Options{Provider: f, Capacity: 64 << 20, RegionSize: 16 << 20})
	f.failReserve.Store(true)
	if _, err := a.Alloc(1<<20, 1); !errors.Is(err, ErrReserve) || !errors.Is(err, errInjected) {
		t.Fatalf("reserve fault: %v", err)
	}
	f.failReserve.Store(false)
	f.failCommit.Store(true)
	if _, err := a.Alloc(1<<20, 1); !errors.Is(err, ErrMemlock) {
		t.Fatalf("commit fault: %v", err)
	}
	if st := a.Stats(); st.ChunksInUse != 0 || st.Committed != 0 {
		t.Fatalf("a failed Alloc left state behind: %+v", st)
	}
	f.failCommit.Store(false)
	s, err := a.Alloc(1<<20, 1)
	if err != nil {
		t.Fatalf("after faults clear: %v", err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
}

func TestHostProviderErrors(t *testing.T) {
	p := PageableHost(HostOptions{})
	if _, err := p.Reserve(0, 4096); !errors.Is(err, ErrInvalid) {
		t.Error(err)
	}
	if _, err := p.Reserve(1<<62, 4096); !errors.Is(err, ErrReserve) {
		t.Errorf("absurd reserve: %v", err)
	}
	r, err := p.Reserve(1<<20, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(r, 1<<20, 4096); !errors.Is(err, ErrInvalid) {
		t.Error(err)
	}
	if err := p.Release(r); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(r); !errors.Is(err, ErrInvalid) {
		t.Errorf("double release: %v", err)
	}
}

// TestHugePages asks for hugetlb pages: on a system without them the provider falls back to
// ordinary pages and counts it; either way the memory works.
func TestHugePages(t *testing.T) {
	for _, hp := range []HugePages{HugeTransparent, HugeTLB} {
		p := PageableHost(HostOptions{HugePages: hp})
		a := newTestArena(t, Options{Provider: p, Capacity: 16 << 20})
		s, err := a.Alloc(4<<20, 1)
		if err != nil {
			t.Fatalf("%v: %v", hp, err)
		}
		clear(mem.Bytes(s.Base, s.Size))
		if err := a.Free(s); err != nil {
			t.Fatal(err)
		}
		t.Logf("%v: %+v", hp, p.Counters())
	}
}

func TestPopulate(t *testing.T) {
	p := LockedHost(HostOptions{Populate: true})
	a := newTestArena(t, Options{Provider: p, Capacity: 8 << 20})
	s, err := a.Alloc(1<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Committed != 8<<20 || st.Locked != 8<<20 {
		t.Fatalf("populated region: %+v", st)
	}
	before := p.Counters().Total()
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	a.Trim() // a populated region is never decommitted
	if p.Counters().Total() != before {
		t.Fatal("system calls on a populated region")
	}
}

func TestExternalProvider(t *testing.T) {
	// An anonymous mapping stands in for memory the caller owns.
	buf, err := unix.Mmap(-1, 0, 8<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	base := mem.Addr(buf) + 4096 + 64
	e, err := External(ExternalRegion{Base: base, Size: 6 << 20, Kind: HostPageable, Committed: true, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := External(ExternalRegion{Base: 0, Size: 10}); !errors.Is(err, ErrInvalid) {
		t.Error(err)
	}
	a := newTestArena(t, Options{Provider: e, Align: 64})
	if a.Capacity() != 6<<20 {
		t.Fatalf("capacity %d", a.Capacity())
	}
	s, err := a.Alloc(5<<20, 64)
	if err != nil {
		t.Fatal(err)
	}
	if s.Base != base || a.Stats().AlignWaste != 0 {
		t.Fatalf("span %+v waste %d", s, a.Stats().AlignWaste)
	}
	mem.Bytes(s.Base, s.Size)[s.Size-1] = 1
	if _, err := a.Alloc(2<<20, 64); !errors.Is(err, ErrCapacity) {
		t.Fatalf("second region from an external provider: %v", err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	a.Trim() // exclusive host memory: decommitted with madvise, which must not fail
}

// TestPurgeUnclaimed reuses the chunks of a big span for a small one: what the small one does
// not claim is decommitted after the delay while the span stays in use, unless Commit claims
// it first.
func TestPurgeUnclaimed(t *testing.T) {
	a := newTestArena(t, Options{Capacity: 64 << 20, PurgeDelay: 20 * time.Millisecond})
	big, err := a.Alloc(4<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(big); err != nil {
		t.Fatal(err)
	}
	seg, err := a.Reserve(DefaultChunkSize, DefaultChunkSize) // reuses the first chunk, uncommitted
	if err != nil || seg.Base != big.Base {
		t.Fatalf("Reserve: %+v %v", seg, err)
	}
	if _, err := a.Commit(seg.Base, 64<<10); err != nil { // claims 64 KiB of the old memory
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.Stats().Committed != 64<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("unclaimed memory not purged: committed %d", a.Stats().Committed)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mem.Bytes(seg.Base, 64<<10)[64<<10-1] = 1 // the claimed part is still there
	if err := a.Decommit(seg.Base, 64<<10); err != nil {
		t.Fatal(err)
	}
	a.Trim()
	if st := a.Stats(); st.Committed != 0 || st.ChunksInUse != 1 {
		t.Fatalf("after Decommit and Trim: %+v", st)
	}
	if err := a.Free(seg); err != nil {
		t.Fatal(err)
	}
}

// budgeted fails commits beyond a byte budget, as mlock does at RLIMIT_MEMLOCK.
type budgeted struct {
	Provider
	budget, used uintptr
	other        bool // fail every commit with ErrInvalid instead
}

func (b *budgeted) Commit(r *Region, off, size uintptr) error {
	if b.other {
		return fmt.Errorf("%w: %w", ErrInvalid, errInjected)
	}
	if b.used+size > b.budget {
		return fmt.Errorf("%w: %w", ErrMemlock, errInjected)
	}
	if err := b.Provider.Commit(r, off, size); err != nil {
		return err
	}
	b.used += size
	return nil
}

func (b *budgeted) Decommit(r *Region, off, size uintptr) error {
	if err := b.Provider.Decommit(r, off, size); err != nil {
		return err
	}
	b.used -= size
	return nil
}

// TestCommitPurgesUnderPressure holds freed memory committed (no purge delay runs out) and then
// asks for new memory beyond the provider's budget: the arena must give the waiting memory back
// and retry rather than fail, and fail only when nothing is left to give back.
func TestCommitPurgesUnderPressure(t *testing.T) {
	b := &budgeted{Provider: PageableHost(HostOptions{}), budget: 4 << 20}
	a := newTestArena(t, Options{Provider: b, Capacity: 64 << 20, PurgeDelay: -1})
	old, err := a.Alloc(3<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(old); err != nil {
		t.Fatal(err)
	}
	// Keep the freed chunks out of first fit: reserved, not committed, their memory unwanted.
	hold, err := a.Reserve(4<<20, 1)
	if err != nil || hold.Base != old.Base {
		t.Fatalf("Reserve: %+v %v", hold, err)
	}
	fresh, err := a.Alloc(2<<20, 1) // 3 MiB held + 2 MiB > 4 MiB: only a forced purge makes room
	if err != nil {
		t.Fatalf("Alloc with freed memory waiting for the purge: %v", err)
	}
	if st := a.Stats(); st.ForcedPurges != 1 || st.Committed != 2<<20 {
		t.Fatalf("after the forced purge: %+v", st)
	}
	if _, err := a.Alloc(3<<20, 1); !errors.Is(err, ErrMemlock) { // nothing left to give back
		t.Fatalf("Alloc beyond the budget with nothing to purge: %v", err)
	}
	if st := a.Stats(); st.ForcedPurges != 1 {
		t.Fatalf("a purge that freed nothing was counted: %+v", st)
	}
	// A failure that is not for want of memory leaves what the arena keeps alone.
	if err := a.Free(fresh); err != nil {
		t.Fatal(err)
	}
	b.other = true
	if _, err := a.Alloc(3<<20, 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Alloc with an invalid-range fault: %v", err)
	}
	if st := a.Stats(); st.ForcedPurges != 1 || st.Committed != 2<<20 {
		t.Fatalf("a failure not for want of memory purged: %+v", st)
	}
	b.other = false
	if fresh, err = a.Alloc(2<<20, 1); err != nil {
		t.Fatal(err)
	}
	for _, s := range []Span{hold, fresh} {
		if err := a.Free(s); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExternalUnalignedBaseNotZeroed gives back memory of an exclusive external region whose
// base is off a page boundary: madvise drops whole pages only, so the granules keep some old
// bytes and a span on them must not be reported zeroed. (Found in review.)
func TestExternalUnalignedBaseNotZeroed(t *testing.T) {
	const size = 8 << 20
	m, err := unix.Mmap(-1, 0, size+4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	p, err := External(ExternalRegion{Base: mem.Addr(m) + 8, Size: size, Kind: HostPageable, Zeroed: true, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	a := newTestArena(t, Options{Provider: p, PurgeDelay: -1})
	s, err := a.Alloc(8192, 256)
	if err != nil || !s.Zeroed {
		t.Fatalf("first Alloc: %+v %v", s, err)
	}
	b := mem.Bytes(s.Base, s.Size)
	for i := range b {
		b[i] = 0xAA
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	a.Trim()
	s2, err := a.Alloc(8192, 256)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Zeroed {
		for i, x := range mem.Bytes(s2.Base, s2.Size) {
			if x != 0 {
				t.Fatalf("Alloc reported Zeroed but byte %d is %#x", i, x)
			}
		}
	}
	if err := a.Free(s2); err != nil {
		t.Fatal(err)
	}
}
