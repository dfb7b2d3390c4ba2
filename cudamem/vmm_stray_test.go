package cudamem_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// strayGranules leaves granules 0 and 1 of a fresh region of p (8 MiB) mapped by a commit that
// failed midway, its third cuMemCreate out of memory, whose undo's cuMemUnmap the driver
// refused: stray granules, which the caller (an arena) takes for uncommitted.
func strayGranules(t *testing.T, f *fakecuda.Driver, p arena.Provider) *arena.Region {
	t.Helper()
	r, err := p.Reserve(8<<20, 2<<20)
	must(t, "Reserve", err)
	f.FailAfter(fakecuda.CallCreate, 2, fakecuda.ResultOutOfMemory)
	f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
	if err := p.Commit(r, 0, 8<<20); !errors.Is(err, arena.ErrCommit) {
		t.Fatalf("a commit whose third cuMemCreate runs out of memory: %v", err)
	}
	if n := f.Stat(fakecuda.Mappings); n != 2 {
		t.Fatalf("after the failed commit whose undo's unmap was refused: %d mappings, want the 2 it made", n)
	}
	return r
}

// TestFakeHostVMMDevicePointerStray: DevicePointer refuses an address in a granule that a failed
// commit left mapped (stray), as it refuses uncommitted memory: the commit failed, and the next
// commit over the granule unmaps it. Before, it answered with the address, since the granule
// was on record as mapped.
func TestFakeHostVMMDevicePointerStray(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(true)
	p, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{})
	must(t, "NewHostVMM", err)
	r := strayGranules(t, f, p)
	for _, addr := range []uintptr{r.Base, r.Base + 2<<20 + 8, r.Base + 4<<20} {
		if dp, err := p.DevicePointer(addr); !errors.Is(err, arena.ErrInvalid) {
			t.Errorf("DevicePointer(%#x), %d bytes into a region whose commit failed = %#x, %v; want arena.ErrInvalid",
				addr, addr-r.Base, dp, err)
		}
	}
	must(t, "Commit", p.Commit(r, 0, 4<<20)) // unmaps the strays first
	if _, err := p.DevicePointer(r.Base + 2<<20); err != nil {
		t.Errorf("DevicePointer of committed memory: %v", err)
	}
	must(t, "Release", p.Release(r))
	must(t, "ReleaseKept", p.ReleaseKept())
	if n := f.Stat(fakecuda.Handles) + f.Stat(fakecuda.Mappings) + f.Stat(fakecuda.Reservations); n != 0 {
		t.Errorf("after Release: %d handles, mappings and reservations", n)
	}
}

// TestFakeVMMCommitStrayBesideCommitted: a commit over granules a failed commit left mapped
// (stray) and granules committed since is refused for the committed ones (arena.ErrInvalid),
// and gives the stray ones back all the same: what the driver held for nothing goes back at
// once. Before, it was refused with the strays still mapped.
func TestFakeVMMCommitStrayBesideCommitted(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(true)
	for _, pr := range providersOf(d, "DeviceVMM", "HostVMM") {
		p, err := pr.new()
		must(t, pr.name, err)
		r := strayGranules(t, f, p)
		must(t, pr.name+": Commit", p.Commit(r, 4<<20, 2<<20)) // granule 2
		if err := p.Commit(r, 0, 6<<20); !errors.Is(err, arena.ErrInvalid) {
			t.Errorf("%s: a commit over 2 stray granules and a committed one: %v; want arena.ErrInvalid", pr.name, err)
		}
		if n := f.Stat(fakecuda.Mappings); n != 1 {
			t.Errorf("%s: after the refused commit: %d mappings, want the committed granule's alone", pr.name, n)
		}
		if c := p.Counters(); c.Committed != 2<<20 {
			t.Errorf("%s: after the refused commit: %d bytes committed, want %d", pr.name, c.Committed, 2<<20)
		}
		must(t, pr.name+": Commit of the strays' range", p.Commit(r, 0, 4<<20))
		must(t, pr.name+": Release", p.Release(r))
		if n := f.Stat(fakecuda.Handles) + f.Stat(fakecuda.Mappings) + f.Stat(fakecuda.Reservations); n != 0 {
			t.Errorf("%s: after Release: %d handles, mappings and reservations", pr.name, n)
		}
	}
}

// TestFakeHostVMMDevicePointerStrayReleaseRefused: a Release the driver refuses keeps the region
// with what is still mapped, and granules a failed commit left mapped stay stray: DevicePointer
// still refuses them. Before, a refused Release put them back on record as committed, and
// DevicePointer answered for them.
func TestFakeHostVMMDevicePointerStrayReleaseRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(true)
	p, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{})
	must(t, "NewHostVMM", err)
	r := strayGranules(t, f, p)
	f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
	if err := p.Release(r); err == nil {
		t.Fatal("Release whose cuMemUnmap is refused succeeded")
	}
	if dp, err := p.DevicePointer(r.Base); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("DevicePointer of a stray granule after a refused Release = %#x, %v; want arena.ErrInvalid", dp, err)
	}
	must(t, "Release", p.Release(r))
	must(t, "ReleaseKept", p.ReleaseKept())
	if n := f.Stat(fakecuda.Handles) + f.Stat(fakecuda.Mappings) + f.Stat(fakecuda.Reservations); n != 0 {
		t.Errorf("after Release: %d handles, mappings and reservations", n)
	}
}
