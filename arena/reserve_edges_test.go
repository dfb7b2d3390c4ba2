package arena

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestHostReserveEdgesRefusedReleased: a host Reserve maps more than asked, to align, and
// unmaps the head and the tail; when the kernel refuses those munmaps (ENOMEM: the mapping
// count at vm.max_map_count), the edges stay with the region, and its Release unmaps them with
// it. Before, they stayed mapped for good: address space, and with Populate memory, that no
// one held.
func TestHostReserveEdgesRefusedReleased(t *testing.T) {
	const size, alignment = 2 << 20, 2 << 20
	for _, populate := range []bool{false, true} {
		h := PageableHost(HostOptions{Populate: populate})
		var edges [][2]uintptr
		h.munmapFn = func(a, s uintptr) error {
			edges = append(edges, [2]uintptr{a, s})
			return unix.ENOMEM
		}
		r, err := h.Reserve(size, alignment)
		if err != nil {
			t.Fatal(err)
		}
		if len(edges) == 0 || len(edges) > 2 {
			t.Fatalf("populate %v: %d edges unmapped, want 1 or 2", populate, len(edges))
		}
		lo, hi := r.Base, r.End()
		for _, e := range edges {
			lo, hi = min(lo, e[0]), max(hi, e[0]+e[1])
		}
		var got [][2]uintptr
		h.munmapFn = func(a, s uintptr) error {
			got = append(got, [2]uintptr{a, s})
			return unix.MunmapPtr(mem.Ptr(a), s)
		}
		if err := h.Release(r); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != [2]uintptr{lo, hi - lo} {
			t.Fatalf("populate %v: Release unmapped %#x, want [%#x, +%#x): the region and "+
				"the edges its Reserve could not unmap", populate, got, lo, hi-lo)
		}
	}
}
