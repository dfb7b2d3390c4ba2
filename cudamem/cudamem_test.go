package cudamem_test

// Tests of the CUDA providers against the fake driver of internal/fakecuda: each runs in a
// child process that loads the fake, so they run (and pass) on machines without a GPU.

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/pattern"
)

// public is d, a device opened through the binding (fakecuda), as the public API takes it.
func public(d *cuda.Device) *pcuda.Device { return cuda.Wrap[*pcuda.Device](d) }

func must(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// counted is a CUDA provider: it counts what it holds.
type counted interface {
	arena.Provider
	Counters() cudamem.Counters
}

// namedProvider makes a provider of the fake device, named for a test's messages.
type namedProvider struct {
	name string
	new  func() (counted, error)
}

// providersOf returns the providers of d named names (DeviceMalloc, DeviceVMM, HostAlloc,
// HostVMM, HostRegister, Managed), in that order.
func providersOf(d *cuda.Device, names ...string) []namedProvider {
	all := map[string]func() (counted, error){
		"DeviceMalloc": func() (counted, error) { return cudamem.NewDeviceMalloc(public(d)) },
		"DeviceVMM":    func() (counted, error) { return cudamem.NewDeviceVMM(public(d)) },
		"HostAlloc":    func() (counted, error) { return cudamem.NewHostAlloc(public(d)) },
		"HostVMM":      func() (counted, error) { return cudamem.NewHostVMM(public(d), cudamem.HostOptions{}) },
		"HostRegister": func() (counted, error) { return cudamem.NewHostRegister(public(d), cudamem.HostOptions{}) },
		"Managed":      func() (counted, error) { return cudamem.NewManaged(public(d)) },
	}
	ps := make([]namedProvider, len(names))
	for i, n := range names {
		ps[i] = namedProvider{n, all[n]}
	}
	return ps
}

// newArena makes an arena over p that never purges on its own, and checks at cleanup that
// closing it gave every driver resource back.
func newArena(t *testing.T, p counted, capacity uintptr) *arena.Arena {
	t.Helper()
	a, err := arena.New(arena.Options{Provider: p, Capacity: capacity, PurgeDelay: -1})
	must(t, "arena.New", err)
	t.Cleanup(func() {
		must(t, "arena.Close", a.Close())
		if c := p.Counters(); c.Live() != 0 || c.Committed != 0 {
			t.Errorf("%s: after Close: %+v", p.Name(), c)
		}
	})
	return a
}

func TestFakeHostRegister(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	if p.Name() != "cuda-host-register" || p.Kind() != arena.HostPinned || !p.Caps().Aligns || !p.Caps().Decommits || p.Caps().Granule != 2<<20 {
		t.Fatalf("provider %s %s %+v", p.Name(), p.Kind(), p.Caps())
	}
	a := newArena(t, p, 64<<20)

	small, err := a.Alloc(4096, 64)
	must(t, "Alloc 4 KiB", err)
	big, err := a.Alloc(5<<20, arena.DefaultChunkSize) // three chunks, one registration
	must(t, "Alloc 5 MiB", err)
	st := a.Stats()
	c := p.Counters()
	if uint64(c.Committed) != st.Committed || f.Stat(fakecuda.RegisteredBytes) != c.Committed || st.Locked != st.Committed || st.Committed != 8<<20 {
		t.Errorf("committed: arena %d (locked %d), provider %d, fake registered %d; want 8 MiB",
			st.Committed, st.Locked, c.Committed, f.Stat(fakecuda.RegisteredBytes))
	}
	if c.Registrations != 2 || f.Stat(fakecuda.Registrations) != 2 || st.Counters.Registrations != 2 {
		t.Errorf("registrations: provider %d, fake %d, stats %+v; want 2", c.Registrations, f.Stat(fakecuda.Registrations), st.Counters)
	}
	if base, size, ok := p.RegistrationOf(big.Base + big.Size - 1); !ok || base > big.Base || base+size < big.Base+big.Size {
		t.Errorf("the 5 MiB span [%#x, +%d) is not inside one registration: [%#x, +%d) %v", big.Base, big.Size, base, size, ok)
	}
	if st.CommitBytes != 8<<20 || st.CommitTime <= 0 || st.CommitPerGiB() <= 0 {
		t.Errorf("commit time %v for %d bytes (%v per GiB)", st.CommitTime, st.CommitBytes, st.CommitPerGiB())
	}
	b := mem.Bytes(big.Base, big.Size)
	b[0], b[len(b)-1] = 1, 2
	copyBoth(t, d, big.Base, big.Size)
	for _, s := range []arena.Span{small, big} {
		if dp, err := p.DevicePointer(s.Base + 8); err != nil || dp != pcuda.DevicePtr(s.Base+8) {
			t.Errorf("DevicePointer(%#x) = %#x, %v", s.Base+8, dp, err)
		}
	}
	must(t, "Free", a.Free(big))
	must(t, "Free", a.Free(small))
	a.Trim()
	if n := f.Stat(fakecuda.Registrations); n != 0 || p.Counters().Committed != 0 || a.Stats().Committed != 0 {
		t.Errorf("after Trim: %d registrations, provider %+v, arena committed %d", n, p.Counters(), a.Stats().Committed)
	}
	// Decommitted memory is protected and no longer registered; committed again it reads zero.
	again, err := a.Alloc(5<<20, arena.DefaultChunkSize)
	must(t, "Alloc again", err)
	if !again.Zeroed || mem.Bytes(again.Base, 1)[0] != 0 {
		t.Errorf("recommitted span: Zeroed %v, first byte %d", again.Zeroed, mem.Bytes(again.Base, 1)[0])
	}
	copyBoth(t, d, again.Base, again.Size)
	must(t, "Free", a.Free(again))
}

// copyBoth copies [p, p+n) of host memory to the device and back (sync and async), and
// checks the bytes and that the fake saw pinned copies only.
func copyBoth(t *testing.T, d *cuda.Device, p, n uintptr) {
	t.Helper()
	host := mem.Bytes(p, n)
	pattern.Fill(host, 256, func(i int) byte { return byte(i*7 + 3) })
	want := append([]byte(nil), host...)
	dst, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", d.MemFree(dst)) }()
	must(t, "MemcpyHtoD", d.MemcpyHtoD(dst, p, n))
	clear(host)
	must(t, "MemcpyDtoHAsync", d.MemcpyDtoHAsync(p, dst, n, 0))
	must(t, "Synchronize", d.Synchronize())
	if !bytes.Equal(host, want) {
		t.Errorf("%d bytes at %#x changed in a round trip through the device", n, p)
	}
}

// TestFakeHostRegisterJoin makes ranges committed apart one registration, and cuts
// registrations that a decommit or a join reaches into.
func TestFakeHostRegisterJoin(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	const g = 2 << 20
	r, err := p.Reserve(8*g, g)
	must(t, "Reserve", err)
	must(t, "Commit", p.Commit(r, 0, g))
	must(t, "Commit", p.Commit(r, g, 2*g))
	dst, err := d.MemAlloc(2 * g)
	must(t, "MemAlloc", err)
	if err := d.MemcpyHtoD(dst, r.Base, 2*g); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("a copy spanning two registrations = %v, want CUDA_ERROR_INVALID_VALUE", err)
	}
	must(t, "MemFree", d.MemFree(dst))
	calls := f.Stat(fakecuda.RegisterCalls)
	must(t, "Join", p.Join(r, 0, 3*g))
	if n := f.Stat(fakecuda.Registrations); n != 1 {
		t.Errorf("after Join: %d registrations, want 1", n)
	}
	must(t, "Join again", p.Join(r, 0, 3*g))
	if n := f.Stat(fakecuda.RegisterCalls); n != calls+1 {
		t.Errorf("joining twice made %d register calls, want 1", n-calls)
	}
	copyBoth(t, d, r.Base, 3*g)
	must(t, "Decommit", p.Decommit(r, 2*g, g)) // cuts the registration
	if n, b := f.Stat(fakecuda.Registrations), f.Stat(fakecuda.RegisteredBytes); n != 1 || b != 2*g {
		t.Errorf("after a decommit of the last granule: %d registrations of %d bytes, want 1 of 4 MiB", n, b)
	}
	if _, err := p.DevicePointer(r.Base + 2*g); err == nil {
		t.Error("a decommitted granule still has a device pointer")
	}
	must(t, "Join part", p.Join(r, g, g)) // cut on both sides
	if n := f.Stat(fakecuda.Registrations); n != 2 {
		t.Errorf("after joining the second granule alone: %d registrations, want 2", n)
	}
	copyBoth(t, d, r.Base+g, g)
	must(t, "Release", p.Release(r)) // undoes the registrations left
	if c := p.Counters(); c.Live() != 0 || c.Committed != 0 {
		t.Errorf("after Release: %+v", c)
	}
}

