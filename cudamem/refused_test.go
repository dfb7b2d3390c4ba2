package cudamem_test

// The VMM providers when the driver refuses to give memory back: what a refused decommit
// leaves must be what the arena then believes, committed and usable, and nothing may stay
// mapped or held once the arena is closed.

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeVMMDecommitRefused: a purge whose cuMemRelease or cuMemUnmap the driver refuses
// leaves the range mapped, since the arena keeps a refused run as committed memory it hands
// out again without a commit; a later purge gives it back whole. Before, a release refused
// after the unmap had succeeded left the arena's committed range unmapped: the next copy into
// it failed (CUDA_ERROR_INVALID_VALUE here; on a GPU a kernel faults, and the CPU faults on
// host granules).
func TestFakeVMMDecommitRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, call := range []fakecuda.PinCall{fakecuda.CallRelease, fakecuda.CallUnmap} {
		p, err := cudamem.NewDeviceVMM(public(d))
		must(t, "NewDeviceVMM", err)
		a := newArena(t, p, 64<<20)
		s, err := a.Alloc(2<<20, arena.DefaultChunkSize)
		must(t, "Alloc", err)
		must(t, "Free", a.Free(s))
		f.FailAfter(call, 0, fakecuda.ResultInvalidValue)
		a.Trim() // refused: the arena keeps the run committed
		if got := a.Stats().Committed; got != 2<<20 {
			t.Fatalf("call %d refused: the arena holds %d bytes committed, want %d", call, got, 2<<20)
		}
		roundTrip(t, d, s.Base, s.Size) // what the arena counts as committed is mapped
		a.Trim()
		gone(t, f, p, a.Stats().Committed)
	}

	// Several granules in one decommit, the driver refusing the second release or the unmap:
	// the range stays mapped, and the next decommit neither releases a handle twice nor
	// leaves one held.
	for _, c := range []struct {
		call fakecuda.PinCall
		skip int
	}{{fakecuda.CallRelease, 1}, {fakecuda.CallUnmap, 0}} {
		p, err := cudamem.NewDeviceVMM(public(d))
		must(t, "NewDeviceVMM", err)
		r, err := p.Reserve(8<<20, 2<<20)
		must(t, "Reserve", err)
		must(t, "Commit", p.Commit(r, 0, 8<<20))
		f.FailAfter(c.call, c.skip, fakecuda.ResultInvalidValue)
		if err := p.Decommit(r, 0, 8<<20); !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrInvalidValue) {
			t.Errorf("call %d refused after %d: Decommit = %v", c.call, c.skip, err)
		}
		roundTrip(t, d, r.Base, 8<<20)
		if got := p.Counters().Committed; got != 8<<20 {
			t.Errorf("call %d refused after %d: the provider counts %d bytes committed", c.call, c.skip, got)
		}
		must(t, "Decommit again", p.Decommit(r, 0, 8<<20))
		gone(t, f, p, 0)
		must(t, "Release", p.Release(r))
	}
}

// gone checks that the provider and the fake hold no granule, with arenaCommitted the
// committed bytes of the arena over p.
func gone(t *testing.T, f *fakecuda.Driver, p *cudamem.DeviceVMM, arenaCommitted uint64) {
	t.Helper()
	if c := p.Counters(); arenaCommitted != 0 || c.Committed != 0 || c.Handles != 0 ||
		f.Stat(fakecuda.Handles) != 0 || f.Stat(fakecuda.Mappings) != 0 {
		t.Errorf("after the decommit again: arena committed %d, provider %+v, fake %d handles, %d mappings",
			arenaCommitted, c, f.Stat(fakecuda.Handles), f.Stat(fakecuda.Mappings))
	}
}

