package fakecuda

import (
	"errors"
	"syscall"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

const gran = 2 << 20

var (
	hostLoc = cuda.MemLocation{Type: locHost}
	dev0    = cuda.MemLocation{Type: locDevice, ID: 0}
	rw      = AccessReadWrite
)

// cpuReadable reports whether the CPU may read the byte at p, without faulting: write(2) from
// an unreadable address fails with EFAULT.
func cpuReadable(t *testing.T, p uintptr) bool {
	t.Helper()
	var fds [2]int
	must(t, "pipe", syscall.Pipe(fds[:]))
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	_, err := syscall.Write(fds[1], mem.Bytes(p, 1))
	if err != nil && !errors.Is(err, syscall.EFAULT) {
		t.Fatalf("write: %v", err)
	}
	return err == nil
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s = %v, want %v", what, err, want)
	}
}

// hostGranules reserves n granules and maps a host handle into each of the first m.
func hostGranules(t *testing.T, f *Driver, d *cuda.Device, n, m int) (cuda.DevicePtr, []cuda.MemHandle) {
	t.Helper()
	va, err := d.MemAddressReserve(uintptr(n)*gran, 0)
	must(t, "MemAddressReserve", err)
	hs := make([]cuda.MemHandle, m)
	for i := range hs {
		hs[i], err = f.MemCreate(d, gran, hostLoc, 0)
		must(t, "MemCreate(host)", err)
		must(t, "MemMap", d.MemMap(va+uintptr(i)*gran, gran, hs[i]))
	}
	return va, hs
}

func freeGranules(t *testing.T, f *Driver, d *cuda.Device, va cuda.DevicePtr, n int, hs []cuda.MemHandle) {
	t.Helper()
	for i, h := range hs {
		if h != 0 {
			must(t, "MemUnmap", d.MemUnmap(va+uintptr(i)*gran, gran))
			must(t, "MemRelease", f.MemRelease(d, h))
		}
	}
	must(t, "MemAddressFree", d.MemAddressFree(va, uintptr(n)*gran))
}

// TestHostVMMProperties: host locations, granularity, refused properties, the attributes.
func TestHostVMMProperties(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	for _, a := range []int{141, 145} {
		if v, err := d.Attribute(a); err != nil || v != 1 {
			t.Errorf("attribute %d = %d, %v; want 1", a, v, err)
		}
	}
	if v, err := d.Attribute(134); err != nil || v != 0 {
		t.Errorf("HOST_NUMA_ID = %d, %v; want 0", v, err)
	}
	numa := func(id int32) cuda.MemLocation { return cuda.MemLocation{Type: locHostNUMA, ID: id} }
	for _, loc := range []cuda.MemLocation{hostLoc, numa(0), dev0} {
		if g, err := f.Granularity(d, loc); err != nil || g != gran {
			t.Errorf("granularity at %+v = %d, %v", loc, g, err)
		}
	}
	current := cuda.MemLocation{Type: locHostNUMACurrent}
	_, err := f.Granularity(d, current)
	wantErr(t, "granularity at HOST_NUMA_CURRENT", err, pinmalloc.ErrInvalidValue)
	_, err = f.MemCreate(d, gran, current, 0)
	wantErr(t, "MemCreate at HOST_NUMA_CURRENT", err, pinmalloc.ErrInvalidValue)
	_, err = f.MemCreate(d, gran, numa(1), 0)
	wantErr(t, "MemCreate at NUMA node 1 of 1", err, pinmalloc.ErrInvalidValue)
	_, err = f.MemCreate(d, gran, hostLoc, 1) // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
	wantErr(t, "MemCreate(host) with a shareable handle type", err, pinmalloc.ErrInvalidValue)
	_, err = f.MemCreate(d, gran+4096, hostLoc, 0)
	wantErr(t, "MemCreate(host) of a size not a granule multiple", err, pinmalloc.ErrInvalidValue)
	_, err = f.MemCreate(d, gran, cuda.MemLocation{Type: 9}, 0)
	wantErr(t, "MemCreate at location type 9", err, pinmalloc.ErrInvalidValue)

	if f.SetNUMANodes(0) || !f.SetNUMANodes(2) {
		t.Fatal("SetNUMANodes accepted 0 or refused 2")
	}
	h, err := f.MemCreate(d, gran, numa(1), 0)
	must(t, "MemCreate at NUMA node 1 of 2", err)
	if f.Stat(HostVMMBytes) != gran || f.Used(0) != 0 {
		t.Errorf("host VMM bytes %d, device used %d: host memory must not count as device memory", f.Stat(HostVMMBytes), f.Used(0))
	}
	must(t, "MemRelease", f.MemRelease(d, h))

	// An older driver: no host VMM.
	f.SetHostVMM(false)
	for _, a := range []int{141, 145} {
		if v, err := d.Attribute(a); err != nil || v != 0 {
			t.Errorf("attribute %d without host VMM = %d, %v; want 0", a, v, err)
		}
	}
	_, err = f.MemCreate(d, gran, hostLoc, 0)
	wantErr(t, "MemCreate(host) without host VMM", err, pinmalloc.ErrNotSupported)
	_, err = f.Granularity(d, numa(0))
	wantErr(t, "granularity at a host location without host VMM", err, pinmalloc.ErrNotSupported)
	h, err = d.MemCreate(gran) // device VMM still works
	must(t, "MemCreate(device) without host VMM", err)
	must(t, "MemRelease", d.MemRelease(h))
}

