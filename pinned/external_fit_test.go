package pinned

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestExternalBackendNeverFits: a pool over an external region of 64 MiB whose base lies 2 MiB
// past a 32 MiB boundary can never serve 64 MiB aligned to 32 MiB (the region holds 34 MiB from
// its first address so aligned): ErrTooLarge, saying so, where it was ErrOutOfMemory after the
// pool's retries; 32 MiB aligned to 32 MiB is served.
func TestExternalBackendNeverFits(t *testing.T) {
	const size, al = 64 << 20, 32 << 20
	m, err := unix.Mmap(-1, 0, size+al+(2<<20), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Munmap(m) }()
	base := (mem.Addr(m)+al-1)&^(al-1) + 2<<20
	p := newTestPool(t, Options{Backend: External, Capacity: 0, PurgeDelay: -1,
		External: &arena.ExternalRegion{Base: base, Size: size, Kind: arena.HostPageable, Exclusive: true}})
	_, err = p.AllocAligned(size, al)
	if !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("64 MiB aligned to 32 MiB of a region 2 MiB past a 32 MiB boundary: %v: want ErrTooLarge", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "external region holds at most 35651584 bytes") {
		t.Fatalf("%q does not say what the external region holds at that alignment", msg)
	}
	b, err := p.AllocAligned(al, al)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
