package cudamem_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeVMMGiveBackWords: a decommit, and a device arena's Close, whose cuMemRelease or
// cuMemUnmap the driver refuses say that memory could not be given back, and still match
// arena.ErrCommit and the driver's error. Before, they said "arena: cannot commit memory:
// cuMemUnmap ...", a commit where memory was being given back.
func TestFakeVMMGiveBackWords(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrInvalidValue) {
			t.Errorf("%s: %v; want arena.ErrCommit and the driver's error", what, err)
			return
		}
		if msg := err.Error(); strings.Contains(msg, "commit") ||
			!strings.Contains(msg, "cannot give memory back") {
			t.Errorf("%s says %q; want that memory could not be given back, and no commit",
				what, msg)
		}
	}
	for _, c := range []struct {
		name string
		call fakecuda.PinCall
	}{{"cuMemRelease", fakecuda.CallRelease}, {"cuMemUnmap", fakecuda.CallUnmap}} {
		p, err := cudamem.NewDeviceVMM(public(d))
		must(t, "NewDeviceVMM", err)
		r, err := p.Reserve(4<<20, 2<<20)
		must(t, "Reserve", err)
		must(t, "Commit", p.Commit(r, 0, 4<<20))
		f.FailAfter(c.call, 0, fakecuda.ResultInvalidValue)
		check("a Decommit with "+c.name+" refused", p.Decommit(r, 0, 4<<20))
		must(t, "Decommit again", p.Decommit(r, 0, 4<<20))
		must(t, "Release", p.Release(r))
	}

	// The release refused at Close's purge (the range stays mapped), the unmap at the
	// region's release: Close keeps the region and says why.
	p, err := cudamem.NewDeviceVMM(public(d))
	must(t, "NewDeviceVMM", err)
	a, err := arena.New(arena.Options{Provider: p, Capacity: 64 << 20, PurgeDelay: -1})
	must(t, "arena.New", err)
	s, err := a.Alloc(2<<20, arena.DefaultChunkSize)
	must(t, "Alloc", err)
	must(t, "Free", a.Free(s))
	f.FailAfter(fakecuda.CallRelease, 0, fakecuda.ResultInvalidValue)
	f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
	err = a.Close()
	if !errors.Is(err, arena.ErrReleaseRefused) {
		t.Errorf("Close with the unmap refused: %v; want arena.ErrReleaseRefused", err)
	}
	check("Close with the unmap refused", err)
	must(t, "Close again", a.Close())
}

// TestFakeHostRegisterGiveBackWords: a cuMemHostUnregister the driver refuses says that memory
// could not be given back where it was (a Decommit, its cut of a registration that reaches past
// the range, a Release), and that memory could not be committed where the unregistration was
// part of a commit (a Join's cut and its undoing of the registrations it merges); every error
// matches arena.ErrCommit and the driver's as before. Before, all of them said "arena: cannot
// commit memory".
func TestFakeHostRegisterGiveBackWords(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	check := func(what string, err error, giveBack bool) {
		t.Helper()
		if !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrInvalidValue) {
			t.Errorf("%s: %v; want arena.ErrCommit and the driver's error", what, err)
			return
		}
		msg := err.Error()
		if gb := strings.Contains(msg, "cannot give memory back"); gb != giveBack ||
			strings.Contains(msg, "cannot commit memory") == giveBack {
			t.Errorf("%s says %q; want that memory could not be given back: %v, committed: %v",
				what, msg, giveBack, !giveBack)
		}
	}
	refuse := func() { f.FailAfter(fakecuda.CallUnregister, 0, fakecuda.ResultInvalidValue) }

	p, r := twoChunks(t, d) // two registrations of a chunk each
	refuse()
	check("a Decommit with its unregistration refused", p.Decommit(r, 0, 4<<20), true)
	refuse()
	check("a Join with its merge's unregistration refused", p.Join(r, 0, 4<<20), false)
	must(t, "Join", p.Join(r, 0, 4<<20)) // one registration of both chunks
	refuse()
	check("a Join cutting a registration, the unregistration refused", p.Join(r, 0, 2<<20), false)
	refuse()
	check("a Decommit cutting a registration, the unregistration refused",
		p.Decommit(r, 0, 2<<20), true)
	refuse()
	check("a Release with its unregistration refused", p.Release(r), true)
	must(t, "Release again", p.Release(r))
}
