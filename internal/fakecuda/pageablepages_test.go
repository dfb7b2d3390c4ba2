package fakecuda

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestPageableCopyInaccessiblePage: a copy from or to pageable memory with a PROT_NONE or
// unmapped page inside the range (not the first, not the last) is refused
// (CUDA_ERROR_INVALID_VALUE) as one whose first byte cannot be read is, sync and async, the
// generic copy too; a copy to pageable memory with a read-only page inside is refused the same
// way. The range readable and writable again copies. Before, the fake looked at the first and
// last byte only, and faulted itself moving the bytes. Both ways the fake learns the mappings:
// by PROCMAP_QUERY, and by reading /proc/self/maps (kernels before 6.11).
func TestPageableCopyInaccessiblePage(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	t.Run("query", func(t *testing.T) {
		if !f.ReadMapsFile(false) {
			t.Skip("this kernel has no PROCMAP_QUERY (Linux 6.11)")
		}
		pageableCopyInaccessiblePage(t, f, d)
	})
	t.Run("file", func(t *testing.T) {
		f.ReadMapsFile(true)
		defer f.ReadMapsFile(false)
		pageableCopyInaccessiblePage(t, f, d)
	})
}

func pageableCopyInaccessiblePage(t *testing.T, f *Driver, d *cuda.Device) {
	const pg, n = 4096, 16 * 4096
	dp, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", d.MemFree(dp)) }()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(t, "Mmap", err)
	defer func() { must(t, "Munmap", unix.Munmap(b)) }()
	p := mem.Addr(b)
	hole := b[5*pg : 6*pg] // the sixth page: neither the first nor the last
	generic := func() []error {
		return []error{d.MemcpyAsync(uintptr(dp), p, n, 0), d.MemcpyAsync(p, uintptr(dp), n, 0)}
	}

	must(t, "Mprotect PROT_NONE", unix.Mprotect(hole, unix.PROT_NONE))
	wantCopies(t, "over a PROT_NONE page", copies(d, dp, p, n), pinmalloc.ErrInvalidValue)
	for _, err := range generic() {
		wantErr(t, "MemcpyAsync over a PROT_NONE page", err, pinmalloc.ErrInvalidValue)
	}

	must(t, "Mprotect PROT_READ", unix.Mprotect(hole, unix.PROT_READ))
	errs := copies(d, dp, p, n)
	wantErr(t, "HtoD from a read-only page", errs[0], nil)
	wantErr(t, "DtoH to a read-only page", errs[1], pinmalloc.ErrInvalidValue)
	wantErr(t, "HtoDAsync from a read-only page", errs[2], nil)
	wantErr(t, "DtoHAsync to a read-only page", errs[3], pinmalloc.ErrInvalidValue)
	errs = generic()
	wantErr(t, "MemcpyAsync from a read-only page", errs[0], nil)
	wantErr(t, "MemcpyAsync to a read-only page", errs[1], pinmalloc.ErrInvalidValue)

	must(t, "Munmap the page", unix.MunmapPtr(mem.Ptr(p+5*pg), pg))
	wantCopies(t, "over an unmapped page", copies(d, dp, p, n), pinmalloc.ErrInvalidValue)
	_, err = unix.MmapPtr(-1, 0, mem.Ptr(p+5*pg), pg, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	must(t, "Mmap the page again", err)
	wantCopies(t, "over readable pages", copies(d, dp, p, n), nil)
	must(t, "Synchronize", d.Synchronize())
	if k := f.Stat(Registrations); k != 0 {
		t.Fatalf("%d registrations, want 0", k)
	}
}