// TestFakeVMMCommitUndoRefused: a commit that fails at cuMemSetAccess undoes its mappings,
// and the arena takes the range for uncommitted. When the driver refuses the undo's release,
// the range is unmapped all the same and commits again, and the handle is released later (at
// the region's release at the latest); when it refuses the unmap, the mappings stay on record,
// so that releasing the region unmaps them and frees the reservation. Before, a refused unmap
// left mappings no record held: closing the arena failed (cuMemAddressFree of a range still
// mapped) and left the reservation held.
func TestFakeVMMCommitUndoRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, call := range []fakecuda.PinCall{fakecuda.CallRelease, fakecuda.CallUnmap} {
		p, err := cudamem.NewDeviceVMM(public(d))
		must(t, "NewDeviceVMM", err)
		a, err := arena.New(arena.Options{Provider: p, Capacity: 64 << 20, PurgeDelay: -1})
		must(t, "arena.New", err)
		f.FailAfter(fakecuda.CallAccess, 0, fakecuda.ResultNotSupported)
		f.FailAfter(call, 0, fakecuda.ResultInvalidValue)
		if _, err := a.Alloc(4<<20, arena.DefaultChunkSize); !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrNotSupported) {
			t.Fatalf("call %d refused: Alloc whose cuMemSetAccess fails: %v", call, err)
		}
		if call == fakecuda.CallRelease {
			s, err := a.Alloc(4<<20, arena.DefaultChunkSize)
			must(t, "Alloc after an undo whose release was refused", err)
			roundTrip(t, d, s.Base, s.Size)
			must(t, "Free", a.Free(s))
		}
		must(t, "arena.Close", a.Close())
		if c := p.Counters(); c.Live() != 0 || c.Committed != 0 || f.Stat(fakecuda.Handles) != 0 ||
			f.Stat(fakecuda.Mappings) != 0 || f.Stat(fakecuda.Reservations) != 0 {
			t.Errorf("call %d refused: after Close: provider %+v, fake %d handles, %d mappings, %d reservations",
				call, c, f.Stat(fakecuda.Handles), f.Stat(fakecuda.Mappings), f.Stat(fakecuda.Reservations))
		}
	}
}

// TestFakeHostVMMDevicePointerDuringRelease: DevicePointer, which looks through every live
// region of the provider (arenas may share one), runs while another arena releases a region
// of it: it answers for the region released (the address, or arena.ErrInvalid once the
// granule is gone) without a data race. Before, Release cleared the region's record without
// the lock DevicePointer reads it under (go test -race fails before: the unpin delay keeps
// Release inside the driver while DevicePointer spins).
func TestFakeHostVMMDevicePointerDuringRelease(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{})
	must(t, "NewHostVMM", err)
	r, err := p.Reserve(4<<20, 2<<20)
	must(t, "Reserve", err)
	must(t, "Commit", p.Commit(r, 0, 2<<20))
	f.SetPinCost(false, 0, 20*time.Millisecond) // cuMemRelease of a host granule takes 20 ms
	defer f.SetPinCost(false, 0, 0)
	started, stop, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			if i == 1 {
				close(started)
			}
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if dp, err := p.DevicePointer(r.Base); err == nil && dp != pcuda.DevicePtr(r.Base) || err != nil && !errors.Is(err, arena.ErrInvalid) {
				done <- fmt.Errorf("DevicePointer during Release = %#x, %v", dp, err)
				return
			}
		}
	}()
	<-started
	must(t, "Release", p.Release(r))
	close(stop)
	must(t, "DevicePointer", <-done)
	if _, err := p.DevicePointer(r.Base); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("DevicePointer after Release: %v", err)
	}
}

// TestFakeOpenHostCloseRacing: the provider OpenHost returns owns its device; Close gives it
// back once, however many Closes race, and a Close after it does nothing. Before, two racing
// Closes raced on the provider's ownership (go test -race fails before).
func TestFakeOpenHostCloseRacing(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	retains := f.LiveObjects()["retains"]
	p, err := cudamem.OpenHost(0, cudamem.HostOptions{})
	must(t, "OpenHost", err)
	if got := f.LiveObjects()["retains"]; got != retains+1 {
		t.Fatalf("OpenHost retained the device %d times", got-retains)
	}
	c, ok := p.(io.Closer)
	if !ok {
		t.Fatalf("%T has no Close", p)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- c.Close() }()
	}
	must(t, "Close", <-errs)
	must(t, "Close", <-errs)
	must(t, "Close after Close", c.Close())
	if got := f.LiveObjects()["retains"]; got != retains {
		t.Errorf("after Close the device is retained %d times more than before OpenHost", got-retains)
	}
}

