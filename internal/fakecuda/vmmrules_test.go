package fakecuda

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestVMMRules: the VMM calls refuse what the real driver refuses (measured on the H100 or
// documented).
func TestVMMRules(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	va, err := d.MemAddressReserve(8*gran, 0)
	must(t, "MemAddressReserve", err)
	big, err := d.MemCreate(2 * gran)
	must(t, "MemCreate", err)
	wantErr(t, "MemMap at an address not a granule multiple", d.MemMap(va+4096, 2*gran, big), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemMap of a size not a granule multiple", d.MemMap(va, gran+4096, big), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemMap of more than the allocation", d.MemMap(va, 3*gran, big), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemMap running out of the reservation", d.MemMap(va+7*gran, 2*gran, big), pinmalloc.ErrInvalidValue)
	must(t, "MemMap", d.MemMap(va, 2*gran, big))
	small, err := d.MemCreate(gran)
	must(t, "MemCreate", err)
	wantErr(t, "MemMap over a mapped range", d.MemMap(va+gran, gran, small), pinmalloc.ErrInvalidValue)
	must(t, "MemMap", d.MemMap(va+2*gran, gran, small))

	wantErr(t, "MemSetAccess of a range not fully mapped", d.MemSetAccess(va, 4*gran), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemSetAccess of part of a mapping", d.MemSetAccess(va, gran), pinmalloc.ErrInvalidValue)
	wantErr(t, "memset before MemSetAccess", d.MemsetD8(va, 1, 16), pinmalloc.ErrInvalidValue)
	must(t, "MemSetAccess", d.MemSetAccess(va, 3*gran))
	if cpuReadable(t, va) {
		t.Error("the CPU can read device memory")
	}

	// A fresh granule reads zero; one device copy may span mappings side by side.
	host := make([]byte, 3*gran)
	for i := range host {
		host[i] = 0xAB
	}
	must(t, "DtoH", d.MemcpyDtoH(mem.Addr(host), va, 3*gran))
	for i, b := range host {
		if b != 0 {
			t.Fatalf("fresh granule byte %d = %#x", i, b)
		}
	}

	wantErr(t, "MemUnmap of part of a mapping", d.MemUnmap(va, gran), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemUnmap of a range cutting a mapping", d.MemUnmap(va+gran, 2*gran), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemAddressFree with mappings left", d.MemAddressFree(va, 8*gran), pinmalloc.ErrInvalidValue)
	must(t, "MemUnmap of two mappings at once", d.MemUnmap(va, 3*gran))
	wantErr(t, "memset after MemUnmap", d.MemsetD8(va, 1, 16), pinmalloc.ErrInvalidValue)
	must(t, "MemRelease", d.MemRelease(big))
	must(t, "MemRelease", d.MemRelease(small))
	wantErr(t, "MemRelease twice", d.MemRelease(small), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemAddressFree of part of a reservation", d.MemAddressFree(va, 4*gran), pinmalloc.ErrInvalidValue)
	must(t, "MemAddressFree", d.MemAddressFree(va, 8*gran))
}

// TestRegistrationRules: overlapping registrations, unregistering what is not a registration's
// base, registering memory that is not there.
func TestRegistrationRules(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	buf := make([]byte, 4*65536)
	base := (mem.Addr(buf) + 65535) &^ 65535
	must(t, "MemHostRegister", d.MemHostRegister(base, 65536, 0))
	wantErr(t, "MemHostRegister overlapping the start", d.MemHostRegister(base-4096, 8192, 0), pinmalloc.ErrAlreadyRegistered)
	wantErr(t, "MemHostRegister overlapping the end", d.MemHostRegister(base+65536-4096, 8192, 0), pinmalloc.ErrAlreadyRegistered)
	wantErr(t, "MemHostRegister covering it", d.MemHostRegister(base-4096, 2*65536, 0), pinmalloc.ErrAlreadyRegistered)
	must(t, "MemHostRegister beside it", d.MemHostRegister(base+65536, 65536, 0))
	err := d.MemHostUnregister(base + 4096)
	if r, ok := err.(cuda.Result); !ok || r != 713 {
		t.Errorf("MemHostUnregister of an interior pointer = %v, want CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", err)
	}
	must(t, "MemHostUnregister", d.MemHostUnregister(base))
	must(t, "MemHostUnregister", d.MemHostUnregister(base+65536))
	runtime.KeepAlive(buf)

	va, err := d.MemAddressReserve(gran, 0)
	must(t, "MemAddressReserve", err)
	wantErr(t, "MemHostRegister of reserved, unmapped space", d.MemHostRegister(va, 4096, 0), pinmalloc.ErrInvalidValue)
	must(t, "MemAddressFree", d.MemAddressFree(va, gran))
}
