package cudamem_test

// The registration provider when the driver refuses cuMemHostUnregister: what is refused stays
// registered, mapped and counted, and the next decommit or release gives it back.

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeHostRegisterReleaseRefused: an arena over a populated registration provider closes,
// and the driver refuses the unregistration of its region. Close reports it (arena.ErrCommit
// and the driver's error), the region stays registered, mapped and counted by the provider and
// the arena, and the next Close gives it all back. Before, Release forgot the registration and
// unmapped the region anyway: the registration was held by the driver for good, and the next
// Close had nothing to give back.
func TestFakeHostRegisterReleaseRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{HostOptions: arena.HostOptions{Populate: true}})
	must(t, "NewHostRegister", err)
	a, err := arena.New(arena.Options{Provider: p, Capacity: 8 << 20, RegionSize: 8 << 20, PurgeDelay: -1})
	must(t, "arena.New", err)
	s, err := a.Alloc(2<<20, arena.DefaultChunkSize)
	must(t, "Alloc", err)
	must(t, "Free", a.Free(s))
	committed, regs, bytes := a.Stats().Committed, f.Stat(fakecuda.Registrations), f.Stat(fakecuda.RegisteredBytes)
	if committed == 0 || regs == 0 || uint64(bytes) != committed {
		t.Fatalf("before Close: arena committed %d, fake %d registrations of %d bytes", committed, regs, bytes)
	}

	f.FailAfter(fakecuda.CallUnregister, 0, fakecuda.ResultInvalidValue)
	if err := a.Close(); !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Fatalf("Close whose unregistration is refused = %v; want arena.ErrCommit and the driver's error", err)
	}
	if got := a.Stats().Committed; got != committed {
		t.Errorf("after the refused Close the arena counts %d bytes committed, want %d", got, committed)
	}
	if c := p.Counters(); c.Registrations != regs || uint64(c.Committed) != committed ||
		f.Stat(fakecuda.Registrations) != regs || f.Stat(fakecuda.RegisteredBytes) != bytes {
		t.Errorf("after the refused Close: provider %+v, fake %d registrations of %d bytes; want %d of %d",
			c, f.Stat(fakecuda.Registrations), f.Stat(fakecuda.RegisteredBytes), regs, bytes)
	}
	if base, size, ok := p.RegistrationOf(s.Base); !ok || base > s.Base || base+size < s.Base+s.Size {
		t.Errorf("after the refused Close the provider has no registration of [%#x, +%d)", s.Base, s.Size)
	}
	copyBoth(t, d, s.Base, s.Size) // still mapped and registered: the driver copies it by DMA

	must(t, "Close again", a.Close())
	if c := p.Counters(); c.Live() != 0 || c.Committed != 0 || a.Stats().Committed != 0 ||
		f.Stat(fakecuda.Registrations) != 0 || f.Stat(fakecuda.RegisteredBytes) != 0 {
		t.Errorf("after the second Close: provider %+v, arena committed %d, fake %d registrations of %d bytes",
			c, a.Stats().Committed, f.Stat(fakecuda.Registrations), f.Stat(fakecuda.RegisteredBytes))
	}
	if err := a.Close(); !errors.Is(err, arena.ErrClosed) {
		t.Errorf("a third Close = %v, want arena.ErrClosed", err)
	}
}

// TestFakeHostRegisterDecommitRefused: a decommit of two chunks, each its own registration,
// whose second unregistration the driver refuses leaves the whole range registered, as the
// arena, which keeps a refused range committed, takes it to be; the next decommit gives it
// back. Before, the first chunk stayed unregistered but committed: the registration invariant
// (every committed byte registered) broke, and the arena handed out memory the device could
// not copy by DMA. Join, which undoes registrations the same way, is checked alike.
func TestFakeHostRegisterDecommitRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, r := twoChunks(t, d)

	f.FailAfter(fakecuda.CallUnregister, 1, fakecuda.ResultInvalidValue)
	if err := p.Decommit(r, 0, 4<<20); !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Fatalf("Decommit whose second unregistration is refused = %v", err)
	}
	checkRegistered(t, f, p, r, "after the refused Decommit", 4<<20)
	copyBoth(t, d, r.Base, 2<<20) // the chunk unregistered before the refusal, registered again

	f.FailAfter(fakecuda.CallUnregister, 1, fakecuda.ResultInvalidValue)
	if err := p.Join(r, 0, 4<<20); !errors.Is(err, arena.ErrCommit) {
		t.Fatalf("Join whose second unregistration is refused = %v", err)
	}
	checkRegistered(t, f, p, r, "after the refused Join", 4<<20)
	must(t, "Join", p.Join(r, 0, 4<<20))
	checkRegistered(t, f, p, r, "after the Join", 4<<20)

	must(t, "Decommit again", p.Decommit(r, 0, 4<<20))
	must(t, "Release", p.Release(r))
	if c := p.Counters(); c.Live() != 0 || c.Committed != 0 || f.Stat(fakecuda.Registrations) != 0 {
		t.Errorf("after Release: provider %+v, fake %d registrations", c, f.Stat(fakecuda.Registrations))
	}
}

