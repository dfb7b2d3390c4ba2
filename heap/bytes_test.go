package heap_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// newHeapOver returns a heap over a new arena with provider prov, closing both at cleanup.
func newHeapOver(t *testing.T, prov arena.Provider, capacity uintptr) *heap.Heap {
	t.Helper()
	a, err := arena.New(arena.Options{Provider: prov, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	h, err := heap.New(a, heap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil && !errors.Is(err, heap.ErrClosed) {
			t.Errorf("heap close: %v", err)
		}
		if err := a.Close(); err != nil {
			t.Errorf("arena close: %v", err)
		}
	})
	return h
}

func TestBytes(t *testing.T) {
	h := newHeapOver(t, arena.PageableHost(arena.HostOptions{}), 64<<20)
	for _, n := range []uintptr{1, 100, 70 << 10, 3 << 20} { // small, large, huge
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		b, err := h.Bytes(p)
		if err != nil {
			t.Fatalf("Bytes of a %d-byte block: %v", n, err)
		}
		if uintptr(len(b)) != n || uintptr(cap(b)) != n || mem.Addr(b) != p {
			t.Fatalf("%d-byte block: len %d cap %d at %#x; want the block at %#x", n, len(b), cap(b), mem.Addr(b), p)
		}
		b[0], b[n-1] = 1, 2
		again, err := h.Group().Bytes(p) // the group's lock-free path sees the same bytes
		if err != nil || again[n-1] != 2 || (n > 1 && again[0] != 1) {
			t.Fatalf("second view of a %d-byte block: %v", n, err)
		}
		if n > 1 {
			if _, err := h.Bytes(p + 1); !errors.Is(err, heap.ErrInteriorPointer) {
				t.Errorf("Bytes of an interior pointer = %v; want ErrInteriorPointer", err)
			}
		}
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Bytes(p); !errors.Is(err, heap.ErrDoubleFree) {
			t.Errorf("Bytes of a freed %d-byte block = %v; want ErrDoubleFree", n, err)
		}
	}
	if _, err := h.Bytes(0x1000); !errors.Is(err, heap.ErrNotOwned) {
		t.Errorf("Bytes of a foreign address = %v; want ErrNotOwned", err)
	}
}

// TestBytesDeviceMemory checks that a heap over device memory refuses to view its blocks.
func TestBytesDeviceMemory(t *testing.T) {
	m, err := unix.Mmap(-1, 0, 8<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Munmap(m) }()
	prov, err := arena.External(arena.ExternalRegion{Base: mem.Addr(m), Size: uintptr(len(m)), Kind: arena.Device})
	if err != nil {
		t.Fatal(err)
	}
	h := newHeapOver(t, prov, 0)
	p, err := h.Alloc(256)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Bytes(p); !errors.Is(err, arena.ErrNotHostAccessible) {
		t.Errorf("Bytes of a device block = %v; want arena.ErrNotHostAccessible", err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
}