func TestFakeHostVMM(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	prov, err := cudamem.NewHost(public(d), cudamem.HostOptions{Devices: []int{1}})
	must(t, "NewHost", err)
	p, ok := prov.(*cudamem.HostVMM)
	if !ok || p.Name() != "cuda-host-vmm" || p.Kind() != arena.HostPinned || p.Caps().Granule != 2<<20 || !p.Caps().ZeroOnCommit {
		t.Fatalf("NewHost with host VMM = %T %s %+v", prov, prov.Name(), prov.Caps())
	}
	if loc := p.Location(); loc != (pcuda.Location{Type: pcuda.LocationHostNUMA, ID: 0}) {
		t.Errorf("location %+v, want host NUMA node 0", loc)
	}
	a := newArena(t, p, 1<<30)
	spans := map[uintptr]arena.Span{}
	for _, n := range []uintptr{4096, 1 << 20, 2 << 20, 5<<20 + 123, 16 << 20} {
		s, err := a.Alloc(n, 256)
		must(t, "Alloc", err)
		if !s.Zeroed || mem.Bytes(s.Base, n)[n-1] != 0 {
			t.Errorf("fresh span of %d bytes: Zeroed %v", n, s.Zeroed)
		}
		if dp, err := p.DevicePointer(s.Base + n - 1); err != nil || dp != pcuda.DevicePtr(s.Base+n-1) {
			t.Errorf("DevicePointer = %#x, %v", dp, err)
		}
		copyBoth(t, d, s.Base, n)
		spans[n] = s
	}
	if f.Stat(fakecuda.PageableCopies) != 0 || f.Stat(fakecuda.PinnedCopies) == 0 || f.Stat(fakecuda.Registrations) != 0 {
		t.Errorf("pinned copies %d, pageable %d, registrations %d", f.Stat(fakecuda.PinnedCopies), f.Stat(fakecuda.PageableCopies), f.Stat(fakecuda.Registrations))
	}
	st := a.Stats()
	if uint64(f.Stat(fakecuda.HostVMMBytes)) != st.Committed || st.Locked != st.Committed || st.Counters.DriverObjects == 0 {
		t.Errorf("host VMM bytes %d, arena %+v", f.Stat(fakecuda.HostVMMBytes), st)
	}
	// Device 1 was granted access too: it copies the same memory.
	d1 := f.Open(t, 1)
	s := spans[5<<20+123]
	copyBoth(t, d1, s.Base, s.Size)
	// Decommit and recommit: a freed span's granules go back, and come back reading zero.
	for _, n := range []uintptr{16 << 20, 5<<20 + 123} {
		must(t, "Free", a.Free(spans[n]))
	}
	a.Trim()
	if st := a.Stats(); uint64(f.Stat(fakecuda.HostVMMBytes)) != st.Committed || st.Purged < 22<<20 {
		t.Errorf("after Trim: host VMM bytes %d, arena committed %d, purged %d", f.Stat(fakecuda.HostVMMBytes), st.Committed, st.Purged)
	}
	again, err := a.Alloc(16<<20, 256)
	must(t, "Alloc again", err)
	if !again.Zeroed || mem.Bytes(again.Base, again.Size)[3<<20] != 0 {
		t.Errorf("recommitted span: Zeroed %v", again.Zeroed)
	}
	copyBoth(t, d, again.Base, again.Size)
	must(t, "Free", a.Free(again))
	for _, n := range []uintptr{4096, 1 << 20, 2 << 20} {
		must(t, "Free", a.Free(spans[n]))
	}
}

