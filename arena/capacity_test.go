package arena

import (
	"errors"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestCapacityNotWholeChunks allocates from arenas whose capacity is not a whole number of
// chunks. An external region of 3 MiB, or of 100 KiB, refused every Alloc that would have
// needed its last, partial chunk (the arena asked for the request rounded up to chunks, more
// than the capacity), so a region smaller than a chunk could not be used at all; and a host
// arena of capacity 3 MiB + 5 bytes, whose region the provider rounded up to a page past the
// capacity, computed the room left as capacity - reserved, which wrapped: a further Alloc
// reserved a second region, past the capacity.
func TestCapacityNotWholeChunks(t *testing.T) {
	m, err := unix.Mmap(-1, 0, 4<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	for _, size := range []uintptr{3 << 20, 100 << 10} {
		for _, committed := range []bool{true, false} {
			p, err := External(ExternalRegion{Base: mem.Addr(m), Size: size, Kind: HostPageable, Committed: committed})
			if err != nil {
				t.Fatal(err)
			}
			a := newTestArena(t, Options{Provider: p})
			s, err := a.Alloc(size, 256)
			if err != nil {
				t.Errorf("external region of %d bytes (committed %v): Alloc of all of it: %v", size, committed, err)
				continue
			}
			mem.Bytes(s.Base, s.Size)[s.Size-1] = 1
			if _, err := a.Alloc(4096, 256); !errors.Is(err, ErrCapacity) {
				t.Errorf("external region of %d bytes: Alloc past it: %v", size, err)
			}
			if err := a.Free(s); err != nil {
				t.Fatal(err)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}

	const capac = 3<<20 + 5
	a := newTestArena(t, Options{Capacity: capac})
	s, err := a.Alloc(2<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if x, err := a.Alloc(2<<20, 1); !errors.Is(err, ErrCapacity) {
		t.Errorf("Alloc of 2 MiB with 1 MiB + 5 bytes of capacity left: %+v %v", x, err)
		_ = a.Free(x)
	}
	if st := a.Stats(); st.Regions != 1 || st.Reserved > capac {
		t.Errorf("%d regions, %d bytes reserved, for a capacity of %d", st.Regions, st.Reserved, capac)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	s, err = a.Alloc(3<<20, 1)
	if err != nil {
		t.Errorf("Alloc of 3 MiB from an empty arena of capacity 3 MiB + 5 bytes: %v", err)
	} else if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
}

// TestHugeTLBFallbackWholeGranules allocates 5 MiB of a 6 MiB arena over a HugeTLB provider
// whose regions fall back to ordinary pages (4 MiB chunks: a hugetlb mapping cannot be aligned
// past its page, so every region falls back), and reserves 5 MiB of the provider directly. The
// fallback region was rounded to ordinary pages only, 5 MiB, while the provider's granule
// stayed 2 MiB, so the commit of its last granule ran past the region and was refused
// (ErrInvalid, "range outside region"). (The arena asks for whole granules within its
// capacity now, TestReservedWithinCapacity: only a direct Reserve asks the provider for 5 MiB.)
func TestHugeTLBFallbackWholeGranules(t *testing.T) {
	for _, locked := range []bool{false, true} {
		p := PageableHost(HostOptions{HugePages: HugeTLB})
		if locked {
			p = LockedHost(HostOptions{HugePages: HugeTLB})
		}
		if r, err := p.Reserve(5<<20, 4<<20); err != nil {
			t.Fatalf("locked %v: Reserve of 5 MiB: %v", locked, err)
		} else {
			if r.Size%hugeTLBSize != 0 {
				t.Errorf("locked %v: Reserve of 5 MiB gave a region of %d bytes, not whole huge pages", locked, r.Size)
			}
			if err := p.Release(r); err != nil {
				t.Fatal(err)
			}
		}
		a := newTestArena(t, Options{Provider: p, Capacity: 6 << 20, ChunkSize: 4 << 20, PurgeDelay: -1})
		s, err := a.Alloc(5<<20, 1)
		if errors.Is(err, ErrMemlock) {
			t.Logf("locked: %v", err)
			continue
		}
		if err != nil {
			t.Fatalf("locked %v: Alloc of the whole arena: %v", locked, err)
		}
		if p.Counters().HugeTLBFallbacks == 0 {
			t.Fatal("the region did not fall back to ordinary pages")
		}
		clear(mem.Bytes(s.Base, s.Size))
		if err := a.Free(s); err != nil {
			t.Fatal(err)
		}
		a.Trim()
		if st := a.Stats(); st.Committed != 0 || p.Counters().LockedBytes != 0 {
			t.Errorf("locked %v: after Trim: committed %d, locked %d", locked, st.Committed, p.Counters().LockedBytes)
		}
	}
}

// TestExternalPartialPage adopts external regions that are not Committed and whose size is not
// a whole number of pages. The arena commits such a region in pages from its base, and the
// commit of the last, partial page ran past the region and was refused (ErrInvalid, "range
// outside region"): an Alloc of the region's size failed, and a region smaller than a page
// could not be used at all. Now the region is used in whole pages (its capacity says so), and
// one without a whole page is refused when it is adopted.
func TestExternalPartialPage(t *testing.T) {
	m, err := unix.Mmap(-1, 0, 4<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	page := pageSize()
	const size = 3<<20 + 100
	p, err := External(ExternalRegion{Base: mem.Addr(m), Size: size, Kind: HostPageable, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	a := newTestArena(t, Options{Provider: p, PurgeDelay: -1})
	if a.Capacity() != size&^(page-1) {
		t.Errorf("capacity %d, want %d", a.Capacity(), size&^(page-1))
	}
	s, err := a.Alloc(a.Capacity(), 1)
	if err != nil {
		t.Fatalf("Alloc of the region's whole pages: %v", err)
	}
	mem.Bytes(s.Base, s.Size)[s.Size-1] = 1
	if st := a.Stats(); st.Committed > st.Reserved || st.Reserved > size {
		t.Errorf("committed %d, reserved %d, of a region of %d", st.Committed, st.Reserved, size)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	a.Trim()
	if st := a.Stats(); st.Committed != 0 {
		t.Errorf("committed %d after Trim", st.Committed)
	}
	if _, err := External(ExternalRegion{Base: mem.Addr(m), Size: 100, Kind: HostPageable}); !errors.Is(err, ErrInvalid) {
		t.Errorf("external region of 100 bytes, not committed: %v", err)
	}
	if _, err := External(ExternalRegion{Base: mem.Addr(m), Size: 100, Kind: HostPageable, Committed: true}); err != nil {
		t.Errorf("external region of 100 bytes, committed: %v", err)
	}
}

// TestAbsurdCapacityBoundedBooks: an arena of host pages whose capacity is address space far
// beyond any machine's memory (128 TiB) keeps books of bounded size for its first region: the
// default region size stops at 512 GiB. It made a region of Capacity/32, 4 TiB, whose books
// took 400 MiB of Go memory at the first Alloc (at 1 PiB it would be 3 GiB, enough to kill the
// process for want of memory, where an absurd size must get an error or work).
func TestAbsurdCapacityBoundedBooks(t *testing.T) {
	a, err := New(Options{Provider: PageableHost(HostOptions{}), Capacity: 1 << 47})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s, err := a.Alloc(1<<20, 4096)
	if err != nil {
		t.Skipf("the first region of an arena of 128 TiB: %v", err) // a kernel that refuses the address space
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Fatalf("the first Alloc of an arena of 128 TiB allocated %d MiB of books", grew>>20)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
}

// TestReservedWithinCapacity: the regions an arena reserves never add up to more than its
// capacity, over a provider that rounds what it is asked up to its granule: a host page (a
// capacity of 3 MiB + 5 bytes) or a huge page (a capacity of 5 MiB, 2 MiB granules). The arena
// asked for the capacity left, and the provider's rounding took Reserved one unit past the
// capacity (3 MiB + 4 KiB, 6 MiB). It now asks for whole granules within the capacity: a request
// that fits only past it (5 MiB of the 5 MiB arena) is refused with ErrCapacity.
func TestReservedWithinCapacity(t *testing.T) {
	for _, c := range []struct {
		name         string
		prov         Provider
		capac, chunk uintptr
		fits, refuse uintptr // an Alloc that fits in whole granules; one that does not
	}{
		{"pages", PageableHost(HostOptions{}), 3<<20 + 5, 2 << 20, 2 << 20, 3<<20 + 5},
		{"huge pages", PageableHost(HostOptions{HugePages: HugeTLB}), 5 << 20, 4 << 20, 4 << 20, 5 << 20},
	} {
		a := newTestArena(t, Options{Provider: c.prov, Capacity: c.capac, ChunkSize: c.chunk, PurgeDelay: -1})
		s, err := a.Alloc(c.fits, 1)
		if err != nil {
			t.Fatalf("%s: Alloc of %d bytes of a capacity of %d: %v", c.name, c.fits, c.capac, err)
		}
		if st := a.Stats(); st.Reserved > uint64(c.capac) {
			t.Errorf("%s: %d bytes reserved, past the capacity of %d", c.name, st.Reserved, c.capac)
		}
		if err := a.Free(s); err != nil {
			t.Fatal(err)
		}
		if x, err := a.Alloc(c.refuse, 1); !errors.Is(err, ErrCapacity) {
			t.Errorf("%s: Alloc of %d bytes, which needs a region past the capacity of %d: %+v, %v; want ErrCapacity", c.name, c.refuse, c.capac, x, err)
			if err == nil {
				_ = a.Free(x)
			}
		}
		if st := a.Stats(); st.Reserved > uint64(c.capac) {
			t.Errorf("%s: %d bytes reserved, past the capacity of %d", c.name, st.Reserved, c.capac)
		}
	}
}
