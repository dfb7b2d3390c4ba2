package cudamem_test

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// Memory shared by processes, registered region by region: a copy inside one registration
// runs by DMA, one across two is refused (the driver's rule), and unregistering leaves
// nothing.
func TestFakeRegisterShared(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	fd, err := unix.MemfdCreate("shared", unix.MFD_CLOEXEC)
	must(t, "memfd", err)
	defer unix.Close(fd)
	must(t, "ftruncate", unix.Ftruncate(fd, 8<<20))
	b, err := unix.Mmap(fd, 0, 8<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	must(t, "mmap", err)
	defer unix.Munmap(b)
	base := mem.Addr(b)
	for _, off := range []uintptr{0, 4 << 20} {
		must(t, "RegisterShared", cudamem.RegisterShared(public(d), base+off, 4<<20))
	}
	if n := f.Stat(fakecuda.Registrations); n != 2 {
		t.Fatalf("%d registrations, want 2", n)
	}
	dst, err := d.MemAlloc(2 << 20)
	must(t, "MemAlloc", err)
	before := f.Stat(fakecuda.PinnedCopies)
	must(t, "a copy inside one registration", d.MemcpyHtoD(dst, base+1<<20, 2<<20))
	if f.Stat(fakecuda.PinnedCopies) != before+1 {
		t.Fatal("the copy was not from pinned memory")
	}
	if err := d.MemcpyHtoD(dst, base+3<<20, 2<<20); err == nil {
		t.Fatal("a copy across two registrations was accepted")
	}
	must(t, "MemFree", d.MemFree(dst))
	for _, off := range []uintptr{0, 4 << 20} {
		must(t, "UnregisterShared", cudamem.UnregisterShared(public(d), base+off))
	}
	if n := f.Stat(fakecuda.Registrations); n != 0 {
		t.Fatalf("%d registrations left", n)
	}
	if err := cudamem.UnregisterShared(public(d), base); err == nil {
		t.Fatal("unregistering twice succeeded")
	}
}

// Exportable host granules: created, exported as a descriptor, imported (here, as another
// process would), mapped in one reservation by both sides; the bytes written through one
// mapping read through the other and copy to the device by DMA; a descriptor that is not an
// export is refused; nothing is left after Close.
func TestFakeHostExport(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	var exports, imports []*cudamem.HostExport
	var fds []int
	for range 2 {
		e, err := cudamem.NewHostExport(public(d), 2<<20)
		must(t, "NewHostExport", err)
		fd, err := e.FD()
		must(t, "FD", err)
		exports, fds = append(exports, e), append(fds, fd)
	}
	for _, fd := range fds {
		e, err := cudamem.ImportHostExport(public(d), fd, 2<<20)
		must(t, "ImportHostExport", err)
		imports = append(imports, e)
		unix.Close(fd)
	}
	owner, err := cudamem.MapHostExports(public(d), exports)
	must(t, "MapHostExports (owner)", err)
	peer, err := cudamem.MapHostExports(public(d), imports)
	must(t, "MapHostExports (importer)", err)
	w := mem.Bytes(owner.Base()+3<<20, 4096)
	for i := range w {
		w[i] = byte(i * 3)
	}
	if r := mem.Bytes(peer.Base()+3<<20, 4096); !bytes.Equal(r, w) {
		t.Fatal("the importer does not see the owner's bytes")
	}
	dst, err := d.MemAlloc(2 << 20)
	must(t, "MemAlloc", err)
	before := f.Stat(fakecuda.PinnedCopies)
	must(t, "a copy from mapped granules", d.MemcpyHtoD(dst, peer.Base()+1<<20, 2<<20))
	if f.Stat(fakecuda.PinnedCopies) != before+1 {
		t.Fatal("the copy was not from pinned memory")
	}
	must(t, "MemFree", d.MemFree(dst))
	memfd, err := unix.MemfdCreate("not-an-export", unix.MFD_CLOEXEC)
	must(t, "memfd", err)
	if _, err := cudamem.ImportHostExport(public(d), memfd, 2<<20); err == nil {
		t.Fatal("a memfd was imported as exported granules")
	}
	unix.Close(memfd)
	must(t, "Close (importer)", peer.Close())
	must(t, "Close (owner)", owner.Close())
	if st := d.Stats(); st.Handles != 0 || st.Reservations != 0 {
		t.Fatalf("%d handles, %d reservations left", st.Handles, st.Reservations)
	}
	if _, err := cudamem.MapHostExports(public(d), nil); !errors.Is(err, arena.ErrInvalid) {
		t.Fatalf("mapping nothing: %v", err)
	}
}

// TestFakeHostExportCloseRacing: racing Closes of a mapping unmap and release it once, racing
// Releases of an export release its handle once; each call succeeds, and nothing is left.
// Before, the racing calls raced on the mapping's and the export's records (go test -race
// fails before), and the loser could unmap or release again what the driver had handed to
// someone else since.
func TestFakeHostExportCloseRacing(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	var exports []*cudamem.HostExport
	for range 3 {
		e, err := cudamem.NewHostExport(public(d), 2<<20)
		must(t, "NewHostExport", err)
		exports = append(exports, e)
	}
	m, err := cudamem.MapHostExports(public(d), exports[:2])
	must(t, "MapHostExports", err)
	errs := make(chan error, 4)
	for range 2 {
		go func() { errs <- m.Close() }()
		go func() { errs <- exports[2].Release() }()
	}
	for range 4 {
		must(t, "Close or Release", <-errs)
	}
	if m.Base() != 0 {
		t.Errorf("Base after Close = %#x", m.Base())
	}
	// Sizes a peer may send that overflow the reservation are refused before the driver.
	e, err := cudamem.NewHostExport(public(d), 2<<20)
	must(t, "NewHostExport", err)
	fd, err := e.FD()
	must(t, "FD", err)
	defer unix.Close(fd)
	var absurd []*cudamem.HostExport
	for range 4 {
		x, err := cudamem.ImportHostExport(public(d), fd, 1<<62+2<<20)
		must(t, "ImportHostExport", err)
		absurd = append(absurd, x)
	}
	if _, err := cudamem.MapHostExports(public(d), absurd); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("mapping 4 allocations of 2^62 bytes: %v", err)
	}
	must(t, "Release", e.Release())
	if _, err := e.FD(); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("FD after Release: %v", err)
	}
	if st := d.Stats(); st.Handles != 0 || st.Reservations != 0 || f.Stat(fakecuda.Mappings) != 0 {
		t.Fatalf("%d handles, %d reservations, %d mappings left", st.Handles, st.Reservations, f.Stat(fakecuda.Mappings))
	}
}