// TestFakeHostVMMChoice checks where cudamem.NewHost puts host memory: the node nearest the device,
// a node asked for, the registration fallback on a driver without host VMM.
func TestFakeHostVMMChoice(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	f.SetNUMANodes(2)
	d1 := f.Open(t, 1)
	p, err := cudamem.NewHostVMM(public(d1), cudamem.HostOptions{})
	must(t, "NewHostVMM", err)
	if loc := p.Location(); loc.Type != pcuda.LocationHostNUMA || loc.ID != 1 {
		t.Errorf("device 1's host memory on %+v, want its nearest node 1", loc)
	}
	p, err = cudamem.NewHostVMM(public(d1), cudamem.HostOptions{NUMA: arena.NUMANode(0)})
	must(t, "NewHostVMM", err)
	if loc := p.Location(); loc.ID != 0 {
		t.Errorf("NUMANode(0) gave %+v", loc)
	}
	if _, err := cudamem.NewHostVMM(public(d1), cudamem.HostOptions{NUMA: arena.NUMANode(5)}); !errors.Is(err, arena.ErrInvalid) || !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("a node that does not exist = %v", err)
	}
	f.SetHostVMM(false)
	prov, err := cudamem.NewHost(public(d1), cudamem.HostOptions{})
	must(t, "NewHost", err)
	if _, ok := prov.(*cudamem.HostRegister); !ok {
		t.Errorf("NewHost without host VMM = %T, want the registration provider", prov)
	}
	if _, err := cudamem.NewHostVMM(public(d1), cudamem.HostOptions{}); !errors.Is(err, pinmalloc.ErrNotSupported) {
		t.Errorf("NewHostVMM without host VMM = %v", err)
	}
}

func TestFakeHostVMMRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostVMM(public(d), cudamem.HostOptions{})
	must(t, "NewHostVMM", err)
	a := newArena(t, p, 16<<20)
	s, err := a.Alloc(4<<20, 256)
	must(t, "Alloc", err)
	f.SetHostVMM(false) // the driver refuses new host granules from now on
	if _, err := a.Alloc(4<<20, 256); !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrNotSupported) || !strings.Contains(err.Error(), "cuMemCreate") {
		t.Errorf("Alloc with cuMemCreate refused = %v", err)
	}
	if st := a.Stats(); st.Committed != 4<<20 || p.Counters().Handles != 2 {
		t.Errorf("a refused commit left %d bytes committed (provider %+v)", st.Committed, p.Counters())
	}
	f.SetHostVMM(true)
	must(t, "Free", a.Free(s))
}

func TestFakeHostRegisterRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	a := newArena(t, p, 16<<20)
	f.FailRegister(1, fakecuda.ResultOutOfMemory)
	_, err = a.Alloc(1<<20, 64)
	if !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrOutOfMemory) || !errors.Is(err, arena.ErrExhausted) || !strings.Contains(err.Error(), "cuMemHostRegister") {
		t.Fatalf("Alloc with registration refused = %v; want ErrCommit and pinmalloc.ErrOutOfMemory", err)
	}
	if st := a.Stats(); st.Committed != 0 || p.Counters().Committed != 0 {
		t.Errorf("a refused commit left %d bytes committed (provider %+v)", st.Committed, p.Counters())
	}
	s, err := a.Alloc(1<<20, 64) // the next registration succeeds
	must(t, "Alloc after a refusal", err)
	must(t, "Free", a.Free(s))
}

func TestFakeHostPopulate(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{HostOptions: arena.HostOptions{Populate: true}})
	must(t, "NewHostRegister", err)
	a := newArena(t, p, 4<<20)
	s, err := a.Alloc(4096, 64)
	must(t, "Alloc", err)
	if f.Stat(fakecuda.RegisteredBytes) != 4<<20 {
		t.Errorf("a populated region registered %d bytes, want all 4 MiB", f.Stat(fakecuda.RegisteredBytes))
	}
	must(t, "Free", a.Free(s))
}

