package cudamem_test

// A provider given a region that is not one of its live regions: one it released already (its
// base now another region's), or one of another provider.

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/pattern"
)

// TestFakeHostRegisterStaleRegion: a region released and then used again (a double Release, a
// Commit, Decommit, Join or Prefault after Release) is refused with arena.ErrInvalid, and the
// live region that the kernel mapped at the same base since keeps its registration and its
// bytes. Before, the provider found regions by base only: a second Release of the stale region
// unregistered the live one, whose committed memory every copy then refused; a stale Decommit
// unregistered it and dropped its pages (the bytes read zero); a stale Commit, refused,
// dropped them too, in its undo.
func TestFakeHostRegisterStaleRegion(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	stale, err := p.Reserve(4<<20, 2<<20)
	must(t, "Reserve", err)
	must(t, "Commit", p.Commit(stale, 0, 2<<20))
	must(t, "Decommit", p.Decommit(stale, 0, 2<<20))
	// The Reserve right after the Release, with no test helper between them (the probe build's
	// helpers pause), so that the kernel hands the same range back; some other mapping of the
	// process (the Go runtime's) may still take it meanwhile, and the test cannot be made then.
	rerr := p.Release(stale)
	live, err := p.Reserve(4<<20, 2<<20)
	must(t, "Release", rerr)
	must(t, "Reserve", err)
	if live.Base != stale.Base {
		must(t, "Release", p.Release(live))
		t.Skipf("the kernel mapped the new region at %#x, not at the released one's %#x: the test's premise", live.Base, stale.Base)
	}
	must(t, "Commit", p.Commit(live, 0, 2<<20))
	want := liveBytes(t, live)

	for _, c := range []struct {
		what string
		call func() error
	}{
		{"Release", func() error { return p.Release(stale) }},
		{"Decommit", func() error { return p.Decommit(stale, 0, 2<<20) }},
		{"Join", func() error { return p.Join(stale, 0, 2<<20) }},
		{"Commit", func() error { return p.Commit(stale, 0, 2<<20) }},
		{"Prefault", func() error { return p.Prefault(stale, 2<<20, 2<<20) }},
	} {
		if err := c.call(); !errors.Is(err, arena.ErrInvalid) {
			t.Errorf("%s of a released region: %v, want arena.ErrInvalid", c.what, err)
		}
		checkLive(t, f, p, live, want, c.what+" of a released region")
	}
	must(t, "Decommit", p.Decommit(live, 0, 2<<20))
	must(t, "Release", p.Release(live))
	if c := p.Counters(); c.Live() != 0 || c.Committed != 0 || f.Stat(fakecuda.Registrations) != 0 {
		t.Errorf("after Release: provider %+v, fake %d registrations", c, f.Stat(fakecuda.Registrations))
	}
}

// TestFakeHostRegisterForeignRegion: a region of another registration provider is refused by
// every call with arena.ErrInvalid, and keeps its registration and its bytes. Before, Release
// unmapped it under the other provider's registration, and a Commit, refused, dropped its
// pages in its undo and made them inaccessible.
func TestFakeHostRegisterForeignRegion(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	owner, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	r, err := owner.Reserve(4<<20, 2<<20)
	must(t, "Reserve", err)
	must(t, "Commit", owner.Commit(r, 0, 2<<20))
	want := liveBytes(t, r)
	for _, c := range []struct {
		what string
		call func() error
	}{
		{"Commit", func() error { return p.Commit(r, 0, 2<<20) }},
		{"Prefault", func() error { return p.Prefault(r, 2<<20, 2<<20) }},
		{"Join", func() error { return p.Join(r, 0, 2<<20) }},
		{"Decommit", func() error { return p.Decommit(r, 0, 2<<20) }},
		{"Release", func() error { return p.Release(r) }},
	} {
		if err := c.call(); !errors.Is(err, arena.ErrInvalid) {
			t.Errorf("%s of another provider's region: %v, want arena.ErrInvalid", c.what, err)
		}
		checkLive(t, f, owner, r, want, c.what+" of another provider's region")
	}
	if c := p.Counters(); c.Live() != 0 || c.Committed != 0 {
		t.Errorf("the provider that refused every call counts %+v", c)
	}
	must(t, "Decommit", owner.Decommit(r, 0, 2<<20))
	must(t, "Release", owner.Release(r))
}

// liveBytes fills the first chunk of r, committed, with a pattern and returns a copy of it.
func liveBytes(t *testing.T, r *arena.Region) []byte {
	t.Helper()
	b := mem.Bytes(r.Base, 2<<20)
	seed := uint64(r.Base)
	pattern.Random(b, &seed)
	return bytes.Clone(b)
}

// checkLive fails t unless the first chunk of r is still registered whole with p, readable,
// holds want, and copies to the device.
func checkLive(t *testing.T, f *fakecuda.Driver, p *cudamem.HostRegister, r *arena.Region, want []byte, what string) {
	t.Helper()
	if base, size, ok := p.RegistrationOf(r.Base); !ok || base != r.Base || size != 2<<20 {
		t.Fatalf("%s: the live region's first chunk is registered as [%#x, +%d) (%v), want [%#x, +2 MiB)", what, base, size, ok, r.Base)
	}
	if got := f.Stat(fakecuda.RegisteredBytes); got != 2<<20 {
		t.Fatalf("%s: the fake counts %d bytes registered, want 2 MiB", what, got)
	}
	if !readable(r.Base) || !readable(r.Base+2<<20-1) {
		t.Fatalf("%s: the live region's committed memory is no longer accessible", what)
	}
	if !bytes.Equal(mem.Bytes(r.Base, 2<<20), want) {
		t.Fatalf("%s: the live region's bytes changed", what)
	}
}