// TestFakeHostVMMDevicesChecked: HostOptions.Devices naming a device the machine lacks is
// refused by NewHostVMM, and a device named twice is granted access once. Before, the
// provider was made and every commit then failed at cuMemSetAccess.
func TestFakeHostVMMDevicesChecked(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	for _, devs := range [][]int{{2}, {1, 7}, {-1}} {
		if _, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{Devices: devs}); !errors.Is(err, arena.ErrInvalid) {
			t.Errorf("Devices %v: %v", devs, err)
		}
	}
	copiesGranted(t, f, d, []int{1, 1, 0, 1}, 1)
}

// copiesGranted checks that VMM host memory granted to devs copies to and from device dev.
func copiesGranted(t *testing.T, f *fakecuda.Driver, d *cuda.Device, devs []int, dev int) {
	t.Helper()
	p, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{Devices: devs})
	must(t, "NewHostVMM", err)
	a := newArena(t, p, 64<<20)
	s, err := a.Alloc(2<<20, 256)
	must(t, "Alloc", err)
	copyBoth(t, f.Open(t, dev), s.Base, s.Size)
	must(t, "Free", a.Free(s))
}

// TestFakeHostVMMDevicesLimit: the driver grants access to host VMM memory in one call for
// the host and every device, which the binding passes at most 16 locations: more than 15
// devices (the provider's own with HostOptions.Devices) are refused by NewHostVMM with an
// error naming the limit, and 15 work. Before, NewHostVMM made the provider and its first
// commit failed at cuMemSetAccess with an error about 17 locations the caller never named.
func TestFakeHostVMMDevicesLimit(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetDevices(16)
	ordinals := func(lo, hi int) (ds []int) {
		for i := lo; i < hi; i++ {
			ds = append(ds, i, i) // each twice: a device counts once
		}
		return ds
	}
	for _, devs := range [][]int{ordinals(0, 16), ordinals(1, 16)} {
		_, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{Devices: devs})
		if !errors.Is(err, arena.ErrInvalid) || !strings.Contains(fmt.Sprint(err), "at most 15") {
			t.Errorf("Devices %v: %v; want arena.ErrInvalid naming the limit of 15", devs, err)
		}
	}
	copiesGranted(t, f, d, ordinals(0, 15), 14)
}

