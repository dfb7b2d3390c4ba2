package ipcpool

import (
	"context"
	"errors"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// A process whose region the driver refuses to unregister as it leaves keeps the region
// registered and mapped (unmapping it would leave the driver's pins on its pages until the
// context goes), says so, and leaves the pool all the same: the owner no longer counts it.
// The next Close gives the region back, and the device after it. The owner's Close keeps
// its own refused region the same way.
func TestFakeUnregisterRefused(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 4 << 20, Pool: cudaHost})
	must(t, "Serve", err)
	for _, live := range []bool{false, true} {
		p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost})
		must(t, "Attach", err)
		var b []byte
		if live { // Close gives the buffer up: its region is left to junk once unregistered
			b, err = p.Alloc(4096)
			must(t, "Alloc", err)
		}
		if n := f.Stat(fakecuda.Registrations); n != 2 {
			t.Fatalf("%d registrations with a process attached, want 2", n)
		}
		f.FailAfter(fakecuda.CallUnregister, 0, fakecuda.ResultInvalidValue)
		if err := p.Close(); !errors.Is(err, pcuda.ErrInvalidValue) {
			t.Fatalf("Close with the unregistration refused (live %v): %v", live, err)
		}
		if w.Attached() != 0 {
			t.Fatal("the process still counts as attached after its Close returned")
		}
		if n := f.Stat(fakecuda.Registrations); n != 2 {
			t.Fatalf("%d registrations after the refused Close, want 2 (the refused one kept)", n)
		}
		if live && !faults(b) {
			t.Error("a buffer given up in the kept region still reaches the pool's memory")
		}
		if err := p.Close(); err != nil {
			t.Fatalf("the Close that retries: %v", err)
		}
		if n := f.Stat(fakecuda.Registrations); n != 1 {
			t.Fatalf("%d registrations after the retry, want the owner's alone", n)
		}
		if live && faults(b) {
			t.Error("the buffer given up faults after the retry, where it should read junk")
		}
		if err := p.Close(); !errors.Is(err, ErrClosed) {
			t.Fatalf("a Close with nothing left: %v", err)
		}
	}
	f.FailAfter(fakecuda.CallUnregister, 0, fakecuda.ResultInvalidValue)
	if err := w.Close(); !errors.Is(err, pcuda.ErrInvalidValue) {
		t.Fatalf("the owner's Close with the unregistration refused: %v", err)
	}
	if n := f.Stat(fakecuda.Registrations); n != 1 {
		t.Fatalf("%d registrations after the owner's refused Close, want 1", n)
	}
	must(t, "the owner's Close that retries", w.Close())
	if n := f.Stat(fakecuda.Registrations); n != 0 {
		t.Fatalf("%d registrations left", n)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("the owner's Close with nothing left: %v", err)
	}
}

// An Attach that fails after it registered part of the pool gives the registrations back; one
// the driver refuses then stays registered, with its device open, held by the package (no
// Process is left to Close), and the failing Attach says so. The next Attach, Serve or Close
// gives it back and closes the device. Before, it was dropped: registered and retained until
// the process exited.
func TestFakeAttachFailureKeepsRefused(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	path := filepath.Join(t.TempDir(), "pool.sock")
	base := f.Stat(fakecuda.Retains) // the test's own device
	// Two regions of 2 MiB: the owner's and a process's locks fit an 8 MiB memlock limit.
	w, err := Serve(path, Options{Size: 4 << 20, MaxRegistration: 2 << 20, Pool: cudaHost})
	must(t, "Serve", err)
	regs, retains := f.Stat(fakecuda.Registrations), f.Stat(fakecuda.Retains)
	f.FailAfter(fakecuda.CallRegister, 1, fakecuda.ResultInvalidValue) // the second region
	f.FailAfter(fakecuda.CallUnregister, 0, fakecuda.ResultInvalidValue)
	_, err = Attach(context.Background(), path, AttachOptions{Pool: cudaHost})
	if !errors.Is(err, pcuda.ErrInvalidValue) || !strings.Contains(err.Error(), "stays registered") {
		t.Fatalf("Attach with a registration refused, then its undo: %v; want both said", err)
	}
	if n, r := f.Stat(fakecuda.Registrations), f.Stat(fakecuda.Retains); n != regs+1 || r != retains+1 {
		t.Fatalf("after the failed Attach: %d registrations, %d retains; want the refused one and its device kept (%d, %d)", n, r, regs+1, retains+1)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
	p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost}) // retries first
	must(t, "Attach", err)
	if n := f.Stat(fakecuda.Registrations); n != regs+2 {
		t.Fatalf("%d registrations with a process attached after the retry, want %d", n, regs+2)
	}
	must(t, "Close", p.Close())
	must(t, "owner Close", w.Close())
	if n, r := f.Stat(fakecuda.Registrations), f.Stat(fakecuda.Retains); n != 0 || r != base {
		t.Fatalf("%d registrations, %d retains left; want none but the test's own %d", n, r, base)
	}
}

// A VMM pool's process whose unmap the driver refuses keeps its mapping, and the next Close
// gives it back: no handle or reservation is left once the owner is closed too.
func TestFakeVMMUnmapRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 4 << 20, VMM: true, Pool: cudaHost})
	must(t, "Serve", err)
	p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost})
	must(t, "Attach", err)
	_, err = p.Alloc(4096) // given up at Close: its range is left to junk once unmapped
	must(t, "Alloc", err)
	f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
	if err := p.Close(); !errors.Is(err, pcuda.ErrInvalidValue) {
		t.Fatalf("Close with the unmap refused: %v", err)
	}
	if w.Attached() != 0 {
		t.Fatal("the process still counts as attached after its Close returned")
	}
	must(t, "the Close that retries", p.Close())
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("a Close with nothing left: %v", err)
	}
	must(t, "owner Close", w.Close())
	if st := d.Stats(); st.Handles != 0 || st.Reservations != 0 {
		t.Fatalf("%d handles, %d reservations left", st.Handles, st.Reservations)
	}
}

// faults reports whether writing b's first byte faults.
func faults(b []byte) (fault bool) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		fault = recover() != nil
	}()
	b[0]++
	return false
}
