package pinned

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestErrorsAgree: every misuse gets the sentinel of this package that names it, with text
// starting "pinned: ", and still matches the cause below.
func TestErrorsAgree(t *testing.T) {
	region := make([]byte, 4<<20)
	for name, o := range map[string]Options{
		"External region of size 0": {Backend: External, External: &arena.ExternalRegion{Base: mem.Addr(region), Size: 0, Kind: arena.HostPageable, Committed: true}},
		"External region at 0":      {Backend: External, External: &arena.ExternalRegion{Base: 0, Size: 4 << 20, Kind: arena.HostPageable, Committed: true}},
		"HugePages 7":               {HugePages: 7, Backend: Pageable, Capacity: 64 << 20},
		"Capacity 1 MiB":            {Capacity: 1 << 20, Backend: Pageable},
	} {
		p, err := New(o)
		if !errors.Is(err, ErrInvalidOptions) || !strings.HasPrefix(err.Error(), "pinned: ") {
			if p != nil {
				_ = p.Close()
			}
			t.Errorf("New(%s): %v", name, err)
		}
	}

	p := newTestPool(t, Options{Capacity: 64 << 20, Backend: Pageable})
	if _, err := p.AllocAligned(100, 1<<40); !errors.Is(err, ErrTooLarge) {
		t.Errorf("AllocAligned(100, 1<<40): %v", err)
	}
	b, err := p.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	err = p.Free(b)
	if !errors.Is(err, ErrDoubleFree) || !errors.Is(err, heap.ErrDoubleFree) || !strings.HasPrefix(err.Error(), "pinned: ") {
		t.Errorf("double free: %v", err)
	}
	c, err := p.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	err = p.Free(c[:50:50])
	if !errors.Is(err, ErrSubSlice) || !strings.HasPrefix(err.Error(), "pinned: ") {
		t.Errorf("sub-slice: %v", err)
	}
	if err := p.Free(c); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{"Alloc": second(p.Alloc(10)), "Free": p.Free(c), "Close": p.Close()} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }
