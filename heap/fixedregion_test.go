package heap

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestAllocAlignedNeverFitsExternal: over an external region of 64 MiB whose base lies 2 MiB past
// a 32 MiB boundary, 64 MiB aligned to 32 MiB can never be served (the region's first address so
// aligned is 30 MiB in, leaving 34 MiB): it is ErrTooLarge, saying so, on a fresh arena and on
// one whose region is in use, not the ErrOutOfMemory of a second try that finds the region
// taken ("capacity exhausted"). A request that merely does not fit now (a second 32 MiB aligned
// to 32 MiB while the first is live) stays ErrOutOfMemory, and is served once the first is
// freed.
func TestAllocAlignedNeverFitsExternal(t *testing.T) {
	const size, al = 64 << 20, 32 << 20
	m, err := unix.Mmap(-1, 0, size+al+(2<<20), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	mustOK(t, err)
	defer func() { mustOK(t, unix.Munmap(m)) }()
	base := (mem.Addr(m)+al-1)&^(al-1) + 2<<20
	prov, err := arena.External(arena.ExternalRegion{Base: base, Size: size, Kind: arena.HostPageable, Exclusive: true})
	mustOK(t, err)
	h := newTestHeapOn(t, arena.Options{Provider: prov, PurgeDelay: -1}, Options{})

	never := func(when string) {
		t.Helper()
		p, err := h.AllocAligned(size, al)
		if err == nil {
			t.Fatalf("%s: 64 MiB aligned to 32 MiB served at %#x from a region at %#x", when, p, base)
		}
		if !errors.Is(err, ErrTooLarge) || !errors.Is(err, pinmalloc.ErrTooLarge) || errors.Is(err, ErrOutOfMemory) {
			t.Fatalf("%s: %v: want ErrTooLarge, not ErrOutOfMemory", when, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "external region") || !strings.Contains(msg, "at most 35651584 bytes") {
			t.Fatalf("%s: %q does not say the external region holds at most 34 MiB at that alignment", when, msg)
		}
	}
	never("fresh arena")

	small, err := h.Alloc(64)
	mustOK(t, err)
	never("region in use")

	p, err := h.AllocAligned(al, al)
	mustOK(t, err)
	if p != base+30<<20 {
		t.Fatalf("32 MiB aligned to 32 MiB at %#x, want %#x", p, base+30<<20)
	}
	if q, err := h.AllocAligned(al, al); err == nil {
		t.Fatalf("a second 32 MiB aligned to 32 MiB served at %#x", q)
	} else if !errors.Is(err, ErrOutOfMemory) || errors.Is(err, ErrTooLarge) {
		t.Fatalf("a second 32 MiB aligned to 32 MiB while the first is live: %v: want ErrOutOfMemory", err)
	}
	mustOK(t, h.Free(p))
	q, err := h.AllocAligned(al, al)
	mustOK(t, err)
	mustOK(t, h.Free(q))
	mustOK(t, h.Free(small))

	// The whole region, at the heap's own alignment, fits it.
	w, err := h.Alloc(size)
	mustOK(t, err)
	mustOK(t, h.Free(w))
}

// TestAllocAlignedWholeCapacityHost: a provider that aligns its regions serves 64 MiB aligned to
// 32 MiB from an arena of 64 MiB: what TestAllocAlignedNeverFitsExternal refuses over a region
// fixed in place is no limit here.
func TestAllocAlignedWholeCapacityHost(t *testing.T) {
	const size, al = 64 << 20, 32 << 20
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: size,
		PurgeDelay: -1}, Options{})
	p, err := h.AllocAligned(size, al)
	mustOK(t, err)
	if p%al != 0 {
		t.Fatalf("%#x is not aligned to 32 MiB", p)
	}
	mustOK(t, h.Free(p))
}