func TestFakeHostAlloc(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostAlloc(public(d))
	must(t, "NewHostAlloc", err)
	if p.Name() != "cuda-hostalloc" || p.Caps().Aligns || p.Caps().Decommits {
		t.Fatalf("provider %s %+v", p.Name(), p.Caps())
	}
	a := newArena(t, p, 8<<20)
	s, err := a.Alloc(3<<20, 256)
	must(t, "Alloc", err)
	if f.Stat(fakecuda.HostAllocs) != 1 || p.Counters().Allocations != 1 || a.Stats().Committed != 8<<20 {
		t.Errorf("host allocs %d, provider %+v, arena %+v", f.Stat(fakecuda.HostAllocs), p.Counters(), a.Stats())
	}
	if dp, err := p.DevicePointer(s.Base); err != nil || dp != pcuda.DevicePtr(s.Base) {
		t.Errorf("DevicePointer = %#x, %v", dp, err)
	}
	clear(mem.Bytes(s.Base, s.Size))
	must(t, "Zero", a.Zero(s.Base, 64))
	must(t, "Free", a.Free(s))
}

// roundTrip writes a pattern to device memory at p, reads it back and compares.
func roundTrip(t *testing.T, d *cuda.Device, p, n uintptr) {
	t.Helper()
	src, dst := bytes.Repeat([]byte{0xA5, 0x5A, 0x11}, int(n/3)+1)[:n], make([]byte, n)
	must(t, "MemcpyHtoD", d.MemcpyHtoD(p, mem.Addr(src), n))
	must(t, "MemcpyDtoH", d.MemcpyDtoH(mem.Addr(dst), p, n))
	if !bytes.Equal(src, dst) {
		t.Errorf("device round trip of %d bytes at %#x changed the data", n, p)
	}
}

func TestFakeVMM(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	prov, err := cudamem.NewDevice(public(d))
	must(t, "NewDevice", err)
	p, ok := prov.(*cudamem.DeviceVMM)
	if !ok || p.Name() != "cuda-vmm" || p.Kind() != arena.Device || p.Caps().Granule != 2<<20 || !p.Caps().Aligns {
		t.Fatalf("NewDevice = %T %s %+v; want the VMM provider", prov, prov.Name(), prov.Caps())
	}
	a := newArena(t, p, 0) // capacity from cudamem.DefaultDeviceCapacity: 90 % of 1 GiB free, in granules
	if want := uintptr(1<<30) / 100 * 90 &^ (2<<20 - 1); a.Capacity() != want {
		t.Errorf("default capacity = %d, want %d", a.Capacity(), want)
	}
	s, err := a.Alloc(3<<20, arena.DefaultChunkSize)
	must(t, "Alloc", err)
	if s.Base%(2<<20) != 0 || f.Stat(fakecuda.Handles) != 2 || f.Used(0) != 4<<20 || p.Counters().Committed != 4<<20 {
		t.Errorf("span %#x: %d handles, %d used, provider %+v", s.Base, f.Stat(fakecuda.Handles), f.Used(0), p.Counters())
	}
	roundTrip(t, d, s.Base, s.Size)
	must(t, "Zero", a.Zero(s.Base, s.Size))
	// Read on a non-blocking stream, which does not wait for the legacy stream: Zero must have
	// finished its memset when it returned, not left it queued there.
	st, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer d.StreamDestroy(st)
	got := make([]byte, s.Size)
	must(t, "MemcpyDtoHAsync", d.MemcpyDtoHAsync(mem.Addr(got), s.Base, s.Size, st))
	must(t, "StreamSynchronize", d.StreamSynchronize(st))
	if !bytes.Equal(got, make([]byte, s.Size)) {
		t.Error("Zero left bytes set")
	}
	must(t, "Free", a.Free(s))
	a.Trim()
	if f.Stat(fakecuda.Handles) != 0 || f.Stat(fakecuda.Mappings) != 0 || f.Used(0) != 0 || a.Stats().Committed != 0 {
		t.Errorf("after Trim: %d handles, %d mappings, %d used, arena committed %d",
			f.Stat(fakecuda.Handles), f.Stat(fakecuda.Mappings), f.Used(0), a.Stats().Committed)
	}
	if f.Stat(fakecuda.Reservations) != 1 {
		t.Errorf("reservations = %d, want 1 until Close", f.Stat(fakecuda.Reservations))
	}
}

