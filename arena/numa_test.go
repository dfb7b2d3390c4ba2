package arena

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/numa"
)

// TestHostNode binds locked and pageable regions (populated or not) to a node: their pages
// are there, the provider and the stats say so; a node the machine lacks fails the reserve.
func TestHostNode(t *testing.T) {
	node := numa.Online("/sys")[0]
	for _, c := range []struct {
		locked, populate bool
	}{{false, false}, {true, false}, {false, true}, {true, true}} {
		o := HostOptions{Node: NUMANode(node), Populate: c.populate}
		var p *HostProvider
		if c.locked {
			p = LockedHost(o)
		} else {
			p = PageableHost(o)
		}
		if p.Node() != node {
			t.Errorf("%+v: Node() = %d", c, p.Node())
		}
		a := newTestArena(t, Options{Provider: p, Capacity: 4 << 20, PurgeDelay: -1})
		s, err := a.Alloc(1<<20, 1)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		b := a.mustBytes(t, s)
		b[0] = 1
		if n, err := numa.NodeOf(s.Base); err != nil || n != node {
			t.Errorf("%+v: page on node %d, %v", c, n, err)
		}
		if st := a.Stats(); st.Node != node || st.PerRegion[0].Node != node {
			t.Errorf("%+v: stats node %d, %+v", c, st.Node, st.PerRegion)
		}
		if err := a.Free(s); err != nil {
			t.Fatal(err)
		}
	}
	if PageableHost(HostOptions{}).Node() != NodeUnknown {
		t.Error("an unbound provider names a node")
	}
	a := newTestArena(t, Options{Provider: PageableHost(HostOptions{Node: NUMANode(999)}), Capacity: 4 << 20})
	if _, err := a.Alloc(1<<20, 1); !errors.Is(err, ErrReserve) || !errors.Is(err, unix.EINVAL) {
		t.Errorf("Alloc bound to node 999 = %v, want ErrReserve and EINVAL", err)
	}
}