// TestFakeHostExportRefused: a mapping's Close whose cuMemUnmap or cuMemRelease the driver
// refuses, and an export's Release it refuses, return the driver's error and keep what was
// refused: the reservation while something is mapped in it, the handles; the next Close or
// Release gives it all back. Before, both forgot what the driver had refused: the handle, the
// mapping and the reservation stayed held for good.
func TestFakeHostExportRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, call := range []fakecuda.PinCall{fakecuda.CallUnmap, fakecuda.CallRelease} {
		var exports []*cudamem.HostExport
		for range 2 {
			e, err := cudamem.NewHostExport(public(d), 2<<20)
			must(t, "NewHostExport", err)
			exports = append(exports, e)
		}
		m, err := cudamem.MapHostExports(public(d), exports)
		must(t, "MapHostExports", err)
		f.FailAfter(call, 1, fakecuda.ResultInvalidValue) // the second allocation's
		if err := m.Close(); !errors.Is(err, pinmalloc.ErrInvalidValue) {
			t.Fatalf("call %d refused: Close = %v", call, err)
		}
		if m.Base() != 0 {
			t.Errorf("call %d refused: Base after Close = %#x", call, m.Base())
		}
		st := d.Stats()
		if st.Handles != 1 || call == fakecuda.CallUnmap && (f.Stat(fakecuda.Mappings) != 1 || st.Reservations != 1) {
			t.Errorf("call %d refused: %d handles, %d mappings, %d reservations left; want what was refused",
				call, st.Handles, f.Stat(fakecuda.Mappings), st.Reservations)
		}
		must(t, "Close again", m.Close())
		must(t, "Close after that", m.Close())
		if st := d.Stats(); st.Handles != 0 || st.Reservations != 0 || f.Stat(fakecuda.Mappings) != 0 {
			t.Fatalf("call %d refused: after the next Close: %d handles, %d reservations, %d mappings",
				call, st.Handles, st.Reservations, f.Stat(fakecuda.Mappings))
		}
	}

	e, err := cudamem.NewHostExport(public(d), 2<<20)
	must(t, "NewHostExport", err)
	f.FailAfter(fakecuda.CallRelease, 0, fakecuda.ResultInvalidValue)
	if err := e.Release(); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Fatalf("Release refused: %v", err)
	}
	fd, err := e.FD() // still the export's
	must(t, "FD after a refused Release", err)
	unix.Close(fd)
	must(t, "Release again", e.Release())
	if st := d.Stats(); st.Handles != 0 {
		t.Fatalf("%d handles after the next Release", st.Handles)
	}
}

// TestFakeMapHostExportsUndoRefused: a mapping that fails (the driver refuses the second
// allocation's access), whose undo the driver refuses too (the first allocation's unmap),
// comes back with the error holding what was kept, and its Close gives it back. Before,
// MapHostExports returned nil: the mapping, its handle and the reservation were held for good.
func TestFakeMapHostExportsUndoRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	var exports []*cudamem.HostExport
	for range 2 {
		e, err := cudamem.NewHostExport(public(d), 2<<20)
		must(t, "NewHostExport", err)
		exports = append(exports, e)
	}
	f.FailAfter(fakecuda.CallAccess, 1, fakecuda.ResultNotSupported)
	f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
	m, err := cudamem.MapHostExports(public(d), exports)
	if !errors.Is(err, pinmalloc.ErrNotSupported) || !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Fatalf("MapHostExports whose access and undo are refused: %v", err)
	}
	if m == nil {
		t.Fatal("MapHostExports dropped what the driver refused to give back")
	}
	if m.Base() != 0 {
		t.Errorf("Base of a mapping that failed = %#x", m.Base())
	}
	if st := d.Stats(); st.Handles != 1 || st.Reservations != 1 || f.Stat(fakecuda.Mappings) != 1 {
		t.Errorf("after the refused undo: %d handles, %d reservations, %d mappings; want the first allocation kept",
			st.Handles, st.Reservations, f.Stat(fakecuda.Mappings))
	}
	must(t, "Close", m.Close())
	if st := d.Stats(); st.Handles != 0 || st.Reservations != 0 || f.Stat(fakecuda.Mappings) != 0 {
		t.Fatalf("after Close: %d handles, %d reservations, %d mappings", st.Handles, st.Reservations, f.Stat(fakecuda.Mappings))
	}
}