func TestFakeVMMOutOfMemory(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetMemory(0, 64<<20)
	p, err := cudamem.NewDeviceVMM(public(d))
	must(t, "NewDeviceVMM", err)
	a := newArena(t, p, 0) // 56 MiB: 90 % of what is free, in granules
	keep, err := a.Alloc(4<<20, arena.DefaultChunkSize)
	must(t, "Alloc 4 MiB", err)
	defer func() { must(t, "Free", a.Free(keep)) }()
	other, err := d.MemAlloc(40 << 20) // someone else takes device memory: 20 MiB stay free
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", d.MemFree(other)) }()
	_, err = a.Alloc(24<<20, arena.DefaultChunkSize)
	if !errors.Is(err, arena.ErrCommit) || !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		t.Fatalf("Alloc beyond the device = %v; want ErrCommit and pinmalloc.ErrOutOfMemory", err)
	}
	for _, want := range []string{"25165824 bytes asked", "20971520 bytes free of 67108864", "4194304 bytes committed by this cuda-vmm provider"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if f.Stat(fakecuda.Handles) != 2 || p.Counters().Handles != 2 {
		t.Errorf("a failed commit kept handles: fake %d, provider %+v", f.Stat(fakecuda.Handles), p.Counters())
	}
}

func TestFakeMallocFallback(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetVMM(false)
	f.SetMemory(0, 64<<20)
	prov, err := cudamem.NewDevice(public(d))
	must(t, "NewDevice", err)
	p, ok := prov.(*cudamem.DeviceMalloc)
	if !ok || p.Name() != "cuda-malloc" || p.Caps().Aligns || p.Kind() != arena.Device {
		t.Fatalf("NewDevice without VMM = %T %s", prov, prov.Name())
	}
	if _, err := cudamem.NewDeviceVMM(public(d)); !errors.Is(err, pinmalloc.ErrNotSupported) {
		t.Errorf("NewDeviceVMM without VMM = %v", err)
	}
	a := newArena(t, p, 0)
	if want := uintptr(64<<20) / 100 * 90 &^ (2<<20 - 1); a.Capacity() != want {
		t.Errorf("default capacity = %d, want %d", a.Capacity(), want)
	}
	s, err := a.Alloc(1<<20, 256)
	must(t, "Alloc", err)
	st := a.Stats()
	if st.AlignWaste != 0 || a.ChunkAlign() != arena.DefaultAlign || s.Base%(2<<20) == 0 {
		t.Errorf("unaligned cuMemAlloc base: waste %d, chunk align %d, span %#x", st.AlignWaste, a.ChunkAlign(), s.Base)
	}
	roundTrip(t, d, s.Base, s.Size)
	must(t, "Free", a.Free(s))

	// A region the device cannot hold: ErrReserve and pinmalloc.ErrOutOfMemory, with the figures.
	_, err = p.Reserve(128<<20, 2<<20)
	if !errors.Is(err, arena.ErrReserve) || !errors.Is(err, pinmalloc.ErrOutOfMemory) || !strings.Contains(err.Error(), "committed by this cuda-malloc provider") {
		t.Errorf("Reserve beyond the device = %v", err)
	}
}

