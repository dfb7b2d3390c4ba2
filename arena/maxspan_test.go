package arena

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestMaxSpanExternal: over an external region of 64 MiB whose base lies 2 MiB + 8 bytes past a
// 32 MiB boundary, MaxSpan says what the region holds from its first address aligned to the
// alignment asked (and to Options.Align), and Alloc refuses more than that with ErrCapacity
// saying so, reserving nothing: it once reserved the region and said the request did not fit
// it, and a second Alloc found the capacity taken. A host arena of 64 MiB holds its capacity at
// any alignment up to it.
func TestMaxSpanExternal(t *testing.T) {
	const size, al = 64 << 20, 32 << 20
	m, err := unix.Mmap(-1, 0, size+al+(4<<20), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Munmap(m) }()
	base := (mem.Addr(m)+al-1)&^(al-1) + 2<<20 + 8
	p, err := External(ExternalRegion{Base: base, Size: size, Kind: HostPageable, Committed: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Provider: p, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, c := range []struct{ alignment, want uintptr }{
		{1, size - 248}, // Options.Align (256): the grid starts 248 bytes in
		{256, size - 248},
		{2 << 20, size - (2<<20 - 8)},
		{al, size - (30<<20 - 8)},
		{128 << 20, 0}, // beyond the capacity
	} {
		if got := a.MaxSpan(c.alignment); got != c.want {
			t.Errorf("MaxSpan(%d) = %d, want %d", c.alignment, got, c.want)
		}
	}
	for range 2 {
		_, err := a.Alloc(size-(30<<20-8)+1, al)
		if !errors.Is(err, ErrCapacity) || !strings.Contains(err.Error(), "external region") ||
			!strings.Contains(err.Error(), "at most 35651592 bytes") {
			t.Fatalf("one byte more than the region holds at 32 MiB: %v", err)
		}
	}
	if st := a.Stats(); st.Regions != 0 {
		t.Fatalf("a refused Alloc left %d regions reserved", st.Regions)
	}
	s, err := a.Alloc(size-(30<<20-8), al)
	if err != nil {
		t.Fatal(err)
	}
	if s.Base != base+30<<20-8 {
		t.Fatalf("span at %#x, want %#x", s.Base, base+30<<20-8)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}

	h, err := New(Options{Provider: PageableHost(HostOptions{}), Capacity: size, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, al := range []uintptr{1, 2 << 20, 32 << 20, 64 << 20} {
		if got := h.MaxSpan(al); got != size {
			t.Errorf("host arena: MaxSpan(%d) = %d, want %d", al, got, size)
		}
	}
	if got := h.MaxSpan(128 << 20); got != 0 {
		t.Errorf("host arena: MaxSpan(128 MiB) = %d, want 0", got)
	}
}
