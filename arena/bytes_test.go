package arena_test

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

func must(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func newPageable(t *testing.T) *arena.Arena {
	t.Helper()
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 64 << 20, PurgeDelay: -1})
	must(t, "New", err)
	return a
}

func TestBytes(t *testing.T) {
	a := newPageable(t)
	s, err := a.Alloc(3<<20, arena.DefaultChunkSize) // two chunks
	must(t, "Alloc", err)
	b, err := a.Bytes(s.Base, s.Size)
	must(t, "Bytes", err)
	if len(b) != int(s.Size) || cap(b) != int(s.Size) {
		t.Fatalf("len %d cap %d, want %d", len(b), cap(b), s.Size)
	}
	b[0], b[len(b)-1] = 7, 9
	tail, err := a.Bytes(s.Base+s.Size-1, 1)
	must(t, "Bytes of the last byte", err)
	if tail[0] != 9 {
		t.Errorf("a second view reads %d, want 9", tail[0])
	}

	bad := []struct {
		what    string
		addr, n uintptr
		want    string
	}{
		{"empty", s.Base, 0, "empty"},
		{"foreign", 0x1000, 16, "not in a region"},
		{"past the region", s.Base, uintptr(a.Stats().Reserved) + 1, "past the end"},
		{"into a free chunk", s.Base, 5 << 20, "not handed out"},
		{"wrapping", s.Base + 16, ^uintptr(0) - 8, "past the end"},
	}
	for _, c := range bad {
		if _, err := a.Bytes(c.addr, c.n); !errors.Is(err, arena.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Bytes(%#x, %d) = %v; want ErrInvalid saying %q", c.what, c.addr, c.n, err, c.want)
		}
	}

	// A reserved span is not committed until Commit.
	r, err := a.Reserve(arena.DefaultChunkSize, arena.DefaultChunkSize)
	must(t, "Reserve", err)
	if _, err := a.Bytes(r.Base, 4096); !errors.Is(err, arena.ErrInvalid) || !strings.Contains(err.Error(), "not committed") {
		t.Errorf("Bytes of reserved memory = %v; want ErrInvalid (not committed)", err)
	}
	_, err = a.Commit(r.Base, 4096)
	must(t, "Commit", err)
	v, err := a.Bytes(r.Base, 4096)
	must(t, "Bytes after Commit", err)
	v[4095] = 1
	if _, err := a.Bytes(r.Base, 8192); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("Bytes reaching past the committed page = %v; want ErrInvalid", err)
	}

	must(t, "Free", a.Free(s))
	must(t, "Free", a.Free(r))
	if _, err := a.Bytes(s.Base, 16); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("Bytes of a freed span = %v; want ErrInvalid", err)
	}
	must(t, "Close", a.Close())
	if _, err := a.Bytes(s.Base, 16); !errors.Is(err, arena.ErrClosed) {
		t.Errorf("Bytes after Close = %v; want ErrClosed", err)
	}
}

// TestBytesDeviceMemory checks that memory of the Device kind is never viewed, even where the
// CPU could reach it (here an external region over host memory that claims to be device memory).
func TestBytesDeviceMemory(t *testing.T) {
	m, err := unix.Mmap(-1, 0, 4<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	must(t, "mmap", err)
	defer func() { _ = unix.Munmap(m) }()
	base := mem.Addr(m)
	prov, err := arena.External(arena.ExternalRegion{Base: base, Size: uintptr(len(m)), Kind: arena.Device})
	must(t, "External", err)
	a, err := arena.New(arena.Options{Provider: prov})
	must(t, "New", err)
	s, err := a.Alloc(4096, 256)
	must(t, "Alloc", err)
	if _, err := a.Bytes(s.Base, 4096); !errors.Is(err, arena.ErrNotHostAccessible) {
		t.Errorf("Bytes of device memory = %v; want ErrNotHostAccessible", err)
	}
	must(t, "Free", a.Free(s))
	must(t, "Close", a.Close())
}
