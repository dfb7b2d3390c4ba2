package shared

import (
	"errors"
	"path/filepath"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// A pool bigger than the registration cap is made of regions no bigger than it, each one
// registration in every process that has a device; a buffer copies by DMA from the owner and
// from an attached process; everything is unregistered at the end.
func TestRegisteredInPieces(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	dev := cuda.Wrap[*pcuda.Device](d)
	if _, err := (Options{Size: 8 << 20, RegionSize: 8 << 20, MaxRegistration: 4 << 20}).layout(); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("a region above the registration cap: %v", err)
	}
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 8 << 20, MaxRegistration: 4 << 20, Device: dev, FallbackPageable: true})
	if err != nil {
		t.Fatal(err)
	}
	if w.regions != 2 || w.Stats().Registered != 2 || f.Stat(fakecuda.Registrations) != 2 {
		t.Fatalf("%d regions, %d registered, %d registrations; want 2 of each", w.regions, w.Stats().Registered, f.Stat(fakecuda.Registrations))
	}
	p, err := Attach(path, AttachOptions{Device: dev, FallbackPageable: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.Stat(fakecuda.Registrations); n != 4 {
		t.Fatalf("%d registrations with a process attached, want 4", n)
	}
	dst, err := d.MemAlloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []*Process{w.Process, p} {
		b, err := q.Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		before := f.Stat(fakecuda.PinnedCopies)
		if err := d.MemcpyHtoD(dst, mem.Addr(b), 1<<20); err != nil {
			t.Fatal(err)
		}
		if f.Stat(fakecuda.PinnedCopies) != before+1 {
			t.Errorf("slot %d: the copy was not from pinned memory", q.Slot())
		}
		if err := q.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.MemFree(dst); err != nil {
		t.Fatal(err)
	}
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := f.Stat(fakecuda.Registrations); n != 0 {
		t.Fatalf("%d registrations left", n)
	}
}

// A registration the driver refuses fails Serve, or with FallbackPageable leaves the region
// unregistered and says so in Stats.
func TestRegisterRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	dev := cuda.Wrap[*pcuda.Device](d)
	path := filepath.Join(t.TempDir(), "pool.sock")
	f.FailRegister(1, fakecuda.ResultOutOfMemory)
	if _, err := Serve(path, Options{Size: 4 << 20, Device: dev}); !errors.Is(err, pcuda.ErrOutOfMemory) {
		t.Fatalf("Serve with the registration refused: %v", err)
	}
	f.FailRegister(1, fakecuda.ResultOutOfMemory)
	w, err := Serve(path, Options{Size: 4 << 20, Device: dev, FallbackPageable: true})
	if err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.Registered != 0 || len(st.PageableRegions) != 1 {
		t.Fatalf("%d registered, fallbacks %q; want 0 and one", st.Registered, st.PageableRegions)
	}
	b, err := w.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
