package cudamem_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeHugeReuseKeepsRegistration: a heap over HostRegister that reuses a kept 10 MiB huge
// object for a 6 MiB one leaves the object's registration as it is while the 6 MiB block
// lives: a Trim then registers nothing, and the registration still covers the block. Before,
// the reuse gave the 4 MiB tail to the purge, which cut the 10 MiB registration of the live
// block into a 6 MiB one (an unregister and 2 registers during Trim): a copy in flight over the
// block ran over memory briefly not pinned (a copy in flight across the Trim fails on the
// fake). TryAlloc, which gives no tail to the purge, then
// refused such a reuse; now it makes it.
func TestFakeHugeReuseKeepsRegistration(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	a, err := arena.New(arena.Options{Provider: p, Capacity: 64 << 20, PurgeDelay: -1})
	must(t, "arena.New", err)
	h, err := heap.New(a, heap.Options{})
	must(t, "heap.New", err)
	x, err := h.Alloc(10 << 20)
	must(t, "Alloc", err)
	must(t, "Free", h.Free(x))
	y, err := h.Alloc(6 << 20)
	must(t, "Alloc", err)
	if y != x {
		t.Fatalf("Alloc(6 MiB) after a Free of 10 MiB got %#x, want the kept object, %#x", y, x)
	}
	base, size, ok := p.RegistrationOf(y)
	if !ok || base != y || size != 10<<20 {
		t.Fatalf("before Trim: the block's registration is [%#x, +%d) (%v), want [%#x, +%d)",
			base, size, ok, y, 10<<20)
	}
	// A copy from the block in flight across the Trim (the fake faults work whose registration
	// ends before it runs).
	dst, err := d.MemAlloc(6 << 20)
	must(t, "MemAlloc", err)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	must(t, "MemcpyHtoDAsync", d.MemcpyHtoDAsync(dst, y, 6<<20, s))
	regs := f.Stat(fakecuda.RegisterCalls)
	a.Trim()
	if err := d.StreamSynchronize(s); err != nil {
		t.Errorf("a copy from the block in flight across Trim: %v", err)
		f.ClearStickyError()
	}
	must(t, "StreamDestroy", d.StreamDestroy(s))
	must(t, "MemFree", d.MemFree(dst))
	if r := f.Stat(fakecuda.RegisterCalls) - regs; r != 0 {
		t.Errorf("Trim with the 6 MiB block live made %d cuMemHostRegister calls, want none", r)
	}
	if b, n, ok := p.RegistrationOf(y); !ok || b != base || n != size {
		t.Errorf("after Trim: the live block's registration is [%#x, +%d) (%v), want [%#x, +%d)",
			b, n, ok, base, size)
	}
	// Kept again, committed whole: TryAlloc, which makes no arena call, reuses it for 6 MiB.
	must(t, "Free", h.Free(y))
	w, err := h.Alloc(10 << 20)
	must(t, "Alloc", err)
	must(t, "Free", h.Free(w))
	if z, ok := h.TryAlloc(6 << 20); !ok || z != x {
		t.Errorf("TryAlloc(6 MiB) after the Free = %#x, %v; want the kept object, %#x", z, ok, x)
	} else {
		must(t, "Free", h.Free(z))
	}
	must(t, "heap.Close", h.Close())
	must(t, "arena.Close", a.Close())
}