// TestFakeVMMReleaseRefused: closing an arena whose region release the driver refuses (the
// unmap of a populated region, or the release of a handle a failed commit stranded) returns the
// refusal and keeps the region, mapped or its handle held, counted by the provider; the next
// Close gives everything back. Before, the region was dropped by the arena whatever the
// provider said, and a refused stranded release freed the reservation anyway, so that a retry
// found the region released.
func TestFakeVMMReleaseRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, c := range []struct {
		name     string
		populate bool
		call     fakecuda.PinCall
	}{{"populated region's unmap", true, fakecuda.CallUnmap}, {"stranded handle's release", false, fakecuda.CallRelease}} {
		p, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{HostOptions: arena.HostOptions{Populate: c.populate}})
		must(t, "NewHostVMM", err)
		a, err := arena.New(arena.Options{Provider: p, Capacity: 8 << 20, RegionSize: 8 << 20, PurgeDelay: -1})
		must(t, "arena.New", err)
		if c.populate {
			s, err := a.Alloc(2<<20, arena.DefaultChunkSize)
			must(t, "Alloc", err)
			must(t, "Free", a.Free(s))
		} else { // a commit failing at cuMemSetAccess whose undo's release is refused
			f.FailAfter(fakecuda.CallAccess, 0, fakecuda.ResultNotSupported)
			f.FailAfter(fakecuda.CallRelease, 0, fakecuda.ResultInvalidValue)
			if _, err := a.Alloc(2<<20, arena.DefaultChunkSize); err == nil {
				t.Fatalf("%s: Alloc whose cuMemSetAccess fails succeeded", c.name)
			}
		}
		held := p.Counters()
		f.FailAfter(c.call, 0, fakecuda.ResultInvalidValue)
		if err := a.Close(); !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrInvalidValue) {
			t.Fatalf("%s refused: Close = %v", c.name, err)
		}
		if got := p.Counters(); got.Reservations != 1 || got.Committed != held.Committed || got.Live() == 0 || f.Stat(fakecuda.Reservations) != 1 {
			t.Errorf("%s refused: provider %+v (before Close %+v), fake %d reservations", c.name, got, held, f.Stat(fakecuda.Reservations))
		}
		must(t, c.name+" refused: Close again", a.Close())
		if got := p.Counters(); got.Live() != 0 || got.Committed != 0 || f.Stat(fakecuda.Handles) != 0 ||
			f.Stat(fakecuda.Mappings) != 0 || f.Stat(fakecuda.Reservations) != 0 {
			t.Errorf("%s refused: after the second Close: provider %+v, fake %d handles, %d mappings, %d reservations",
				c.name, got, f.Stat(fakecuda.Handles), f.Stat(fakecuda.Mappings), f.Stat(fakecuda.Reservations))
		}
	}
}

// TestFakeHostVMMPopulateUndoRefused: a populated region whose commit fails (cuMemSetAccess)
// is given back by Reserve; when the driver refuses that too (the undo's unmap, then the
// release's cuMemRelease), the region is kept and given back at the next Reserve, and nothing
// is held once the arena is closed. Before, Reserve dropped the region whatever the driver
// said: its reservation and granules were held for good.
func TestFakeHostVMMPopulateUndoRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, a := populateUndoRefused(t, f, d)
	s, err := a.Alloc(2<<20, arena.DefaultChunkSize)
	must(t, "Alloc", err)
	if c := p.Counters(); c.Reservations != 1 || f.Stat(fakecuda.Reservations) != 1 {
		t.Errorf("after the next Reserve: provider %+v, fake %d reservations; want the new region only", c, f.Stat(fakecuda.Reservations))
	}
	must(t, "Free", a.Free(s))
	must(t, "Close", a.Close())
	if c := p.Counters(); c.Live() != 0 || c.Committed != 0 || f.Stat(fakecuda.Handles) != 0 ||
		f.Stat(fakecuda.Mappings) != 0 || f.Stat(fakecuda.Reservations) != 0 {
		t.Errorf("after Close: provider %+v, fake %d handles, %d mappings, %d reservations",
			c, f.Stat(fakecuda.Handles), f.Stat(fakecuda.Mappings), f.Stat(fakecuda.Reservations))
	}
}

// TestFakeHostVMMCloseReleasesKept: a populated region whose commit fails, and whose give-back
// the driver refuses too, is given back by the arena's Close when no Reserve or Release comes
// after it; a Close whose give-back of it is refused again says so, and the next Close gives
// it back. Before, the arena's Close left it: its reservation and granules were held for good.
func TestFakeHostVMMCloseReleasesKept(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, a := populateUndoRefused(t, f, d)
	f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
	if err := a.Close(); !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Fatalf("Close whose give-back of the kept region is refused: %v", err)
	}
	if f.Stat(fakecuda.Reservations) != 1 {
		t.Fatalf("after the refused Close: %d reservations, want the region kept", f.Stat(fakecuda.Reservations))
	}
	must(t, "Close again", a.Close())
	if c := p.Counters(); c.Live() != 0 || c.Committed != 0 || f.Stat(fakecuda.Handles) != 0 ||
		f.Stat(fakecuda.Mappings) != 0 || f.Stat(fakecuda.Reservations) != 0 {
		t.Errorf("after Close: provider %+v, fake %d handles, %d mappings, %d reservations",
			c, f.Stat(fakecuda.Handles), f.Stat(fakecuda.Mappings), f.Stat(fakecuda.Reservations))
	}
	if err := a.Close(); !errors.Is(err, arena.ErrClosed) {
		t.Errorf("a third Close = %v, want arena.ErrClosed", err)
	}
}

