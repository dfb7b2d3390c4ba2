package ipcpool

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Serve and Attach that the system or the CUDA driver refuses the pool's memory (memfd_create
// out of descriptors, ftruncate past the file size limit, an mlock refused for another reason
// than the memlock limit, cuMemHostRegister in the owner and in an attaching process, the VMM
// granules' cuMemCreate and cuMemMap in the owner and cuMemMap in an attaching process) fail
// with ErrRefused, and with ErrInvalidOptions the CUDAHost backend on a device the driver does
// not have; so does a Process.Close whose cuMemHostUnregister or cuMemUnmap the driver refuses;
// the cause is kept, and "ipcpool" said once. (Each wrapped the cause in words of its
// own, or not at all, and matched no sentinel of the package.) It runs against the fake driver,
// in a child process of its own: the limits it lowers there disturb no other test.
func TestFakeMemoryRefusedIsASentinel(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	dir := t.TempDir()
	n := 0
	check := func(what string, err, sentinel, cause error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", what)
			return
		}
		if !errors.Is(err, sentinel) || !errors.Is(err, cause) || strings.Count(err.Error(), "ipcpool") != 1 {
			t.Errorf("%s: %q; want %v, the cause %v kept, \"ipcpool\" said once", what, err, sentinel, cause)
		}
	}
	serve := func(what string, o Options, sentinel, cause error) {
		t.Helper()
		n++
		w, err := Serve(filepath.Join(dir, fmt.Sprintf("pool%d.sock", n)), o)
		if err == nil {
			_ = w.Close()
		}
		check("Serve with "+what, err, sentinel, cause)
	}
	attach := func(what string, o Options, fail func(), ao AttachOptions, cause error) {
		t.Helper()
		n++
		path := filepath.Join(dir, fmt.Sprintf("pool%d.sock", n))
		w, err := Serve(path, o)
		must(t, "Serve", err)
		defer func() { must(t, "owner Close", w.Close()) }()
		fail()
		p, err := Attach(context.Background(), path, ao)
		if err == nil {
			_ = p.Close()
		}
		check("Attach with "+what, err, ErrRefused, cause)
	}
	// The owner locks nothing: no memlock limit refuses any case below before what it forces.
	mlock = func([]byte) error { return nil }
	defer func() { mlock = unix.Mlock }()
	host := Options{Size: 4 << 20}

	// memfd_create with no descriptor left below RLIMIT_NOFILE.
	var nofile syscall.Rlimit
	must(t, "getrlimit", syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile))
	free, err := unix.Dup(0) // the lowest descriptor free
	must(t, "dup", err)
	unix.Close(free)
	low := nofile
	low.Cur = uint64(free)
	must(t, "setrlimit", syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	w, err := Serve(filepath.Join(dir, "nofile.sock"), host)
	must(t, "setrlimit", syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nofile))
	if err == nil {
		_ = w.Close()
	}
	check("no descriptor left", err, ErrRefused, unix.EMFILE)

	// ftruncate past RLIMIT_FSIZE (its SIGXFSZ the Go runtime ignores).
	var fsize syscall.Rlimit
	must(t, "getrlimit", syscall.Getrlimit(syscall.RLIMIT_FSIZE, &fsize))
	small := fsize
	small.Cur = 4096
	must(t, "setrlimit", syscall.Setrlimit(syscall.RLIMIT_FSIZE, &small))
	w, err = Serve(filepath.Join(dir, "fsize.sock"), host)
	must(t, "setrlimit", syscall.Setrlimit(syscall.RLIMIT_FSIZE, &fsize))
	if err == nil {
		_ = w.Close()
	}
	check("a file size limit of 4 KiB", err, ErrRefused, unix.EFBIG)

	// An mlock refused for another reason than the memlock limit (ErrMemlock's).
	mlock = func([]byte) error { return unix.EINVAL }
	serve("mlock refused with EINVAL", host, ErrRefused, unix.EINVAL)
	mlock = func([]byte) error { return nil }

	cudaHostNoFallback := Options{Size: 4 << 20, Pool: cudaHost}
	serve("no such device", Options{Size: 4 << 20, Pool: pinned.Options{Backend: pinned.CUDAHost, Device: 99}},
		ErrInvalidOptions, pcuda.ErrNoDevice)
	f.FailRegister(1, fakecuda.ResultOutOfMemory)
	serve("cuMemHostRegister refused", cudaHostNoFallback, ErrRefused, pcuda.ErrOutOfMemory)
	vmm := Options{Size: 4 << 20, VMM: true, Pool: cudaHost}
	f.FailAfter(fakecuda.CallCreate, 0, fakecuda.ResultOutOfMemory)
	serve("cuMemCreate refused", vmm, ErrRefused, pcuda.ErrOutOfMemory)
	f.FailAfter(fakecuda.CallMap, 0, fakecuda.ResultOutOfMemory)
	serve("cuMemMap refused", vmm, ErrRefused, pcuda.ErrOutOfMemory)

	attach("cuMemHostRegister refused", host, func() { f.FailRegister(1, fakecuda.ResultOutOfMemory) },
		AttachOptions{Pool: cudaHost}, pcuda.ErrOutOfMemory)
	attach("cuMemMap refused", vmm, func() { f.FailAfter(fakecuda.CallMap, 0, fakecuda.ResultOutOfMemory) },
		AttachOptions{Pool: cudaHost}, pcuda.ErrOutOfMemory)

	// Close, its cuMemHostUnregister refused: the region stays registered for the next Close.
	path := filepath.Join(dir, "close.sock")
	w, err = Serve(path, host)
	must(t, "Serve", err)
	p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost})
	must(t, "Attach", err)
	f.FailAfter(fakecuda.CallUnregister, 0, fakecuda.ResultInvalidValue)
	check("Close with cuMemHostUnregister refused", p.Close(), ErrRefused, pcuda.ErrInvalidValue)
	must(t, "Close again", p.Close())
	must(t, "owner Close", w.Close())

	// Close of a VMM pool's process, its cuMemUnmap refused: the mapping stays for the next Close.
	path = filepath.Join(dir, "vmmclose.sock")
	w, err = Serve(path, vmm)
	must(t, "Serve", err)
	p, err = Attach(context.Background(), path, AttachOptions{Pool: cudaHost})
	must(t, "Attach", err)
	f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
	check("Close with cuMemUnmap refused", p.Close(), ErrRefused, pcuda.ErrInvalidValue)
	must(t, "Close again", p.Close())
	must(t, "owner Close", w.Close())
}
