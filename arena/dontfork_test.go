package arena

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/smaps"
)

// forkFlag reports whether the mapping holding addr is kept from a child forked without exec
// (MADV_DONTFORK: VmFlags "dc"). It skips the test where the kernel has no smaps.
func forkFlag(t *testing.T, addr uintptr) bool {
	t.Helper()
	flags, err := smaps.VMFlags(addr)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("no smaps: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(flags, "dc")
}

// TestHostRegionsNotForked: every host provider marks each region it reserves MADV_DONTFORK,
// whatever its options, committed or not, and a commit that splits the mapping keeps the mark
// on every piece. A child forked without exec would otherwise share the region's pages
// copy-on-write: the parent's next write to a pinned buffer copies the page (a registration's
// DMA then targets a page the parent no longer sees) and locked memory is counted twice.
// (Regions were passed to the child.)
func TestHostRegionsNotForked(t *testing.T) {
	const size, chunk = 6 << 20, 2 << 20
	for _, o := range []HostOptions{{}, {Populate: true}, {HugePages: HugeTransparent},
		{HugePages: HugeSmall}, {HugePages: HugeTLB}} {
		for _, h := range []*HostProvider{LockedHost(o), PageableHost(o), PinnableHost(o)} {
			name := fmt.Sprintf("%s, %+v", h.Name(), o)
			r, err := h.Reserve(size, chunk)
			if err != nil {
				t.Fatalf("%s: Reserve: %v", name, err)
			}
			if !r.Committed {
				// The middle chunk committed: mprotect splits the mapping in three.
				if err := h.Commit(r, chunk, chunk); err != nil {
					t.Fatalf("%s: Commit: %v", name, err)
				}
			}
			for _, addr := range []uintptr{r.Base, r.Base + chunk, r.Base + 2*chunk, r.End() - 1} {
				if !forkFlag(t, addr) {
					t.Errorf("%s: %#x of the region [%#x, +%d) is passed to a forked child",
						name, addr, r.Base, r.Size)
				}
			}
			if !r.Committed {
				if err := h.Decommit(r, chunk, chunk); err != nil {
					t.Fatalf("%s: Decommit: %v", name, err)
				}
			}
			if err := h.Release(r); err != nil {
				t.Fatalf("%s: Release: %v", name, err)
			}
		}
	}
}

// TestArenaRegionNotForked: a span an arena hands out of a host provider's region is not
// passed to a forked child.
func TestArenaRegionNotForked(t *testing.T) {
	a := newTestArena(t, Options{Provider: LockedHost(HostOptions{}), Capacity: 8 << 20})
	s, err := a.Alloc(1<<20, DefaultChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	if !forkFlag(t, s.Base) || !forkFlag(t, s.Base+s.Size-1) {
		t.Errorf("the span [%#x, +%d) is passed to a forked child", s.Base, s.Size)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
}

// TestExternalNotMarked: an external region is the caller's: the arena leaves how it forks
// alone, reserved, in use and decommitted (MADV_DONTNEED) alike.
func TestExternalNotMarked(t *testing.T) {
	const size = 4 << 20
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	base := mem.Addr(b)
	if forkFlag(t, base) {
		t.Fatal("a fresh mapping is marked MADV_DONTFORK already")
	}
	p, err := External(ExternalRegion{Base: base, Size: size, Kind: HostPageable,
		Committed: true, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Provider: p, Capacity: size})
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.Alloc(1<<20, DefaultChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	clear(a.mustBytes(t, s))
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	a.Trim()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []uintptr{base, base + size - 1} {
		if forkFlag(t, addr) {
			t.Errorf("the caller's region was marked MADV_DONTFORK at %#x", addr)
		}
	}
}

// TestReserveNoForkCost: the mark costs one madvise per region, at Reserve, and nothing after:
// committing, decommitting and releasing make no more calls than before.
func TestReserveNoForkCost(t *testing.T) {
	for hp, advice := range map[HugePages]uint64{HugeNone: 0, HugeTransparent: 1, HugeTLB: 0} {
		h := LockedHost(HostOptions{HugePages: hp})
		r, err := h.Reserve(4<<20, 2<<20)
		if err != nil {
			t.Fatal(err)
		}
		// A hugetlb mmap the kernel refuses (no huge pages) is followed by an ordinary one.
		if c := h.Counters(); c.Madvise != advice+1 || c.Mmap != 1+c.HugeTLBFallbacks {
			t.Errorf("%s: Reserve made %d mmap (%d hugetlb fallbacks) and %d madvise calls, "+
				"want 1 mmap a try and %d madvise", hp, c.Mmap, c.HugeTLBFallbacks, c.Madvise,
				advice+1)
		}
		before := h.Counters()
		if err := h.Commit(r, 0, 2<<20); err != nil {
			t.Fatal(err)
		}
		if err := h.Decommit(r, 0, 2<<20); err != nil {
			t.Fatal(err)
		}
		if c := h.Counters(); c.Madvise != before.Madvise+1 { // the decommit's MADV_DONTNEED
			t.Errorf("%s: Commit and Decommit made %d madvise calls, want 1", hp,
				c.Madvise-before.Madvise)
		}
		if err := h.Release(r); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReserveNoForkRefused: a kernel that refuses MADV_DONTFORK for the mapping's type
// (EINVAL) leaves the region usable, as it was; any other refusal fails the Reserve, wrapping
// ErrReserve and the kernel's error, and unmaps the region.
func TestReserveNoForkRefused(t *testing.T) {
	h := PageableHost(HostOptions{})
	h.noForkFn = func([]byte) error { return unix.EINVAL }
	r, err := h.Reserve(1<<20, 1)
	if err != nil {
		t.Fatalf("EINVAL: Reserve: %v", err)
	}
	if err := h.Commit(r, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	clear(bytesAt(r.Base, r.Size))
	if err := h.Release(r); err != nil {
		t.Fatal(err)
	}
	h.noForkFn = func([]byte) error { return unix.EAGAIN }
	unmaps := h.Counters().Munmap
	r, err = h.Reserve(1<<20, 1)
	if r != nil || !errors.Is(err, ErrReserve) || !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("EAGAIN: Reserve: %v, %v; want ErrReserve and %v", r, err, unix.EAGAIN)
	}
	if n := h.Counters().Munmap - unmaps; n != 1 {
		t.Errorf("EAGAIN: %d munmap calls, want the region's", n)
	}
}
