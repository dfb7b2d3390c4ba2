package device

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
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

// TestFakeNewProviderOfAnotherDevice: New refuses, with ErrInvalidOptions, a provider that
// names another device than the heap's (cudamem's providers say theirs with Device), holding
// nothing of it after; one of the heap's own device is taken. Before, New took device 1's
// providers for a heap on device 0, which then handed out memory of device 1 to work on
// device 0's streams.
func TestFakeNewProviderOfAnotherDevice(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	dev, dev1 := f.Open(t, 0), f.Open(t, 1)
	type counted interface {
		arena.Provider
		Counters() cudamem.Counters
	}
	vmm, err := cudamem.NewDeviceVMM(public(dev1))
	must(t, "NewDeviceVMM on device 1", err)
	malloc, err := cudamem.NewDeviceMalloc(public(dev1))
	must(t, "NewDeviceMalloc on device 1", err)
	managed, err := cudamem.NewManaged(public(dev1))
	must(t, "NewManaged on device 1", err)
	host, err := cudamem.NewHostAlloc(public(dev1))
	must(t, "NewHostAlloc on device 1", err)
	for _, p := range []counted{vmm, malloc, managed, host} {
		h, err := New(public(dev), Options{Provider: p, Capacity: 16 << 20})
		if err == nil {
			t.Errorf("New on device 0 over device 1's %s provider = nil error", p.Name())
			must(t, "Close", h.Close())
			continue
		}
		if !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New on device 0 over device 1's %s provider = %v, want ErrInvalidOptions", p.Name(), err)
		}
		if msg := err.Error(); !strings.Contains(msg, "CUDA device 1") || !strings.Contains(msg, "device 0") {
			t.Errorf("New over device 1's %s provider: %q does not name both devices", p.Name(), msg)
		}
		if c := p.Counters(); c.Live() != 0 {
			t.Errorf("New refused device 1's %s provider, which still holds %+v", p.Name(), c)
		}
	}
	own, err := cudamem.NewDeviceVMM(public(dev))
	must(t, "NewDeviceVMM on device 0", err)
	h, err := New(public(dev), Options{Provider: own, Capacity: 16 << 20})
	must(t, "New over device 0's own provider", err)
	must(t, "Close", h.Close())
}
