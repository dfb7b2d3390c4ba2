package fakecuda

import (
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

// TestUnmapNeedsMappings: cuMemUnmap takes address space that is mapped throughout (D:
// cuMemUnmap, "the range must be the entire contiguous address range that was mapped to"):
// a range with nothing mapped, a second unmap, and a range that runs past its mappings into
// unmapped reserved space are each refused (CUDA_ERROR_INVALID_VALUE) and unmap nothing; whole
// mappings side by side still unmap at once (TestVMMRules).
func TestUnmapNeedsMappings(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	va, err := d.MemAddressReserve(4*gran, 0)
	must(t, "MemAddressReserve", err)
	wantErr(t, "MemUnmap of reserved space never mapped", d.MemUnmap(va, gran), pinmalloc.ErrInvalidValue)
	h, err := d.MemCreate(gran)
	must(t, "MemCreate", err)
	must(t, "MemMap", d.MemMap(va+gran, gran, h))
	wantErr(t, "MemUnmap running past the mapping", d.MemUnmap(va+gran, 2*gran), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemUnmap starting before the mapping", d.MemUnmap(va, 2*gran), pinmalloc.ErrInvalidValue)
	if n := f.Stat(Mappings); n != 1 {
		t.Errorf("%d mappings after refused unmaps, want 1", n)
	}
	must(t, "MemSetAccess of the mapping the refusals left", d.MemSetAccess(va+gran, gran))
	must(t, "MemsetD8 of it", d.MemsetD8(va+gran, 1, gran))
	must(t, "Synchronize", d.Synchronize())
	must(t, "MemUnmap", d.MemUnmap(va+gran, gran))
	wantErr(t, "MemUnmap twice", d.MemUnmap(va+gran, gran), pinmalloc.ErrInvalidValue)
	must(t, "MemRelease", d.MemRelease(h))
	must(t, "MemAddressFree", d.MemAddressFree(va, 4*gran))
}