func TestFakeManaged(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewManaged(public(d))
	must(t, "NewManaged", err)
	if p.Name() != "cuda-managed" || p.Kind() != arena.Managed || !p.Kind().HostAccessible() {
		t.Fatalf("provider %s %s", p.Name(), p.Kind())
	}
	if _, err := arena.New(arena.Options{Provider: p}); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("managed arena without a capacity = %v", err)
	}
	a := newArena(t, p, 16<<20)
	s, err := a.Alloc(1<<20, 256)
	must(t, "Alloc", err)
	if f.Stat(fakecuda.ManagedAllocs) != 1 {
		t.Errorf("managed allocations = %d", f.Stat(fakecuda.ManagedAllocs))
	}
	b := mem.Bytes(s.Base, s.Size) // the host may touch managed memory
	b[0] = 9
	must(t, "Zero", a.Zero(s.Base, s.Size))
	if b[0] != 0 {
		t.Error("Zero did not clear managed memory")
	}
	loc := public(d).Location()
	must(t, "Prefetch to device", p.Prefetch(s.Base, s.Size, loc, 0))
	must(t, "Prefetch to host", p.Prefetch(s.Base, s.Size, pcuda.HostLocation(), 0))
	must(t, "Advise", p.Advise(s.Base, s.Size, pcuda.AdviseSetPreferredLocation, loc))
	if err := p.Prefetch(s.Base, 0, loc, 0); !errors.Is(err, arena.ErrInvalid) || !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("Prefetch of nothing = %v", err)
	}
	// The public Location reaches the driver field by field: a device the fake lacks is refused.
	if err := p.Advise(s.Base, s.Size, pcuda.AdviseSetAccessedBy, pcuda.Location{Type: pcuda.LocationDevice, ID: 7}); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("Advise for device 7 = %v; want pinmalloc.ErrInvalidValue", err)
	}
	// An ID beyond the driver's int is refused, not wrapped onto another (1<<32: device 0).
	far := pcuda.Location{Type: pcuda.LocationDevice, ID: 1 << 32}
	if err := p.Prefetch(s.Base, s.Size, far, 0); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("Prefetch to device 1<<32 = %v; want arena.ErrInvalid", err)
	}
	if err := p.Advise(s.Base, s.Size, pcuda.AdviseSetAccessedBy, far); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("Advise for device 1<<32 = %v; want arena.ErrInvalid", err)
	}
	must(t, "Free", a.Free(s))
}

// TestFakeMultiDevice gives each of two devices its own provider and arena, sized by its own free
// memory, and checks that memory lands on the right device.
func TestFakeMultiDevice(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	f.SetMemory(1, 256<<20)
	n, err := cuda.Count()
	if err != nil || n != 2 {
		t.Fatalf("Count = %d, %v", n, err)
	}
	var arenas [2]*arena.Arena
	for i := range arenas {
		d := f.Open(t, i)
		p, err := cudamem.NewDevice(public(d))
		must(t, "NewDevice", err)
		arenas[i] = newArena(t, p.(counted), 0)
	}
	if c0, c1 := arenas[0].Capacity(), arenas[1].Capacity(); c0 <= c1 || c1 != uintptr(256<<20)/100*90&^(2<<20-1) {
		t.Errorf("capacities %d and %d", c0, c1)
	}
	s, err := arenas[1].Alloc(6<<20, arena.DefaultChunkSize)
	must(t, "Alloc on device 1", err)
	if f.Used(0) != 0 || f.Used(1) != 6<<20 {
		t.Errorf("used: device 0 %d, device 1 %d", f.Used(0), f.Used(1))
	}
	must(t, "Free", arenas[1].Free(s))
}

func TestProvidersNeedADevice(t *testing.T) {
	_, err1 := cudamem.NewHost(nil, cudamem.HostOptions{})
	_, err2 := cudamem.NewHostAlloc(nil)
	_, err3 := cudamem.NewDevice(nil)
	_, err4 := cudamem.NewManaged(nil)
	_, err5 := cudamem.DefaultDeviceCapacity(nil)
	for i, err := range []error{err1, err2, err3, err4, err5} {
		if !errors.Is(err, pinmalloc.ErrNoDriver) {
			t.Errorf("constructor %d with no device = %v, want pinmalloc.ErrNoDriver", i+1, err)
		}
	}
}

// TestFakeHostPortable: pinned host memory from a provider made on device 0 copies by DMA to
// and from device 1 as well (registrations are made PORTABLE: without it the driver pins them
// for device 0's context only, and the fake refuses device 1's copies; cuMemHostAlloc memory is
// every context's under unified addressing, PORTABLE or not, and is allocated PORTABLE anyway).
func TestFakeHostPortable(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	d1 := f.Open(t, 1)
	reg, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	alloc, err := cudamem.NewHostAlloc(public(d))
	must(t, "NewHostAlloc", err)
	for _, p := range []counted{reg, alloc} {
		a := newArena(t, p, 64<<20)
		s, err := a.Alloc(3<<20, 256)
		must(t, "Alloc", err)
		copyBoth(t, d1, s.Base, s.Size)
		must(t, "Free", a.Free(s))
	}
}
