package device

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// granuleProvider is a provider that reports granule g: its own fault when g is no power of
// two (the arena refuses it) or past the heap's 2 MiB chunk (the heap does).
type granuleProvider struct {
	arena.Provider
	g uintptr
}

func (p granuleProvider) Caps() arena.Caps {
	c := p.Provider.Caps()
	c.Granule = p.g
	return c
}

// noDefault is a provider with no default capacity.
type noDefault struct{ arena.Provider }

// TestFakeNewProviderFault: New says ErrInvalidOptions of the caller's options only; a
// provider's own fault that the arena or the heap refuses keeps its sentinel, without
// ErrInvalidOptions. Before, every ErrInvalid from making the arena or the heap was called
// ErrInvalidOptions, the provider's faults included.
func TestFakeNewProviderFault(t *testing.T) {
	_, dev := fakecuda.RunDevice(t)
	if dev == nil {
		return
	}
	host := arena.PageableHost(arena.HostOptions{})
	for _, c := range []struct {
		what     string
		g        uintptr
		sentinel error
	}{
		{"a granule of 3 bytes", 3, arena.ErrInvalid},
		{"a granule of 4 MiB", 4 << 20, heap.ErrInvalidArgument},
	} {
		o := Options{Provider: granuleProvider{host, c.g}, Capacity: 64 << 20}
		_, err := New(public(dev), o)
		if !errors.Is(err, c.sentinel) || errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New over a provider with %s = %v; want %v, not ErrInvalidOptions",
				c.what, err, c.sentinel)
		}
	}
	// The caller's options are still ErrInvalidOptions.
	_, err := New(public(dev), Options{Provider: noDefault{host}})
	if !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New with no capacity over a provider with no default = %v", err)
	}
	_, err = New(public(dev), Options{Capacity: heap.MaxCapacity + 1<<21})
	if !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New with a capacity past heap.MaxCapacity = %v", err)
	}
}
