package ipcpool

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
)

// A reservation of address space the system refuses (mmap of the reservation failing with
// ENOMEM: RLIMIT_AS, vm.max_map_count) fails Serve and Attach with ErrRefused, the errno kept
// and pinmalloc.ErrOutOfMemory matched, as ErrRefused says of the system's refusals, and not
// with ErrPoolFull: no grant was asked for, the pool is not full. (reserve said ErrPoolFull and
// formatted the errno with %v: neither ErrRefused nor unix.ENOMEM matched.)
func TestReservationRefusedIsErrRefused(t *testing.T) {
	dir := t.TempDir()
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", what)
			return
		}
		if !errors.Is(err, ErrRefused) || !errors.Is(err, unix.ENOMEM) || !errors.Is(err, pinmalloc.ErrOutOfMemory) ||
			errors.Is(err, ErrPoolFull) || strings.Count(err.Error(), "ipcpool") != 1 {
			t.Errorf("%s: %q; want ErrRefused (not ErrPoolFull), ENOMEM kept, pinmalloc.ErrOutOfMemory, "+
				"\"ipcpool\" said once", what, err)
		}
	}
	refuse := func(int, int64, unsafe.Pointer, uintptr, int, int) (unsafe.Pointer, error) {
		return nil, unix.ENOMEM
	}
	defer func() { mmapReserve = unix.MmapPtr }()
	o := Options{Size: 4 << 20, FallbackPageable: true}

	mmapReserve = refuse
	w, err := Serve(filepath.Join(dir, "serve.sock"), o)
	mmapReserve = unix.MmapPtr
	if err == nil {
		_ = w.Close()
	}
	check("Serve with its reservation refused", err)

	path := filepath.Join(dir, "attach.sock")
	w, err = Serve(path, o)
	must(t, "Serve", err)
	defer func() { must(t, "owner Close", w.Close()) }()
	mmapReserve = refuse
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	mmapReserve = unix.MmapPtr
	if err == nil {
		_ = p.Close()
	}
	check("Attach with its reservation refused", err)
}