// TestHostVMMAccess: a mapped host granule is out of the CPU's reach until a host location is
// granted access, and the device's access is separate.
func TestHostVMMAccess(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	va, hs := hostGranules(t, f, d, 2, 2)
	if cpuReadable(t, va) {
		t.Error("a mapped host granule is readable before any access is set")
	}
	must(t, "MemSetAccess(device)", f.MemSetAccess(d, va, 2*gran, Access{dev0, rw}))
	if cpuReadable(t, va) {
		t.Error("a host granule is readable by the CPU with only the device granted access")
	}
	must(t, "MemSetAccess(host)", f.MemSetAccess(d, va, gran, Access{hostLoc, rw}))
	if !cpuReadable(t, va) || cpuReadable(t, va+gran) {
		t.Error("host access did not reach exactly the granule it was granted on")
	}
	b := mem.Bytes(va, gran)
	if b[0] != 0 || b[gran-1] != 0 {
		t.Error("a fresh host granule does not read zero")
	}
	b[5] = 42
	numa0 := cuda.MemLocation{Type: locHostNUMA}
	must(t, "MemSetAccess(host NUMA 0 read)", f.MemSetAccess(d, va+gran, gran, Access{numa0, AccessRead}))
	if !cpuReadable(t, va+gran) {
		t.Error("read access did not make the granule readable")
	}
	// A HOST_NUMA access descriptor's id is ignored (documented).
	must(t, "MemSetAccess(HOST_NUMA 7)", f.MemSetAccess(d, va, gran, Access{cuda.MemLocation{Type: locHostNUMA, ID: 7}, rw}))
	err := f.MemSetAccess(d, va, gran, Access{cuda.MemLocation{Type: locHostNUMACurrent}, rw})
	wantErr(t, "MemSetAccess for HOST_NUMA_CURRENT", err, pinmalloc.ErrInvalidValue)
	err = f.MemSetAccess(d, va, gran, Access{dev0, 2})
	wantErr(t, "MemSetAccess with flags 2", err, pinmalloc.ErrInvalidValue)

	// Device memory cannot be granted to the host.
	dva, err := d.MemAddressReserve(gran, 0)
	must(t, "MemAddressReserve", err)
	dh, err := d.MemCreate(gran)
	must(t, "MemCreate", err)
	must(t, "MemMap", d.MemMap(dva, gran, dh))
	err = f.MemSetAccess(d, dva, gran, Access{dev0, rw}, Access{hostLoc, rw})
	wantErr(t, "MemSetAccess(host) on device memory", err, pinmalloc.ErrInvalidValue)
	must(t, "MemUnmap", d.MemUnmap(dva, gran))
	must(t, "MemRelease", d.MemRelease(dh))
	must(t, "MemAddressFree", d.MemAddressFree(dva, gran))

	// Revoking the device's access makes device-side use fail.
	must(t, "MemsetD8 with access", d.MemsetD8(va+gran, 1, 16))
	must(t, "MemSetAccess(device, none)", f.MemSetAccess(d, va+gran, gran, Access{dev0, AccessNone}))
	wantErr(t, "MemsetD8 after the device's access is revoked", d.MemsetD8(va+gran, 1, 16), pinmalloc.ErrInvalidValue)
	freeGranules(t, f, d, va, 2, hs)
}