// readable reports whether the byte at p can be read, without faulting: write(2) of it to a
// pipe fails with EFAULT where it cannot.
func readable(p uintptr) bool {
	rd, wr, err := os.Pipe()
	if err != nil {
		return true
	}
	defer rd.Close()
	defer wr.Close()
	_, err = wr.Write(mem.Bytes(p, 1))
	return err == nil
}

// TestFakeVMMForeignRegion: a VMM region is committed, decommitted and released only by the
// provider that reserved it; another (device or host VMM) refuses it with arena.ErrInvalid,
// touches nothing and counts nothing. Before, any VMM provider took any VMM region: a host
// provider's Commit mapped host granules into a device arena's region, and a Release by
// another provider freed the reservation under its owner, whose counters then held it for
// good (its own Release refused), while the other's went negative.
func TestFakeVMMForeignRegion(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	owner, err := cudamem.NewDeviceVMM(public(d))
	must(t, "NewDeviceVMM", err)
	dev, err := cudamem.NewDeviceVMM(public(d))
	must(t, "NewDeviceVMM", err)
	host, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{})
	must(t, "NewHostVMM", err)
	r, err := owner.Reserve(4<<20, 2<<20)
	must(t, "Reserve", err)
	must(t, "Commit", owner.Commit(r, 0, 2<<20))
	want := owner.Counters()
	for _, p := range []counted{dev, host} {
		for _, c := range []struct {
			what string
			call func() error
		}{
			{"Commit", func() error { return p.Commit(r, 2<<20, 2<<20) }},
			{"Decommit", func() error { return p.Decommit(r, 0, 2<<20) }},
			{"Release", func() error { return p.Release(r) }},
		} {
			if err := c.call(); !errors.Is(err, arena.ErrInvalid) {
				t.Errorf("%s: %s of another provider's region: %v, want arena.ErrInvalid", p.Name(), c.what, err)
			}
			if got := p.Counters(); got.Live() != 0 || got.Committed != 0 {
				t.Errorf("%s: %s of another provider's region: it counts %+v", p.Name(), c.what, got)
			}
			if got := owner.Counters(); got.Live() != want.Live() || got.Committed != want.Committed {
				t.Errorf("%s: %s of another provider's region: its owner counts %+v, want %+v", p.Name(), c.what, got, want)
			}
		}
	}
	must(t, "MemsetD8", d.MemsetD8(r.Base, 1, 2<<20)) // still mapped, with access
	must(t, "Synchronize", d.Synchronize())
	must(t, "Decommit", owner.Decommit(r, 0, 2<<20))
	must(t, "Release", owner.Release(r))
	if c := owner.Counters(); c.Live() != 0 || c.Committed != 0 {
		t.Errorf("after Release: %+v", c)
	}
}

// TestFakeReleaseRacing: two Releases of one region race (the first stopped in its driver call,
// PauseNextCall): the second is refused with arena.ErrInvalid and frees nothing, the first
// gives the region back, and a region reserved meanwhile, which the driver may place at the
// same address, stays the caller's. Before, both went to the driver: the second freed the
// region, the driver gave its address to the next Reserve, and the first, resumed, freed that
// new region under its owner, whose own Release was then refused.
func TestFakeReleaseRacing(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	providers := providersOf(d, "DeviceMalloc", "HostAlloc", "Managed", "DeviceVMM", "HostVMM")
	for _, pr := range providers {
		p, err := pr.new()
		must(t, pr.name, err)
		r, err := p.Reserve(2<<20, 2<<20)
		must(t, "Reserve", err)
		if !f.PauseNextCall() {
			t.Fatal("PauseNextCall: a pause is armed already")
		}
		first := make(chan error, 1)
		go func() { first <- p.Release(r) }()
		for !f.Paused() {
			time.Sleep(time.Millisecond)
		}
		if err := p.Release(r); !errors.Is(err, arena.ErrInvalid) {
			t.Errorf("%s: a Release racing another of the same region: %v, want arena.ErrInvalid", pr.name, err)
		}
		next, err := p.Reserve(2<<20, 2<<20)
		must(t, "Reserve", err)
		f.ResumeCall()
		if err := <-first; err != nil {
			t.Errorf("%s: the first Release: %v", pr.name, err)
		}
		if err := p.Release(next); err != nil {
			t.Errorf("%s: Release of the region reserved while another was released: %v", pr.name, err)
		}
		if c := p.Counters(); c.Live() != 0 || c.Committed != 0 {
			t.Errorf("%s: after both regions were released: %+v", pr.name, c)
		}
	}
}

// TestFakeHostRegisterReleaseRacing: a second Release of a HostRegister region while the first
// is between its registrations' removal and its munmap is refused. Before, it found the region
// still live, unmapped it, and the first's munmap then came after it: once a Reserve had mapped
// a new region at that base in between, the first unmapped the new region under its owner.
func TestFakeHostRegisterReleaseRacing(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	r, err := p.Reserve(4<<20, 2<<20)
	must(t, "Reserve", err)
	must(t, "Commit", p.Commit(r, 0, 2<<20))
	var second error
	restore := cudamem.SetReleaseUnmapHook(func() {
		cudamem.SetReleaseUnmapHook(nil)
		second = p.Release(r)
	})
	defer restore()
	must(t, "Release", p.Release(r))
	if !errors.Is(second, arena.ErrInvalid) {
		t.Errorf("a Release racing the region's Release: %v, want arena.ErrInvalid", second)
	}
	if c := p.Counters(); c.Live() != 0 || f.Stat(fakecuda.Registrations) != 0 {
		t.Errorf("after Release: provider %+v, fake %d registrations", c, f.Stat(fakecuda.Registrations))
	}
}
