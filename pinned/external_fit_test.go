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

// TestExternalCapacityBelowRegion: Options.Capacity caps the pool's memory, an External
// region's too: a pool of 4 MiB over a region of 256 MiB serves at most 4 MiB of it, then
// ErrOutOfMemory, never reserving more than its capacity; and one over a region of 1 GiB
// serves its 4 MiB. Before, the arena took the whole region, whatever its capacity: it lent
// 256 MiB of the first, reporting 256 MiB reserved of 4 MiB, and nothing of the second, its
// chunk table (sized by the capacity) too small for the region ("chunk table full").
func TestExternalCapacityBelowRegion(t *testing.T) {
	const capacity = 4 << 20
	for _, size := range []int{256 << 20, 1 << 30} {
		m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err != nil {
			t.Fatal(err)
		}
		p := newTestPool(t, Options{Backend: External, Capacity: capacity, PurgeDelay: -1,
			External: &arena.ExternalRegion{Base: mem.Addr(m), Size: uintptr(size), Kind: arena.HostPageable, Committed: true}})
		served := 0
		var bufs [][]byte
		for served <= size {
			b, err := p.Alloc(1 << 20)
			if err != nil {
				if !errors.Is(err, ErrOutOfMemory) {
					t.Fatalf("region of %d bytes: Alloc after %d bytes: %v: want ErrOutOfMemory", size, served, err)
				}
				break
			}
			if a := mem.Addr(b); a < mem.Addr(m) || a+uintptr(len(b)) > mem.Addr(m)+capacity {
				t.Fatalf("region of %d bytes: buffer at %#x, beyond the first %d bytes of the region at %#x", size, a, capacity, mem.Addr(m))
			}
			served += len(b)
			bufs = append(bufs, b)
		}
		if u := p.Usage(); served == 0 || served > capacity || u.Reserved > capacity {
			t.Fatalf("a pool of capacity %d over a region of %d bytes served %d bytes, %d reserved", capacity, size, served, u.Reserved)
		}
		for _, b := range bufs {
			if err := p.Free(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		_ = unix.Munmap(m)
	}
}

// TestExternalRegionTooSmall: a pool over an External region smaller than one 2 MiB chunk is
// refused with ErrInvalidOptions naming the region's size, not a "capacity" the caller never
// set.
func TestExternalRegionTooSmall(t *testing.T) {
	m, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Munmap(m) }()
	p, err := New(Options{Backend: External,
		External: &arena.ExternalRegion{Base: mem.Addr(m), Size: 4096, Kind: arena.HostPageable}})
	if err == nil {
		_ = p.Close()
		t.Fatal("a pool over a region of 4096 bytes was made")
	}
	if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "the External region's size 4096 bytes") {
		t.Fatalf("a pool over a region of 4096 bytes: %v; want ErrInvalidOptions naming the region's size", err)
	}
}
