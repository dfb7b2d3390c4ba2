package fakecuda

import (
	"bytes"
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// Location types as cuda.h numbers them (CU_MEM_LOCATION_TYPE_*), for cuda.MemLocation.
const (
	locInvalid = iota
	locDevice
	locHost
	locHostNUMA
	locHostNUMACurrent
)

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestFake exercises the fake through internal/cuda: memory, VMM, registration, streams and
// events with holding, and the counters.
func TestFake(t *testing.T) {
	f := Run(t)
	if f == nil {
		return
	}
	d, err := cuda.Open(0)
	must(t, "Open", err)
	if f.Stat(Retains) != 1 {
		t.Fatalf("retains = %d", f.Stat(Retains))
	}

	// cuMemAlloc: 256-byte aligned, not page aligned; copies round-trip.
	p, err := d.MemAlloc(1 << 20)
	must(t, "MemAlloc", err)
	if p%256 != 0 || p%4096 == 0 {
		t.Errorf("MemAlloc base %#x: want 256-aligned, not page-aligned", p)
	}
	src := bytes.Repeat([]byte{1, 2, 3, 4}, 1<<18)
	dst := make([]byte, len(src))
	must(t, "HtoD", d.MemcpyHtoD(p, mem.Addr(src), uintptr(len(src))))
	must(t, "DtoH", d.MemcpyDtoH(mem.Addr(dst), p, uintptr(len(dst))))
	if !bytes.Equal(src, dst) {
		t.Error("round trip changed the data")
	}
	if err := d.MemsetD8(p+1<<20, 0, 1); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("memset past the allocation = %v, want ErrInvalidValue", err)
	}
	if f.Used(0) != 1<<20 {
		t.Errorf("used = %d", f.Used(0))
	}
	must(t, "MemFree", d.MemFree(p))

	// VMM: reserve, create, map, access, write, unmap, release.
	const g = 2 << 20
	va, err := d.MemAddressReserve(4*g, 8*g)
	must(t, "MemAddressReserve", err)
	if va%(8*g) != 0 {
		t.Errorf("reservation %#x not aligned", va)
	}
	h, err := d.MemCreate(g)
	must(t, "MemCreate", err)
	must(t, "MemMap", d.MemMap(va+g, g, h))
	if err := d.MemsetD8(va+g, 7, g); err == nil {
		t.Error("memset before MemSetAccess succeeded")
	}
	must(t, "MemSetAccess", d.MemSetAccess(va+g, g))
	must(t, "MemsetD8", d.MemsetD8(va+g, 7, g))
	back := make([]byte, g)
	must(t, "DtoH", d.MemcpyDtoH(mem.Addr(back), va+g, g))
	if back[0] != 7 || back[g-1] != 7 {
		t.Error("memset did not reach the mapping")
	}
	must(t, "MemRelease", d.MemRelease(h)) // still mapped: freed at unmap
	if f.Used(0) != g {
		t.Errorf("used after release of a mapped handle = %d", f.Used(0))
	}
	clear(back) // the mapping still holds the memory: pinmalloc's VMM decommit releases first
	must(t, "DtoH after the release", d.MemcpyDtoH(mem.Addr(back), va+g, g))
	if back[0] != 7 || back[g-1] != 7 {
		t.Error("a released handle's mapping lost its bytes before the unmap")
	}
	must(t, "MemUnmap", d.MemUnmap(va+g, g))
	must(t, "MemAddressFree", d.MemAddressFree(va, 4*g))
	f.SetMemory(0, 4*g)
	if _, err := d.MemCreate(8 * g); !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		t.Errorf("MemCreate beyond memory = %v", err)
	}

	// Registration needs readable memory and refuses overlaps.
	buf := make([]byte, 1<<16)
	must(t, "MemHostRegister", d.MemHostRegister(mem.Addr(buf), 1<<16, cuda.HostRegisterDeviceMap))
	if err := d.MemHostRegister(mem.Addr(buf)+4096, 4096, 0); !errors.Is(err, pinmalloc.ErrAlreadyRegistered) {
		t.Errorf("overlapping register = %v", err)
	}
	if dp, err := d.MemHostGetDevicePointer(mem.Addr(buf) + 8); err != nil || dp != mem.Addr(buf)+8 {
		t.Errorf("device pointer = %#x, %v", dp, err)
	}
	must(t, "MemHostUnregister", d.MemHostUnregister(mem.Addr(buf)))
	// A device pointer needs the DEVICEMAP flag.
	must(t, "MemHostRegister without DEVICEMAP", d.MemHostRegister(mem.Addr(buf), 1<<16, 0))
	if _, err := d.MemHostGetDevicePointer(mem.Addr(buf)); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("device pointer of a registration without DEVICEMAP = %v", err)
	}
	must(t, "MemHostUnregister", d.MemHostUnregister(mem.Addr(buf)))
	f.FailRegister(1, ResultOutOfMemory)
	if err := d.MemHostRegister(mem.Addr(buf), 1<<16, 0); !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		t.Errorf("injected failure = %v", err)
	}

	// Streams and events: with holding on, an event waits for Complete.
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	ev, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	f.Hold(true)
	must(t, "EventRecord", d.EventRecord(ev, s))
	if err := d.EventQuery(ev); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("held event query = %v", err)
	}
	if err := d.StreamQuery(s); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("held stream query = %v", err)
	}
	if f.Pending() != 1 {
		t.Errorf("pending streams = %d", f.Pending())
	}
	f.CompleteStream(s)
	must(t, "EventQuery", d.EventQuery(ev))
	must(t, "EventRecord", d.EventRecord(ev, s))
	must(t, "EventSynchronize", d.EventSynchronize(ev))
	must(t, "EventQuery", d.EventQuery(ev))
	queries := f.Stat(StreamQueries)
	if err := d.StreamQuery(12345); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("bogus stream query = %v", err)
	}
	must(t, "EventDestroy", d.EventDestroy(ev))
	must(t, "StreamDestroy", d.StreamDestroy(s))
	// A destroyed stream is an invalid handle (the fake keeps it, for the events recorded on
	// it, but refuses it); every query counts.
	if err := d.StreamQuery(s); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("query of a destroyed stream = %v", err)
	}
	if n := f.Stat(StreamQueries) - queries; n != 2 {
		t.Errorf("%d stream queries counted, want 2", n)
	}
	must(t, "Close", d.Close())
	if live := f.LiveObjects(); len(live) != 0 {
		t.Errorf("live objects: %v", live)
	}
}

func TestWithoutDriver(t *testing.T) {
	if !RunWithoutDriver(t) {
		return
	}
	if _, err := cuda.Open(0); !errors.Is(err, pinmalloc.ErrNoDriver) {
		t.Fatalf("Open without a driver = %v", err)
	}
}

// TestFakeCountsAbove4GiB reads a counter past 32 bits through the control call (which once
// returned an int, so Used came back truncated above 2 GiB).
func TestFakeCountsAbove4GiB(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	f.SetMemory(0, 16<<30)
	p, err := d.MemAlloc(5 << 30) // address space only: the fake maps it lazily
	must(t, "MemAlloc", err)
	if got := f.Used(0); got != 5<<30 {
		t.Errorf("Used = %d, want %d", got, uint64(5<<30))
	}
	must(t, "MemFree", d.MemFree(p))
}