// populateUndoRefused returns an arena over a populated VMM host provider whose first region's
// commit failed (its access refused) and whose give-back the driver refused too (its unmap and
// release): the provider keeps that region, which no arena holds.
func populateUndoRefused(t *testing.T, f *fakecuda.Driver, d *cuda.Device) (*cudamem.HostVMM, *arena.Arena) {
	t.Helper()
	p, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{HostOptions: arena.HostOptions{Populate: true}})
	must(t, "NewHostVMM", err)
	a, err := arena.New(arena.Options{Provider: p, Capacity: 8 << 20, RegionSize: 8 << 20, PurgeDelay: -1})
	must(t, "arena.New", err)
	f.FailAfter(fakecuda.CallAccess, 0, fakecuda.ResultNotSupported)
	f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
	f.FailAfter(fakecuda.CallRelease, 0, fakecuda.ResultInvalidValue)
	if _, err := a.Alloc(2<<20, arena.DefaultChunkSize); !errors.Is(err, arena.ErrCommit) {
		t.Fatalf("Alloc whose populating commit fails: %v", err)
	}
	if c := p.Counters(); c.Reservations != 1 || f.Stat(fakecuda.Reservations) != 1 {
		t.Fatalf("after the refused undo: provider %+v, fake %d reservations; want the region kept", c, f.Stat(fakecuda.Reservations))
	}
	return p, a
}

// TestFakeVMMCommitUndoUnmapRefusedCommitsAgain: a commit of several granules that runs out of
// device memory midway, whose undo's cuMemUnmap the driver refuses, leaves the granules it
// mapped on record (for Release) while the arena takes the range for uncommitted; the next
// commit of the range unmaps them first and commits. Before, every later commit of the range
// was refused as committed already (arena.ErrInvalid): first fit placed each later span of
// the size there, so the arena could not hand that memory out until it was closed.
func TestFakeVMMCommitUndoUnmapRefusedCommitsAgain(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewDeviceVMM(public(d))
	must(t, "NewDeviceVMM", err)
	a, err := arena.New(arena.Options{Provider: p, Capacity: 64 << 20, PurgeDelay: -1, CommitWorkers: 1})
	must(t, "arena.New", err)
	f.FailAfter(fakecuda.CallCreate, 2, fakecuda.ResultOutOfMemory)
	f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
	if _, err := a.Alloc(8<<20, arena.DefaultChunkSize); !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		t.Fatalf("Alloc whose third cuMemCreate runs out of memory: %v", err)
	}
	f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue) // refused again: the next try
	if _, err := a.Alloc(8<<20, arena.DefaultChunkSize); !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Fatalf("Alloc whose unmap of what the failed commit left is refused: %v", err)
	}
	s, err := a.Alloc(8<<20, arena.DefaultChunkSize)
	must(t, "Alloc after the refused undo", err)
	roundTrip(t, d, s.Base, s.Size)
	if got, held := a.Stats().Committed, p.Counters().Committed; got != 8<<20 || held != 8<<20 {
		t.Errorf("after the Alloc: arena committed %d, provider %d; want %d", got, held, 8<<20)
	}
	must(t, "Free", a.Free(s))
	must(t, "arena.Close", a.Close())
	if c := p.Counters(); c.Live() != 0 || c.Committed != 0 || f.Stat(fakecuda.Handles) != 0 ||
		f.Stat(fakecuda.Mappings) != 0 || f.Stat(fakecuda.Reservations) != 0 {
		t.Errorf("after Close: provider %+v, fake %d handles, %d mappings, %d reservations",
			c, f.Stat(fakecuda.Handles), f.Stat(fakecuda.Mappings), f.Stat(fakecuda.Reservations))
	}
}
