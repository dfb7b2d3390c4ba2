package ipcpool

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
)

// The system's refusals of the pool's memory fail Serve and Attach with ErrRefused, the errno
// kept and "ipcpool" said once; one for want of memory (ENOMEM) matches
// pinmalloc.ErrOutOfMemory too, as ErrRefused says, and no other does. (An ENOMEM of madvise,
// mmap, memfd_create or ftruncate matched ErrRefused and the errno only: code that handles a
// want of memory by its kind missed it. Sealing and madvise had no test of their refusal.)
func TestSystemRefusalOfMemoryIsErrRefused(t *testing.T) {
	dir := t.TempDir()
	check := func(what string, err, cause error, oom bool) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", what)
			return
		}
		if !errors.Is(err, ErrRefused) || !errors.Is(err, cause) || strings.Count(err.Error(), "ipcpool") != 1 ||
			errors.Is(err, pinmalloc.ErrOutOfMemory) != oom {
			t.Errorf("%s: %q (out of memory: %v); want ErrRefused, the cause %v kept, \"ipcpool\" said once, "+
				"out of memory %v", what, err, errors.Is(err, pinmalloc.ErrOutOfMemory), cause, oom)
		}
	}
	serve := func(name string) (*Owner, error) {
		return Serve(filepath.Join(dir, name+".sock"), Options{Size: 4 << 20, FallbackPageable: true})
	}
	defer func() { seal, madvise = sealMemfd, unix.Madvise }()

	seal = func(int) error { return unix.EPERM }
	w, err := serve("seal")
	if err == nil {
		_ = w.Close()
	}
	check("Serve with the seals refused", err, unix.EPERM, false)
	seal = sealMemfd

	madvise = func([]byte, int) error { return unix.ENOMEM }
	w, err = serve("madvise")
	if err == nil {
		_ = w.Close()
	}
	check("Serve with madvise out of memory", err, unix.ENOMEM, true)
	madvise = unix.Madvise

	w, err = serve("attach")
	must(t, "Serve", err)
	defer func() { must(t, "owner Close", w.Close()) }()
	madvise = func([]byte, int) error { return unix.ENOMEM }
	p, err := Attach(context.Background(), filepath.Join(dir, "attach.sock"), AttachOptions{FallbackPageable: true})
	madvise = unix.Madvise
	if err == nil {
		_ = p.Close()
	}
	check("Attach with madvise out of memory", err, unix.ENOMEM, true)
	madvise = func([]byte, int) error { return unix.EINVAL }
	p, err = Attach(context.Background(), filepath.Join(dir, "attach.sock"), AttachOptions{FallbackPageable: true})
	madvise = unix.Madvise
	if err == nil {
		_ = p.Close()
	}
	check("Attach with madvise refused", err, unix.EINVAL, false)
}
