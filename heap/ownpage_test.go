package heap

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
)

// TestOwnPageMin checks OwnPageMin against what the heap does: a request one byte below it
// gets a block of a class page, a request of it a page of its own, on memory that commits a
// host page at a time and on memory that commits 2 MiB at a time (huge pages), where the
// large classes take object pages.
func TestOwnPageMin(t *testing.T) {
	for _, c := range []struct {
		name string
		ao   arena.Options
		want uintptr
	}{
		{"host pages", arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 1 << 30}, MaxClassSize + 1},
		{"huge pages", arena.Options{Provider: arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB}), Capacity: 1 << 30}, 64<<10 + 1},
	} {
		h := newTestHeapOn(t, c.ao, Options{})
		if got := h.g.OwnPageMin(); got != c.want {
			t.Errorf("%s: OwnPageMin = %d, want %d", c.name, got, c.want)
		}
		if h.g.Coarse() != (c.want != MaxClassSize+1) {
			t.Errorf("%s: Coarse = %v", c.name, h.g.Coarse())
		}
		for _, n := range []uintptr{c.want - 1, c.want} {
			p, err := h.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			pg, _, ok := h.g.find(p)
			if !ok {
				t.Fatalf("%s: no page for a block of %d bytes", c.name, n)
			}
			if own := pg.class < 0; own != (n >= c.want) {
				t.Errorf("%s: a request of %d bytes has a page of its own: %v", c.name, n, own)
			}
			if err := h.Free(p); err != nil {
				t.Fatal(err)
			}
		}
	}
}
