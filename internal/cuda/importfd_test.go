package cuda_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestImportFDOutOfRange: a descriptor beyond the driver's int is refused, not cut to its low
// 32 bits. MemImportFD passed C.int(fd), so 1<<32 + fd imported descriptor fd: another
// allocation than the one named (cudamem.ImportHostExport takes the int from its caller).
func TestImportFDOutOfRange(t *testing.T) {
	_, d := fakecuda.RunDevice(t)
	if d == nil {
		return
	}
	loc := cuda.MemLocation{Type: cuda.LocationHostNUMA}
	gran, err := d.MemGetAllocationGranularityAt(loc)
	need(t, "MemGetAllocationGranularityAt", err)
	h, err := d.MemCreateExportable(gran, loc)
	need(t, "MemCreateExportable", err)
	defer func() { need(t, "MemRelease", d.MemRelease(h)) }()
	fd, err := d.MemExportFD(h)
	need(t, "MemExportFD", err)
	defer unix.Close(fd)
	for _, bad := range []int{1<<32 + fd, -1<<32 + fd, -1} {
		h2, err := d.MemImportFD(bad)
		if err == nil {
			need(t, "MemRelease", d.MemRelease(h2))
			t.Errorf("MemImportFD(%d) imported a handle, want an error matching ErrInvalidValue", bad)
			continue
		}
		if !errors.Is(err, pinmalloc.ErrInvalidValue) {
			t.Errorf("MemImportFD(%d) = %v, want an error matching ErrInvalidValue", bad, err)
		}
	}
}