// TestFakeHostRegisterUndoRefused: a decommit of two chunks whose second unregistration the
// driver refuses, and whose registration of the first chunk again is refused as well, leaves
// the first chunk committed and unregistered: the provider says so, still counts it
// committed, and registers it again at its next call on the region (here a Join of the other
// chunk). Before, the chunk was forgotten, committed but unregistered for good (counted 2 MiB
// short), and the arena handed out memory the device could not copy by DMA. A cut (a Join of
// part of a registration) whose undo is refused is checked alike.
func TestFakeHostRegisterUndoRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, r := twoChunks(t, d)

	f.FailAfter(fakecuda.CallUnregister, 1, fakecuda.ResultInvalidValue)
	f.FailAfter(fakecuda.CallRegister, 0, fakecuda.ResultOutOfMemory)
	if err := p.Decommit(r, 0, 4<<20); !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Fatalf("Decommit whose unregistration and undo are refused = %v", err)
	}
	if got := p.Counters().Committed; got != 4<<20 {
		t.Errorf("after the refused undo the provider counts %d bytes committed, want 4 MiB", got)
	}
	must(t, "Join of the other chunk", p.Join(r, 2<<20, 2<<20))
	checkRegistered(t, f, p, r, "after the next Join", 4<<20)
	copyBoth(t, d, r.Base, 2<<20)

	// A Join of the first chunk cuts the 4 MiB registration made here in two; the second
	// half's registration is refused, and so is the undo of the first half's: the second half
	// is left unregistered, and registered at the next call.
	must(t, "Join", p.Join(r, 0, 4<<20))
	f.FailAfter(fakecuda.CallRegister, 1, fakecuda.ResultOutOfMemory)
	f.FailAfter(fakecuda.CallUnregister, 1, fakecuda.ResultInvalidValue)
	if err := p.Join(r, 0, 2<<20); !errors.Is(err, arena.ErrCommit) {
		t.Fatalf("Join whose cut and undo are refused = %v", err)
	}
	must(t, "Join again", p.Join(r, 0, 2<<20))
	checkRegistered(t, f, p, r, "after the cut's undo was mended", 4<<20)

	must(t, "Decommit", p.Decommit(r, 0, 4<<20))
	must(t, "Release", p.Release(r))
	if c := p.Counters(); c.Live() != 0 || c.Committed != 0 || f.Stat(fakecuda.Registrations) != 0 {
		t.Errorf("after Release: provider %+v, fake %d registrations", c, f.Stat(fakecuda.Registrations))
	}
}

// checkRegistered fails t unless the first want bytes of r are registered, in 2 MiB chunks,
// and the fake and the provider count want bytes registered and committed.
func checkRegistered(t *testing.T, f *fakecuda.Driver, p *cudamem.HostRegister, r *arena.Region, what string, want int64) {
	t.Helper()
	for off := uintptr(0); off < uintptr(want); off += 2 << 20 {
		if _, _, ok := p.RegistrationOf(r.Base + off); !ok {
			t.Errorf("%s: [%#x, +2 MiB) is committed and not registered", what, r.Base+off)
		}
	}
	if got := f.Stat(fakecuda.RegisteredBytes); got != want || p.Counters().Committed != want {
		t.Errorf("%s: fake %d bytes registered, provider %d committed; want %d", what, got, p.Counters().Committed, want)
	}
}

// twoChunks returns a registration provider and a region of it whose first two chunks are
// committed, each its own registration.
func twoChunks(t *testing.T, d *cuda.Device) (*cudamem.HostRegister, *arena.Region) {
	t.Helper()
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	r, err := p.Reserve(8<<20, 2<<20)
	must(t, "Reserve", err)
	must(t, "Commit", p.Commit(r, 0, 2<<20))
	must(t, "Commit", p.Commit(r, 2<<20, 2<<20))
	return p, r
}
